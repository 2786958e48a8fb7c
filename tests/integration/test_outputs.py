"""Several outputs of one camera (``sinks``): RTSP push, WHEP and a file recording from one connection.

Real peers throughout: a PyAV camera publishing to GStreamer's RTSP server, the pipeline with three
outputs, an independent PyAV reader of the RTSP output, an aiortc WHEP player, and the mp4 decoded at
the end. Frame numbers are stamped into the camera's frames (``framecode``) and read back from each.
A blocked output is a file written into a named pipe whose reader does not read for 10 s. A recording
that follows the RTSP output (``encode: live``) shares its encode: one libx264 for both.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import av
import pytest

from streamer.app import build_pipeline
from streamer.assets import TEMPORAL_FILTER
from streamer.config import load_config
from streamer.engine.pipeline import Pipeline, PipelineReport
from streamer.media import framecode
from streamer.sinks.tee import TeeSink
from streamer.webrtc import WebRtcServer
from tests.integration.rtsp_fixtures import Publisher, Reader, RtspServer, until
from tests.integration.test_rtsp import start
from tests.integration.test_webrtc import TOKEN, play

pytestmark = [pytest.mark.timeout(240)]

FRAMES = 150
TAIL = 10
"""Frames the camera sends after the counted ones: the relay may cut the last few when a session ends."""


def config_for(rtsp_server: RtspServer, outputs: list[dict[str, Any]], room: int) -> Any:
    return load_config(
        None,
        {
            "source": {"kind": "rtsp", "url": rtsp_server.url("cam")},
            "sinks": outputs,
            "model.path": str(TEMPORAL_FILTER),
            # a skipped window passes its own frame through, so each frame keeps its own number
            "gate.on_skip": "passthrough",
            # room for every frame: this test is about completeness and order, not a loaded machine's pace
            "runtime.queue_size": room,
            "webrtc.port": 0,
            # stopped, a live source goes quiet: the keep-alive would then count the windows still being
            # flushed as stale and leave them out, and this test counts every frame
            "keepalive.enabled": False,
            "webrtc.token": TOKEN,
        },
    )


def codes_in(path: Path) -> list[int | None]:
    with av.open(str(path)) as container:
        return [framecode.read(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]


async def all_in(
    pipeline: Pipeline, running: asyncio.Task[PipelineReport], everything: int
) -> PipelineReport:
    """Once the pipeline has read ``everything`` frames, stop it and let what is in flight drain."""
    await until(lambda: pipeline.counters()["in"] >= everything or running.done(), 120, f"{everything} in")
    pipeline.stop()
    await pipeline.source.aclose()
    return await asyncio.wait_for(running, 60)


def packets_in(path: Path) -> list[bytes]:
    with av.open(str(path)) as container:
        return [bytes(p) for p in container.demux(video=0) if p.size]


def test_two_recordings_of_equal_settings_share_one_encode(tmp_path: Path) -> None:
    mp4, mkv = tmp_path / "a.mp4", tmp_path / "b.mkv"
    config = load_config(
        None,
        {
            "source": {"kind": "synthetic", "frames": 45, "width": 160, "height": 96},
            "sinks": [{"kind": "file", "path": str(mp4)}, {"kind": "file", "path": str(mkv)}],
            "model.path": str(TEMPORAL_FILTER),
        },
    )
    pipeline = build_pipeline(config)
    report = asyncio.run(pipeline.run())
    tee = pipeline.sink
    assert isinstance(tee, TeeSink)
    assert report.frames_out == 45
    assert [(o.written, o.dropped, o.shared) for o in tee.outputs()] == [(45, 0, True), (45, 0, True)]
    # one encode: both containers hold the very same H.264 packets (veryfast's lookahead flushed at the end)
    assert len(packets_in(mp4)) == 45
    assert packets_in(mp4) == packets_in(mkv)


@pytest.mark.slow
def test_one_camera_three_outputs_each_gets_every_frame_in_order(
    rtsp_server: RtspServer, tmp_path: Path
) -> None:
    recording = tmp_path / "recording.mp4"
    config = config_for(
        rtsp_server,
        [
            {"kind": "rtsp", "url": rtsp_server.publish_url("out"), "gop": 30},
            {"kind": "whep", "stream": "cam"},
            {"kind": "file", "path": str(recording), "encode": "live"},
        ],
        room=FRAMES + TAIL,
    )
    reader = Reader(rtsp_server.url("out"), reconnect=False)
    camera = Publisher(rtsp_server.publish_url("cam"), frames=FRAMES + TAIL)

    async def scenario() -> tuple[PipelineReport, list[int | None], TeeSink]:
        server = WebRtcServer(port=0, token=TOKEN, connect_timeout_s=20.0)
        await server.start()
        try:
            pipeline = build_pipeline(config, server=server)
            tee = pipeline.sink
            assert isinstance(tee, TeeSink)
            async with aiohttp.ClientSession() as http:
                player = await play(http, server, "cam", wanted=30)
                running = await start(rtsp_server, reader, pipeline, camera)
                report = await all_in(pipeline, running, FRAMES + TAIL)
                await asyncio.wait_for(player.enough.wait(), 30)
                await player.pc.close()
                played = [code for code, _, _ in player.received]
            await until(lambda: reader.ends >= 1, 10, "the reader's session to end")
            return report, played, tee
        finally:
            await server.stop()

    try:
        report, played, tee = asyncio.run(scenario())
    finally:
        reader.stop()
        camera.stop()
    assert camera.error is None
    assert report.source_dropped == 0
    assert report.frames_in == report.frames_out == FRAMES + TAIL
    outputs = {o.name: o for o in tee.outputs()}
    assert set(outputs) == {"0:rtsp", "1:whep", "2:file"}
    assert all(o.written == FRAMES + TAIL and o.dropped == 0 and o.error is None for o in outputs.values())
    assert [o.shared for o in outputs.values()] == [True, False, True]  # the recording is the RTSP output's
    rtsp = [code for code, _ in reader.snapshot()]
    assert rtsp[:FRAMES] == list(range(FRAMES))
    assert codes_in(recording) == list(range(FRAMES + TAIL))
    # a player holds only the newest frame: it may skip, never reorder
    seen = [c for c in played if c is not None]
    assert len(seen) >= 30
    assert seen == sorted(set(seen))


@pytest.mark.slow
@pytest.mark.parametrize("encode", ["own", "live"])
def test_an_output_blocked_for_10_s_loses_only_its_own_frames(
    rtsp_server: RtspServer, tmp_path: Path, record_property: Callable[[str, object], None], encode: str
) -> None:
    pipe = tmp_path / "stuck.ts"
    os.mkfifo(pipe)
    config = config_for(
        rtsp_server,
        [
            {"kind": "rtsp", "url": rtsp_server.publish_url("out"), "gop": 30},
            {"kind": "file", "path": str(pipe), "encode": encode},
        ],
        room=30,  # a second at 30 fps: the stuck output overflows it, the RTSP output never does
    )
    frames = 450  # 15 s at 30 fps: the pipe's reader sleeps through 10 of them
    reader = Reader(rtsp_server.url("out"), reconnect=False)
    camera = Publisher(rtsp_server.publish_url("cam"), frames=frames + TAIL)
    drained = tmp_path / "drained.ts"

    def slow_reader() -> None:
        with open(pipe, "rb") as stuck, drained.open("wb") as copy:  # the sink's open waits for this
            time.sleep(10.0)
            while chunk := stuck.read(65536):
                copy.write(chunk)

    sleeper = threading.Thread(target=slow_reader, daemon=True)
    sleeper.start()
    pipeline = build_pipeline(config)
    tee = pipeline.sink
    assert isinstance(tee, TeeSink)

    async def scenario() -> PipelineReport:
        running = await start(rtsp_server, reader, pipeline, camera)
        report = await all_in(pipeline, running, frames + TAIL)
        await until(lambda: reader.ends >= 1, 10, "the reader's session to end")
        return report

    try:
        report = asyncio.run(scenario())
    finally:
        reader.stop()
        camera.stop()
        sleeper.join(30)
    outputs = {o.name: o for o in tee.outputs()}
    stuck, rtsp = outputs["1:file"], outputs["0:rtsp"]
    record_property("stuck_output", f"{stuck.written} written, {stuck.dropped} dropped")
    assert report.frames_in == report.frames_out == frames + TAIL  # the model was never held up
    assert stuck.dropped > 0
    assert stuck.written + stuck.dropped == frames + TAIL
    assert rtsp.dropped == 0
    assert rtsp.written == frames + TAIL
    codes = [code for code, _ in reader.snapshot()]
    assert codes[:frames] == list(range(frames))
    # what the stuck output wrote plays: frames in order, from a keyframe after each loss
    kept = codes_in(drained)
    assert len(kept) == stuck.written
    assert all(isinstance(c, int) for c in kept)
    assert kept == sorted(set(kept))
