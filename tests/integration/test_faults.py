"""Faults and bad input around files, sinks and the command line, with real files, encoders and processes.

Each test names the fault, and checks the documented outcome (docs/faults.md): a one-line error that
names the input and the fix, or recovery; and that whatever was written stays a file players decode.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.channel import ChannelStats
from streamer.core.gate import MotionGate, SceneCutDetector
from streamer.core.windower import Windower
from streamer.engine.pipeline import Outcome, Pipeline, PipelineReport
from streamer.errors import FrameError, SinkError, StreamerError
from streamer.frame import Frame, StreamInfo
from streamer.sinks import FileSink, NullSink
from streamer.sinks.base import Sink
from streamer.sources import FileSource, Source, SyntheticSource
from tests.media import probe

pytestmark = pytest.mark.slow


def pipeline(source: Source, sink: Sink, **kwargs: object) -> Pipeline:
    """The shipped fast model with the gate and scene-cut detection on, as `streamer run` builds it."""
    return Pipeline(
        source,
        sink,
        OnnxBackend(TEMPORAL_FILTER),
        Windower(5),
        MotionGate(),
        max_batch=4,
        scene_cuts=SceneCutDetector(40.0),
        **kwargs,  # type: ignore[arg-type]
    )


def solid(value: int, width: int, height: int) -> av.VideoFrame:
    return av.VideoFrame.from_ndarray(np.full((height, width, 3), value, dtype=np.uint8), format="rgb24")


def resolution_change_clip(path: Path, first: tuple[int, int], second: tuple[int, int], n: int) -> Path:
    """An MPEG-TS file whose H.264 stream is ``n`` frames at ``first`` then ``n`` at ``second``.

    Two encoders feed one stream, as a camera that changes resolution does: the second segment's
    in-band SPS tells the decoder the new size.
    """
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast", "bf": "0"})
        stream.width, stream.height, stream.pix_fmt = *first, "yuv420p"
        for i in range(n):
            frame = solid(i * 5, *first)
            frame.pts, frame.time_base = i, Fraction(1, 25)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
        encoder = av.CodecContext.create("libx264", "w")
        encoder.width, encoder.height, encoder.pix_fmt = *second, "yuv420p"
        encoder.time_base, encoder.framerate = Fraction(1, 25), Fraction(25)
        encoder.options = {"preset": "ultrafast", "bf": "0"}
        packets = []
        for i in range(n, 2 * n):
            frame = solid(i * 5, *second)
            frame.pts, frame.time_base = i, Fraction(1, 25)
            packets += encoder.encode(frame)
        packets += encoder.encode(None)
        for packet in packets:
            packet.stream = stream
            container.mux(packet)
    return path


# --- resolution change mid-stream ----------------------------------------------------------------------


def test_resolution_change_starts_a_new_run_and_the_model_follows_the_new_size(tmp_path: Path) -> None:
    clip = resolution_change_clip(tmp_path / "change.ts", (96, 64), (128, 72), 20)
    sent: list[tuple[int, tuple[int, ...], Outcome]] = []
    run = pipeline(
        FileSource(clip), NullSink(), on_output=lambda s, o, oc: sent.append((s.index, o.pixels.shape, oc))
    )

    report = asyncio.run(run.run())

    assert report.frames_in == report.frames_out == 40
    assert report.discontinuities == 1  # the size change alone ended the first run
    assert [shape for _, shape, _ in sent] == [(64, 96, 3)] * 20 + [(72, 128, 3)] * 20
    # A hyperframe that mixed sizes would have raised FrameError; the new size's frames were enhanced.
    assert {outcome for i, _, outcome in sent if i >= 20} <= {Outcome.ENHANCED, Outcome.REUSED}
    assert report.windows_enhanced > 2


def test_resolution_change_into_a_file_sink_is_a_frame_error_and_the_file_stays_valid(
    tmp_path: Path,
) -> None:
    clip = resolution_change_clip(tmp_path / "change.ts", (96, 64), (128, 72), 20)
    out = tmp_path / "out.mp4"
    sink = FileSink(out, preset="ultrafast")

    with pytest.raises(FrameError, match=r"frame 20 .* is 128x72 but '.*out\.mp4' was opened for 96x64"):
        asyncio.run(pipeline(FileSource(clip), sink).run())

    written = probe(out)
    assert written.frames == sink.frames_written == 20
    assert (written.width, written.height) == (96, 64)
    assert written.pts == sorted(written.pts)


# --- corrupt input through a whole pipeline ------------------------------------------------------------


def test_a_corrupt_file_plays_on_past_its_damage_counting_the_frames_lost_and_the_output_stays_valid(
    real_clip: Path, tmp_path: Path
) -> None:
    data = bytearray(real_clip.read_bytes())
    start = len(data) // 3
    data[start : start + 20_000] = bytes(20_000)
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(bytes(data))
    out = tmp_path / "out.mp4"
    sink = FileSink(out, preset="ultrafast")
    source = FileSource(bad)

    report = asyncio.run(pipeline(source, sink).run())

    written = probe(out)
    assert 0 < written.frames == sink.frames_written == report.frames_out < 250
    assert report.frames_out + source.undecodable == probe(real_clip).frames  # each frame said for
    assert written.pts == sorted(written.pts)


# --- output disk full or unwritable --------------------------------------------------------------------


def full_disk(path: Path) -> Path:
    """``path`` as a link to /dev/full: every write to it fails with ENOSPC, even for root."""
    if not os.path.exists("/dev/full"):
        pytest.skip("/dev/full is absent here")
    path.symlink_to("/dev/full")
    return path


def test_disk_full_at_open_is_a_sink_error_naming_the_path_and_the_fix(tmp_path: Path) -> None:
    out = full_disk(tmp_path / "out.mp4")

    with pytest.raises(SinkError) as raised:
        asyncio.run(FileSink(out).open(StreamInfo(96, 64, Fraction(25), Fraction(1, 25))))

    message = str(raised.value)
    assert str(out) in message
    assert "No space left on device" in message
    assert "check that the disk has space" in message


def test_disk_full_mid_stream_stops_the_pipeline_with_a_sink_error(tmp_path: Path) -> None:
    # MPEG-TS writes its header into a buffer, so the first writes to disk happen mid-stream.
    out = full_disk(tmp_path / "out.ts")
    other = asyncio.Event()
    reports: list[PipelineReport] = []

    async def scenario() -> None:
        # A second stream in the same process runs on, untouched by the first one's failure.
        async def bystander() -> None:
            reports.append(await pipeline(SyntheticSource(width=64, height=48, frames=60), NullSink()).run())
            other.set()

        running = asyncio.create_task(bystander())
        source = SyntheticSource(width=160, height=96, frames=300, noise_sigma=20)
        try:
            await pipeline(source, FileSink(out, preset="ultrafast")).run()
        finally:
            await running

    with pytest.raises(SinkError) as raised:
        asyncio.run(scenario())

    assert isinstance(raised.value, StreamerError)
    assert str(out) in str(raised.value)
    assert "No space left on device" in str(raised.value)
    assert other.is_set()
    assert reports[0].frames_out == 60


# --- a live source's timestamps restart (reconnect) into a file ----------------------------------------


def test_file_sink_keeps_time_moving_when_a_reconnect_restarts_the_pts(tmp_path: Path) -> None:
    out = tmp_path / "restart.mp4"
    tb = Fraction(1, 90_000)

    async def write() -> None:
        sink = FileSink(out, preset="ultrafast")
        await sink.open(StreamInfo(64, 48, Fraction(30), tb, live=True))
        for i in range(20):
            # An RTSP camera's session restarts its clock at frame 10.
            pts = (i if i < 10 else i - 10) * 3000
            pixels = np.full((48, 64, 3), i * 10, dtype=np.uint8)
            await sink.send(Frame(pixels, i, pts, tb, 0.0, discontinuity=i == 10))
        await sink.aclose()

    asyncio.run(write())

    assert probe(out).pts == [3000 * i for i in range(20)]


# --- a sink that blocks: a consumer slower than the live source ----------------------------------------


class SlowReader(threading.Thread):
    """Reads a FIFO 4 KiB at a time with a pause between reads: a consumer slower than the stream."""

    def __init__(self, path: Path, pause_s: float = 0.04) -> None:
        super().__init__(name="slow-reader", daemon=True)
        self.path = path
        self.pause_s = pause_s
        self.data = bytearray()
        self.done = threading.Event()

    def run(self) -> None:
        with open(self.path, "rb", buffering=0) as fifo:  # blocks until the sink opens its end
            while chunk := fifo.read(4096):
                self.data.extend(chunk)
                self.done.wait(self.pause_s)


@pytest.mark.timeout(90)
def test_slow_consumer_keeps_queues_bounded_drops_oldest_at_the_source_and_stops(tmp_path: Path) -> None:
    fifo = tmp_path / "out.ts"
    os.mkfifo(fifo)
    reader = SlowReader(fifo)
    reader.start()
    # Noise makes every frame expensive to carry (~15 KB), ~4x what the reader takes at 30 fps.
    source = SyntheticSource(width=160, height=96, fps=30, frames=None, noise_sigma=25, realtime=True)
    run = pipeline(source, FileSink(fifo, preset="ultrafast"), queue_size=8)
    samples: list[tuple[ChannelStats, ...]] = []
    in_flight: list[int] = []
    drained: dict[str, int] = {}

    async def scenario() -> PipelineReport:
        running = asyncio.create_task(run.run())
        while (stats := source.stats()) is None or stats.dropped < 20:
            assert not running.done(), "the pipeline ended on its own"
            await asyncio.sleep(0.05)
            if (stats := source.stats()) is not None:
                samples.append(tuple(run.queue_stats()))
                counters = run.counters()
                in_flight.append(counters["in"] - counters["out"])
        counters = run.counters()
        run.stop()
        report = await asyncio.wait_for(running, 30)  # stops with the consumer still slow
        drained["after_stop"] = report.frames_out - counters["out"]
        return report

    try:
        report = asyncio.run(scenario())
    finally:
        reader.join(30)
    for channels in samples:
        for stats in channels:
            assert stats.depth <= stats.max_depth <= stats.capacity, stats
    bound = 2 * 8 + run.max_batch + run.windower.history + 2
    assert max(in_flight) <= bound
    assert drained["after_stop"] <= bound
    assert report.source_dropped >= 20
    assert report.frames_in == report.frames_out  # what entered the pipeline all left, in order
    final = source.stats()
    assert final is not None
    assert final.put == final.got + final.dropped  # every frame decoded was taken or counted as dropped
    assert final.got - report.frames_in <= final.capacity  # at most one queue's worth discarded at stop
    copy = tmp_path / "copy.ts"
    copy.write_bytes(bytes(reader.data))
    assert probe(copy).frames == report.frames_out  # what the consumer got decodes, every frame


# --- malformed YAML through the real CLI process -------------------------------------------------------


def cli(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamer.cli.main", "run", "--config", str(config), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("window: [1, 2\n", "YAML error at line 2"),
        ("window:\n\tstride: 2\n", "found character '\\t' that cannot start any token"),
        ("window: !!python/object:os.system [x]\n", "could not determine a constructor"),
        ("42\n", "the top level must be a mapping"),
    ],
    ids=["unclosed-list", "tab", "python-tag", "scalar"],
)
def test_malformed_yaml_exits_2_with_one_line_and_no_traceback(
    tmp_path: Path, text: str, expected: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)

    done = cli(config)

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("streamer: error: ")
    assert str(config) in done.stderr
    assert expected in done.stderr


def test_config_file_that_is_not_utf8_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "binary.yaml"
    config.write_bytes(b"\xff\xfe\x00garbage\x80\x81")

    done = cli(config)

    assert done.returncode == 2
    assert "Traceback" not in done.stderr


def test_yaml_alias_expansion_gives_a_short_error(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 6)]
    config = tmp_path / "aliases.yaml"
    config.write_text("\n".join([*lines, "webrtc:", "  ice_addresses: *a5", ""]))

    done = cli(config)

    assert done.returncode == 2
    assert "webrtc.ice_addresses" in done.stderr
    assert len(done.stderr) < 1000
