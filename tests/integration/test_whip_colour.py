"""Colour through WHIP ingest: a publisher's H.264 colour tags are honoured, and untagged WebRTC video is
read as BT.601 at every size (what libwebrtc and browsers assume), not by the file convention of BT.709
from 720 lines up. A real aiortc publisher sends flat colour patches libx264 encoded, tagged or not, as
pre-encoded packets; an identity model writes them to a file, whose YUV and tags are compared with the
publisher's (see test_colour.py for the method)."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import av
import pytest
from aiortc import VideoStreamTrack

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.core.windower import Windower
from streamer.engine.pipeline import Pipeline
from streamer.frame import Colour
from streamer.sinks import FileSink
from tests.integration.rtsp_fixtures import until
from tests.integration.test_colour import (
    BT709_TV,
    UNTAGGED,
    Planes,
    check_same_yuv,
    patches,
    read_yuv,
    set_tags,
    yuv_frame,
)
from tests.integration.test_whip_profiles import AIORTC_PROFILE, publish_h264, serving

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SENT = 45
"""Frames the publisher sends before the pipeline is stopped (1.5 s at 30 fps)."""


class PatchCamera(VideoStreamTrack):
    """30 fps of ``planes``, libx264 Baseline at a low QP (flat macroblock-aligned patches come through
    within a level or two), with its VUI tagged ``colour``; the packets are sent as they are."""

    def __init__(self, planes: Planes, colour: Colour) -> None:
        super().__init__()
        height, width = planes[0].shape
        self._planes = planes
        self._encoder = av.CodecContext.create("libx264", "w")
        self._encoder.width, self._encoder.height, self._encoder.pix_fmt = width, height, "yuv420p"
        self._encoder.time_base = Fraction(1, 30)
        self._encoder.gop_size = 15
        self._encoder.options = {
            "profile": "baseline",
            "preset": "ultrafast",
            "tune": "zerolatency",
            "qp": "2",
        }
        set_tags(self._encoder, colour)
        self.sent = 0

    async def recv(self) -> av.Packet:  # type: ignore[override]
        pts, time_base = await self.next_timestamp()
        frame = yuv_frame(self._planes)
        frame.pts = self.sent
        data = b"".join(bytes(p) for p in await asyncio.to_thread(self._encoder.encode, frame))
        self.sent += 1
        packet = av.Packet(data)
        packet.pts, packet.time_base = pts, time_base
        return packet


@pytest.mark.parametrize(
    ("size", "made_with", "tagged", "written"),
    [
        pytest.param((256, 144), 1, BT709_TV, BT709_TV, id="bt709-tagged"),
        # 720 lines: a file without tags would be read as BT.709 here; WebRTC's convention is BT.601.
        pytest.param((1280, 720), 6, UNTAGGED, Colour(matrix=6, range=1), id="untagged-hd"),
    ],
)
def test_whip_keeps_the_publishers_yuv_and_says_its_colour(
    tmp_path: Path, size: tuple[int, int], made_with: int, tagged: Colour, written: Colour
) -> None:
    want = patches(*size, made_with, False)
    out = tmp_path / "out.mp4"

    async def scenario() -> tuple[Colour, int]:
        async with serving() as (server, source, http):
            camera = PatchCamera(want, tagged)
            publisher, _ = await publish_h264(http, server, camera, AIORTC_PROFILE)
            pipeline = Pipeline(source, FileSink(out), OnnxBackend(TEMPORAL_FILTER, threads=1), Windower(5))
            running = asyncio.create_task(pipeline.run())
            try:
                await until(lambda: camera.sent >= SENT or running.done(), 60, f"{SENT} frames sent")
            finally:
                await publisher.close()
                pipeline.stop()
                source.interrupt()
            report = await asyncio.wait_for(running, 30)
            return source.info.colour, report.frames_out

    colour, frames_out = asyncio.run(scenario())

    assert colour == written
    assert frames_out >= 5
    tags, frames = read_yuv(out)
    assert tags == written
    assert len(frames) == frames_out
    for got in frames:
        check_same_yuv(got, want)
