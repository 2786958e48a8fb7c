"""Soak: a minute of live 30 fps video through a real pipeline, checking that nothing grows.

A realtime synthetic camera (DROP_OLDEST) feeds the shipped fast model with a latency budget and a
real file sink. A side task samples, every second, each bounded structure the frames pass through:
the source's hand-off, the pipeline's work and output channels, the ring buffer, the windower, the
latency recorders; and, a few times, the number of live Frame objects. Every assertion is on counts,
none on timings, so a loaded machine makes the run drop or pass through more frames, never fail.
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.channel import ChannelStats
from streamer.core.gate import MotionGate, SceneCutDetector
from streamer.core.latency import LatencyBudget
from streamer.core.ring import RingStats
from streamer.core.windower import Windower
from streamer.engine.pipeline import Pipeline, PipelineReport
from streamer.frame import Frame
from streamer.sinks import FileSink
from streamer.sources import SyntheticSource
from tests.media import probe

pytestmark = pytest.mark.slow

SECONDS = 60
FPS = 30
FRAMES = SECONDS * FPS
QUEUE_SIZE = 8
FRAME_COUNT_EVERY = 10
"""Count live Frame objects every this many samples (a full gc walk costs some milliseconds)."""
FRAME_SLACK = 16
"""Frames the last third may hold beyond the first third's peak: a batch in the model, one in the sink."""


@dataclass
class Sample:
    channels: list[ChannelStats]
    ring: RingStats
    pending: int
    recorder_bytes: int
    in_flight: int
    frames_alive: int | None = None


@dataclass
class Soak:
    samples: list[Sample] = field(default_factory=list)


def live_frames() -> int:
    return sum(1 for obj in gc.get_objects() if type(obj) is Frame)


def sample(run: Pipeline, n: int) -> Sample:
    source = run.source.stats()
    assert source is not None
    counters = run.counters()
    return Sample(
        channels=run.queue_stats(),
        ring=run.ring.stats(),
        pending=run.windower.pending,
        recorder_bytes=run.recorder_bytes(),
        in_flight=counters["in"] - counters["out"],
        frames_alive=live_frames() if n % FRAME_COUNT_EVERY == 0 else None,
    )


@pytest.mark.timeout(SECONDS * 3)
def test_a_minute_of_live_video_grows_no_queue_ring_or_frame_count(tmp_path: Path) -> None:
    out = tmp_path / "soak.mp4"
    source = SyntheticSource(width=320, height=180, fps=FPS, frames=FRAMES, realtime=True, noise_sigma=10)
    sink = FileSink(out, preset="ultrafast")
    run = Pipeline(
        source,
        sink,
        OnnxBackend(TEMPORAL_FILTER),
        Windower(5),
        MotionGate(),
        LatencyBudget(budget_ms=250.0),
        max_batch=4,
        queue_size=QUEUE_SIZE,
        scene_cuts=SceneCutDetector(40.0),
    )
    soak = Soak()

    async def scenario() -> PipelineReport:
        running = asyncio.create_task(run.run())
        while source.stats() is None and not running.done():
            await asyncio.sleep(0.01)
        n = 0
        while not running.done():
            soak.samples.append(sample(run, n))
            n += 1
            await asyncio.wait({running}, timeout=1.0)
        return running.result()

    report = asyncio.run(scenario())

    samples = soak.samples
    assert len(samples) >= SECONDS // 2, "the side task sampled too rarely to judge growth"
    for s in samples:
        for stats in s.channels:
            assert stats.depth <= stats.max_depth <= stats.capacity, stats
        assert s.ring.size <= s.ring.capacity
        assert s.pending <= run.windower.history
        assert s.in_flight <= 2 * QUEUE_SIZE + run.max_batch + run.windower.history + 2
    assert {s.recorder_bytes for s in samples} == {samples[0].recorder_bytes}  # preallocated, fixed
    assert run.ring.stats().dropped == 0  # the ring never lost a frame a window still needed

    counted = [s.frames_alive for s in samples if s.frames_alive is not None]
    third = max(1, len(counted) // 3)
    assert len(counted) >= 3
    assert max(counted[-third:]) <= max(counted[:third]) + FRAME_SLACK, counted

    final = source.stats()
    assert final is not None
    assert final.put == FRAMES  # the camera made every frame
    assert final.put == report.frames_in + report.source_dropped  # each reached the pipeline or was counted
    assert report.frames_in == report.frames_out + report.outcomes["budget_drop"]
    assert sum(report.outcomes.values()) == report.frames_in
    assert probe(out).frames == report.frames_out == sink.frames_written
    print(
        f"soak: {FRAMES} frames in {report.wall_s:.1f} s; in {report.frames_in}, out {report.frames_out}, "
        f"dropped at the source {report.source_dropped}; outcomes {report.outcomes}; "
        f"live Frames per sample {counted}; peak in flight {max(s.in_flight for s in samples)}"
    )
