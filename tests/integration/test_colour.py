"""Colour through real pipelines: an identity model gives back the input's YUV, tagged as the input was.

Inputs are flat colour patches written losslessly as YUV with PyAV, tagged BT.709 tv range, BT.601 pc
range, or not at all; the model is the shipped temporal filter on a static scene, which is identity. The
output is decoded to its Y, U and V planes (not RGB, which would hide a matrix mismatch behind the same
mismatch in the reader) and compared with the input's inside each patch: at patch edges 4:2:0 chroma is
resampled on the way to RGB and back, which no colour description changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import av.error
import numpy as np
import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.core.windower import Windower
from streamer.engine.pipeline import Pipeline
from streamer.frame import Colour
from streamer.sinks import FileSink
from streamer.sinks.rtsp import RtspSink
from streamer.sources import FileSource
from streamer.sources.rtsp import RtspSource
from tests.integration.rtsp_fixtures import READER_OPTIONS, RtspServer, until

pytestmark = pytest.mark.slow

PATCH = 16
"""Patch side in luma pixels: 8x8 in each 4:2:0 chroma plane."""
EDGE = 2
"""Pixels left out at each side of a patch, in every plane, where chroma resampling blurs."""
TOLERANCE = 3
"""Levels a sample inside a patch may move. swscale's fast YUV -> RGB path truncates (RGB comes out 1.1
levels low on average, up to 3) and the way back keeps that; a wrong matrix or range moved Y by up to 15
to 22 levels."""
BIAS = 1.5
"""Levels a plane's mean difference may reach: that truncation and nothing more."""
FRAMES = 8

BT709_TV = Colour(matrix=1, range=1, primaries=1, transfer=1)
BT601_PC = Colour(matrix=6, range=2, primaries=6, transfer=6)
UNTAGGED = Colour()

Planes = tuple[np.ndarray, np.ndarray, np.ndarray]


def patches(width: int, height: int, matrix: int, full: bool) -> Planes:
    """Y, U and V (4:2:0) of flat patches of random in-gamut colours, made with the float formulas of
    BT.709 (matrix 1) or BT.601 (matrix 6): a reference independent of swscale."""
    kr, kb = (0.2126, 0.0722) if matrix == 1 else (0.299, 0.114)
    rows, cols = height // PATCH, width // PATCH
    rgb = np.random.default_rng(7).uniform(0.1, 0.9, size=(rows, cols, 3))
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = kr * r + (1 - kr - kb) * g + kb * b
    cb, cr = (b - y) / (2 * (1 - kb)), (r - y) / (2 * (1 - kr))
    if full:
        levels = (255 * y, 128 + 255 * cb, 128 + 255 * cr)
    else:
        levels = (16 + 219 * y, 128 + 224 * cb, 128 + 224 * cr)
    luma, chroma = np.ones((PATCH, PATCH)), np.ones((PATCH // 2, PATCH // 2))
    yp, up, vp = (np.kron(plane, luma if k == 0 else chroma) for k, plane in enumerate(levels))
    return yp.round().astype(np.uint8), up.round().astype(np.uint8), vp.round().astype(np.uint8)


def samples(plane: av.video.plane.VideoPlane) -> np.ndarray:
    """A plane's samples as a writable (height, width) view, without the row padding."""
    rows = np.frombuffer(memoryview(plane), np.uint8).reshape(plane.height, plane.line_size)
    return rows[:, : plane.width]


def yuv_frame(planes: Planes) -> av.VideoFrame:
    height, width = planes[0].shape
    frame = av.VideoFrame(width, height, "yuv420p")
    for plane, values in zip(frame.planes, planes, strict=True):
        samples(plane)[:] = values
    return frame


def planes_of(frame: av.VideoFrame) -> Planes:
    y, u, v = (samples(p).copy() for p in frame.planes)
    return y, u, v


def tags_of(codec: av.video.codeccontext.VideoCodecContext) -> Colour:
    return Colour(codec.colorspace, codec.color_range, codec.color_primaries, codec.color_trc)


def set_tags(codec: av.video.codeccontext.VideoCodecContext, colour: Colour) -> None:
    codec.colorspace, codec.color_range = colour.matrix, colour.range
    codec.color_primaries, codec.color_trc = colour.primaries, colour.transfer


def write_clip(path: Path, planes: Planes, colour: Colour) -> Path:
    """``FRAMES`` identical frames of ``planes``, lossless H.264 tagged ``colour``."""
    height, width = planes[0].shape
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"qp": "0", "preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        set_tags(stream.codec_context, colour)
        for i in range(FRAMES):
            frame = yuv_frame(planes)
            frame.pts, frame.time_base = i, Fraction(1, 25)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def read_yuv(path: Path) -> tuple[Colour, list[Planes]]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return tags_of(stream.codec_context), [planes_of(f) for f in container.decode(stream)]


def inside(plane: np.ndarray, patch: int) -> np.ndarray:
    """The samples of ``plane`` at least EDGE from every patch edge."""
    rows, cols = np.indices(plane.shape)
    keep = (rows % patch >= EDGE) & (rows % patch < patch - EDGE)
    keep &= (cols % patch >= EDGE) & (cols % patch < patch - EDGE)
    return plane[keep].astype(np.int16)


def check_same_yuv(got: Planes, want: Planes, tolerance: int = TOLERANCE, bias: float = BIAS) -> None:
    """Inside the patches, each plane within ``tolerance`` everywhere and ``bias`` on average."""
    for name, a, b, side in zip("YUV", got, want, (PATCH, PATCH // 2, PATCH // 2), strict=True):
        diff = inside(a, side) - inside(b, side)
        assert np.abs(diff).max() <= tolerance, f"{name} differs by up to {np.abs(diff).max()} levels"
        assert abs(diff.mean()) <= bias, f"{name} is shifted by {diff.mean():.2f} levels on average"


PLANES_TOLERANCE, PLANES_BIAS = TOLERANCE + 1, 0.5
"""With the frames kept as planes (``model.yuv420``) the decoder's planes reach the encoder unchanged
(the graph's round trip is exact on these patches) and nothing truncates, so the mean holds to 0.5; the
output's own x264 encode still moves a V sample by up to 4 levels in the 720p clip (3 through RGB)."""


def identity(source: FileSource | RtspSource, sink: FileSink | RtspSink, planes: bool = False) -> Pipeline:
    """The temporal filter averages a window of identical frames: the frame itself. With ``planes``,
    on frames kept on the device as 4:2:0 planes both ways (``model.yuv420``)."""
    backend = OnnxBackend(TEMPORAL_FILTER, threads=1, device_frames=planes, yuv420=planes or None)
    return Pipeline(source, sink, backend, Windower(5))


@pytest.mark.parametrize(
    ("size", "made_with", "full", "tagged", "written"),
    [
        pytest.param((256, 144), 1, False, BT709_TV, BT709_TV, id="bt709-tv"),
        pytest.param((256, 144), 6, True, BT601_PC, BT601_PC, id="bt601-pc"),
        # Untagged: read and written as BT.601 tv below 720 lines, BT.709 tv from there, and tagged so.
        pytest.param((256, 144), 6, False, UNTAGGED, Colour(matrix=6, range=1), id="untagged-sd"),
        pytest.param((1280, 720), 1, False, UNTAGGED, Colour(matrix=1, range=1), id="untagged-hd"),
    ],
)
@pytest.mark.parametrize("planes", [False, True], ids=["rgb", "planes"])
def test_identity_model_keeps_the_files_yuv_and_colour_tags(
    tmp_path: Path,
    size: tuple[int, int],
    made_with: int,
    full: bool,
    tagged: Colour,
    written: Colour,
    planes: bool,
) -> None:
    """Through RGB, and with the frames kept 4:2:0 planes from decoder to encoder, converted in the
    model's graph: the same YUV and tags out as in."""
    want = patches(*size, made_with, full)
    source = FileSource(write_clip(tmp_path / "in.mp4", want, tagged), planes=planes)
    out = tmp_path / "out.mp4"

    report = asyncio.run(identity(source, FileSink(out), planes).run())

    assert source.info.colour == tagged
    assert report.frames_out == FRAMES
    tags, frames = read_yuv(out)
    assert tags == written
    assert len(frames) == FRAMES
    tolerance, bias = (PLANES_TOLERANCE, PLANES_BIAS) if planes else (TOLERANCE, BIAS)
    for got in frames:
        check_same_yuv(got, want, tolerance, bias)


def publish(url: str, planes: Planes, colour: Colour, stop: threading.Event, fps: int = 30) -> None:
    """A camera sending ``planes`` at ``fps``, tagged ``colour``, until ``stop``."""
    height, width = planes[0].shape
    with av.open(url, "w", format="rtsp", options={"rtsp_transport": "tcp"}) as container:
        options = {"preset": "ultrafast", "tune": "zerolatency", "g": "15", "bf": "0", "qp": "0"}
        stream = container.add_stream("libx264", rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        set_tags(stream.codec_context, colour)
        start = time.monotonic()
        index = 0
        while not stop.wait(max(0.0, start + index / fps - time.monotonic())):
            frame = yuv_frame(planes)
            frame.pts, frame.time_base = index, Fraction(1, fps)
            container.mux(stream.encode(frame))
            index += 1


def play(url: str, frames: int) -> Iterator[tuple[Colour, Planes]]:
    """An independent player's first ``frames`` frames of ``url`` with the stream's tags."""
    with av.open(url, options=READER_OPTIONS, timeout=(10.0, 3.0)) as container:
        stream = container.streams.video[0]
        for count, frame in enumerate(container.decode(stream), 1):
            yield tags_of(stream.codec_context), planes_of(frame)
            if count == frames:
                return


@pytest.mark.parametrize("planes", [False, True], ids=["rgb", "planes"])
def test_rtsp_keeps_a_cameras_bt709_tv_yuv_and_tags(rtsp_server: RtspServer, planes: bool) -> None:
    want = patches(256, 144, 1, False)
    source = RtspSource(rtsp_server.url("cam"), planes=planes)
    sink = RtspSink(rtsp_server.publish_url("out"), bitrate=4_000_000, gop=15)
    pipeline = identity(source, sink, planes)
    played: list[tuple[Colour, Planes]] = []
    stop = threading.Event()

    def player() -> None:
        with contextlib.suppress(av.error.FFmpegError):  # a session cut short fails the count below
            for item in play(rtsp_server.url("out"), FRAMES):
                played.append(item)

    async def scenario() -> None:
        reader = threading.Thread(target=player, daemon=True)
        reader.start()
        await asyncio.to_thread(rtsp_server.wait_for, "play out")
        running = asyncio.create_task(pipeline.run())
        await asyncio.to_thread(rtsp_server.wait_for, "play cam")
        camera = threading.Thread(
            target=publish, args=(rtsp_server.publish_url("cam"), want, BT709_TV, stop), daemon=True
        )
        camera.start()
        await until(lambda: len(played) >= FRAMES or running.done(), 30, f"{FRAMES} frames played")
        pipeline.stop()
        await source.aclose()
        await asyncio.wait_for(running, 20)
        stop.set()
        await asyncio.to_thread(camera.join, 10)
        await asyncio.to_thread(reader.join, 10)

    asyncio.run(scenario())

    assert source.info.colour == BT709_TV
    assert source.info.planes is planes  # said at open, so warm-up readies the graphs that take planes
    assert len(played) == FRAMES
    tolerance, bias = (PLANES_TOLERANCE, PLANES_BIAS) if planes else (TOLERANCE, BIAS)
    for tags, got in played:
        assert tags == BT709_TV
        check_same_yuv(got, want, tolerance, bias)
