"""A recording standing in for a camera: file sources paced to the wall clock and looped, with real clips
made by PyAV, the real pipeline and encoders, and a real RTSP relay and player."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from streamer.app import build_pipeline
from streamer.assets import TEMPORAL_FILTER
from streamer.config import load_config
from streamer.core.windower import Windower
from streamer.engine.pipeline import Pipeline
from streamer.errors import ConfigError, EndOfStream
from streamer.frame import Frame, StreamInfo
from streamer.media import framecode
from streamer.sinks.rtsp import RtspSink
from streamer.sources import FileSource
from tests.integration.rtsp_fixtures import Reader, RtspServer, until
from tests.media import probe

MakeClip = Callable[..., Path]


class Watched(FileSource):
    """A file source whose ``done`` is set once its decode thread has handed over its last frame."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.done = threading.Event()

    def _frames(self) -> Iterator[Frame]:
        yield from super()._frames()
        self.done.set()


async def _drain(source: FileSource) -> tuple[StreamInfo, list[Frame]]:
    info = await source.open()
    frames = []
    try:
        while True:
            frames.append(await source.recv())
    except EndOfStream:
        return info, frames
    finally:
        await source.aclose()


def drain(source: FileSource) -> tuple[StreamInfo, list[Frame]]:
    return asyncio.run(_drain(source))


def vfr_clip(path: Path, pts: list[int], time_base: Fraction = Fraction(1, 100)) -> Path:
    """H.264 frames at the given PTS (a variable frame rate), frame i's blue channel 20 * i; the muxer
    may store them in a finer time base."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast", "crf": "10"})
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.time_base = time_base
        for i, stamp in enumerate(pts):
            pixels = np.full((48, 64, 3), 20 * i, np.uint8)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = stamp, time_base
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def seams(frames: list[Frame]) -> list[int]:
    return [f.index for f in frames if f.discontinuity]


# --- loop ---------------------------------------------------------------------------------------------


def test_a_looped_file_plays_pass_after_pass_with_pts_that_keep_increasing(make_clip: MakeClip) -> None:
    info, frames = drain(FileSource(make_clip(frames=10), loop=True, max_frames=35))

    assert info.frame_count == 35
    assert info.live is False
    assert [f.index for f in frames] == list(range(35))
    assert [f.time for f in frames] == pytest.approx([i / 25 for i in range(35)])  # across every seam
    assert seams(frames) == [10, 20, 30]
    blue = [float(f.pixels[..., 2].mean()) for f in frames]
    assert blue == pytest.approx([6.0 * (i % 10) for i in range(35)], abs=3)


def test_the_windower_never_spans_a_loop_seam(make_clip: MakeClip) -> None:
    _, frames = drain(FileSource(make_clip(frames=7), loop=True, max_frames=28))
    windower = Windower(5)
    tasks = [task for frame in frames for task in windower.push(frame)] + windower.flush()

    assert [t.target for t in tasks] == list(range(28))
    assert windower.discontinuities == 3
    for task in tasks:
        assert {i // 7 for i in task.indices} == {task.target // 7}, task


def test_a_real_camera_recording_with_its_own_time_base_loops_gapless(real_clip: Path) -> None:
    _, frames = drain(FileSource(real_clip, loop=True, max_frames=300))

    assert [f.pts for f in frames] == [512 * i for i in range(300)]
    assert seams(frames) == [250]
    assert np.array_equal(frames[250].pixels, frames[0].pixels)


def test_a_variable_rate_file_loops_one_last_frame_after_its_end(tmp_path: Path) -> None:
    clip = vfr_clip(tmp_path / "vfr.mp4", [0, 4, 12, 16, 40])
    _, frames = drain(FileSource(clip, loop=True, max_frames=10))

    times = [f.time for f in frames]
    # The second pass starts one duration of the last frame (as the file stores it: 1/25 s) after it.
    assert times == pytest.approx([0, 0.04, 0.12, 0.16, 0.4, 0.44, 0.48, 0.56, 0.6, 0.84])
    assert seams(frames) == [5]


# --- realtime -----------------------------------------------------------------------------------------


def test_a_realtime_file_is_live_and_keeps_its_variable_timestamps(tmp_path: Path) -> None:
    clip = vfr_clip(tmp_path / "vfr.mp4", [0, 4, 12, 16, 40])
    info, frames = drain(FileSource(clip, realtime=True, capacity=8))

    assert info.live is True
    assert info.frame_count == 5
    assert [f.time for f in frames] == pytest.approx([0, 0.04, 0.12, 0.16, 0.4])
    assert all(a.arrival <= b.arrival for a, b in pairwise(frames))


def test_a_stalled_consumer_of_a_realtime_file_loses_the_oldest_frames_counted(make_clip: MakeClip) -> None:
    async def scenario() -> tuple[StreamInfo, bool, list[int], int]:
        source = Watched(make_clip(frames=30, fps=250), realtime=True, capacity=2)
        info = await source.open()
        finished = source.done.wait(30)  # the loop held: nothing consumes until the file has played
        got = []
        try:
            while True:
                got.append((await source.recv()).index)
        except EndOfStream:
            pass
        stats = source.stats()
        await source.aclose()
        assert stats is not None
        return info, finished, got, stats.dropped

    info, finished, got, dropped = asyncio.run(scenario())
    assert info.live
    assert finished, "the paced source waited for its consumer"
    assert got == [28, 29]  # the newest frames, as a camera's
    assert dropped == 28


def test_a_realtime_loop_marks_the_seam_on_the_frame_after_a_dropped_one(make_clip: MakeClip) -> None:
    async def scenario() -> list[Frame]:
        source = Watched(make_clip(frames=4, fps=250), realtime=True, loop=True, max_frames=9, capacity=4)
        await source.open()
        source.done.wait(30)
        got = []
        try:
            while True:
                got.append(await source.recv())
        except EndOfStream:
            pass
        await source.aclose()
        return got

    got = asyncio.run(scenario())
    # 9 frames in passes of 4 (seams at 4 and 8); the loop held, the newest 4 kept: 5, 6, 7, 8.
    assert [f.index for f in got] == [5, 6, 7, 8]
    assert [f.time for f in got] == pytest.approx([i / 250 for i in (5, 6, 7, 8)])
    assert seams(got) == [5, 8]  # frame 4's break moved onto frame 5 when 4 was dropped


# --- config and the pipeline --------------------------------------------------------------------------


def _file_run(clip: Path, out: Path, **source: object) -> Pipeline:
    config = load_config(
        None,
        {
            "source": {"kind": "file", "path": str(clip), **source},
            "sink": {"kind": "file", "path": str(out)},
            "model.path": str(TEMPORAL_FILTER),
        },
    )
    return build_pipeline(config)


def test_a_looped_file_into_a_file_writes_one_continuous_timeline(
    make_clip: MakeClip, tmp_path: Path
) -> None:
    out = tmp_path / "out.mp4"
    pipeline = _file_run(make_clip(frames=10), out, loop=True, max_frames=35)
    report = asyncio.run(pipeline.run())

    assert report.frames_in == report.frames_out == 35
    assert report.discontinuities == 3
    written = probe(out)
    assert written.frames == 35
    assert all(b > a for a, b in pairwise(written.pts))


@pytest.mark.parametrize("sink", [{}, {"sink": {"kind": "file", "path": "out.mp4"}}])
def test_a_loop_that_would_never_end_is_refused_in_one_line(sink: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, {"source": {"kind": "file", "path": "clip.mp4", "loop": True}, **sink})
    message = str(raised.value)
    assert "source.loop: true" in message
    assert "source.max_frames" in message
    assert "\n" not in message


def test_a_loop_is_allowed_with_a_frame_limit_a_live_sink_or_the_service() -> None:
    loop = {"kind": "file", "path": "clip.mp4", "loop": True, "realtime": True}
    limited = load_config(None, {"source": {**loop, "max_frames": 100}})
    live = load_config(None, {"source": loop, "sink": {"kind": "rtsp", "url": "rtsp://127.0.0.1/out"}})
    served = load_config(None, {"source": loop, "http.port": 0})
    assert [c.source.kind for c in (limited, live, served)] == ["file"] * 3


@pytest.mark.slow
def test_a_realtime_looped_recording_feeds_an_rtsp_player_like_a_camera(
    tmp_path: Path, rtsp_server: RtspServer
) -> None:
    clip = tmp_path / "stamped.mp4"
    with av.open(str(clip), "w") as container:
        stream = container.add_stream("libx264", rate=30, options={"preset": "ultrafast", "crf": "10"})
        stream.width, stream.height, stream.pix_fmt = 320, 192, "yuv420p"
        for i in range(15):
            pixels = framecode.stamp(np.full((192, 320, 3), 90, np.uint8), i)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 30)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    reader = Reader(rtsp_server.url("out"), reconnect=False)
    config = load_config(
        None,
        {
            "source": {"kind": "file", "path": str(clip), "realtime": True, "loop": True},
            "sink": {"kind": "rtsp", "url": rtsp_server.publish_url("out")},
            "model.path": str(TEMPORAL_FILTER),
            "gate.on_skip": "passthrough",
        },
    )
    pipeline = build_pipeline(config)

    async def scenario() -> None:
        reader.start()
        await asyncio.to_thread(rtsp_server.wait_for, "play out")
        running = asyncio.create_task(pipeline.run())
        await until(lambda: len(reader.snapshot()) >= 50 or running.done(), 60, "50 frames at the player")
        pipeline.stop()
        await asyncio.wait_for(running, 20)

    try:
        asyncio.run(scenario())
    finally:
        reader.stop()
    assert pipeline.source.info.live
    assert isinstance(pipeline.sink, RtspSink)
    codes = [code for code, _ in reader.snapshot() if code is not None]
    wraps = sum(1 for a, b in pairwise(codes) if b < a)
    assert wraps >= 2, codes  # the clip played three times or more, one stream to the player
    pts = [p for p in reader.pts if p is not None]
    assert all(b > a for a, b in pairwise(pts)), "the player's clock went back at a seam"
