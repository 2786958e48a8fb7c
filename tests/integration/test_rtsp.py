"""RTSP in and out with real peers: GStreamer's RTSP server, a PyAV camera and an independent PyAV player.

camera (testsrc2 640x360 @ 30 fps, frame number stamped in) -> server /cam -> RtspSource -> Pipeline
(shipped model, T=5, gate on) -> RtspSink -> server /out -> reader, which decodes the frame numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import statistics
import threading
import time
import traceback
from fractions import Fraction
from pathlib import Path

import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.core.gate import MotionGate, SkipAction
from streamer.core.windower import Windower
from streamer.engine.pipeline import Pipeline, PipelineReport
from streamer.errors import SinkError, SourceError
from streamer.frame import StreamInfo
from streamer.media import framecode
from streamer.media.hwcodec import Decode, VideoCodec, nvdec_unavailable, nvenc_unavailable
from streamer.sinks.base import Sink
from streamer.sinks.file import FileSink
from streamer.sinks.rtsp import RtspSink, RtspSinkState
from streamer.sinks.tee import TeeSink
from streamer.sources.rtsp import RtspSource, RtspState
from tests.factories import make_frame
from tests.integration.rtsp_fixtures import Publisher, Reader, RtspServer, free_port, serving, until

pytestmark = pytest.mark.slow

FRAMES = 300
TAIL = 10
"""Frames the camera sends after the counted ones: the relay may cut the last few when a session ends."""
SECRET = "s3cret-pw"


def build(source: RtspSource, sink: Sink) -> Pipeline:
    # Gate on, but a skipped window passes its own frame through: reusing the last enhanced frame would
    # also reuse its stamped number, and the reader could not tell order from repetition.
    return Pipeline(
        source,
        sink,
        OnnxBackend(TEMPORAL_FILTER),
        Windower(5),
        MotionGate(),
        on_skip=SkipAction.PASSTHROUGH,
        max_batch=4,
    )


async def start(
    server: RtspServer, reader: Reader, pipeline: Pipeline, camera: Publisher
) -> asyncio.Task[PipelineReport]:
    """Player, streamer and camera up in that order, each waiting at the server for the one before.

    A player that arrives before its publisher gets the stream from its first frame; one that arrives
    later waits for the next keyframe and misses the frames before it. Starting downstream first is
    what makes 'every frame' an exact expectation.
    """
    reader.start()
    await asyncio.to_thread(server.wait_for, "play out")
    running = asyncio.create_task(pipeline.run())
    await asyncio.to_thread(server.wait_for, "play cam")
    camera.start()
    return running


async def finish(
    pipeline: Pipeline, source: RtspSource, running: asyncio.Task[PipelineReport]
) -> PipelineReport:
    """A live source never ends by itself: stop ingest, close the source, let what is in flight drain."""
    pipeline.stop()
    await source.aclose()
    return await asyncio.wait_for(running, 20)


def codes_of(reader: Reader) -> list[int | None]:
    return [code for code, _ in reader.snapshot()]


def relay_all(
    server: RtspServer, frames: int, decode: Decode = "cpu", codec: VideoCodec = "libx264"
) -> tuple[PipelineReport, RtspSource, RtspSink, Reader, Publisher]:
    """A camera's ``frames`` (and TAIL more) through the relay, the pipeline and back, every one of them:
    the reader has seen everything once the sink's TEARDOWN ends its session."""
    reader = Reader(server.url("out"), reconnect=False)
    camera = Publisher(server.publish_url("cam"), frames=frames + TAIL)
    # Room for every frame: on a loaded machine the pipeline may fall seconds behind the camera, and a
    # live source drops what its ring cannot hold; this is about order and completeness, not pace.
    source = RtspSource(server.url("cam"), capacity=frames + TAIL, decode=decode)
    sink = RtspSink(server.publish_url("out"), bitrate=2_000_000, gop=30, codec=codec)
    pipeline = build(source, sink)

    async def scenario() -> PipelineReport:
        running = await start(server, reader, pipeline, camera)
        everything = frames + TAIL
        await until(
            lambda: pipeline.counters()["in"] >= everything or running.done(), 120, f"{everything} frames in"
        )
        report = await finish(pipeline, source, running)
        await until(lambda: reader.ends >= 1, 10, "the reader's session to end")
        return report

    try:
        report = asyncio.run(scenario())
    finally:
        reader.stop()
        camera.stop()
    return report, source, sink, reader, camera


def test_every_camera_frame_reaches_an_independent_reader_in_order(rtsp_server: RtspServer) -> None:
    report, source, sink, reader, camera = relay_all(rtsp_server, FRAMES)
    assert camera.error is None
    assert camera.skipped == 0
    assert source.info.live
    assert (source.info.width, source.info.height) == (640, 360)
    assert report.source_dropped == 0
    assert report.frames_in == report.frames_out == FRAMES + TAIL
    assert report.model_calls > 0
    assert sink.frames_written == FRAMES + TAIL
    assert sink.frames_dropped == 0
    codes = codes_of(reader)
    assert None not in codes
    assert codes[:FRAMES] == list(range(FRAMES))  # every counted frame, strictly increasing
    assert codes == sorted(set(codes))
    latency = [arrival - camera.sent[code] for code, arrival in reader.snapshot() if code is not None]
    print(
        f"camera -> relay -> streamer -> relay -> reader: p50 {statistics.median(latency) * 1000:.0f} ms; "
        f"inside the pipeline (arrival -> sent) p50 {report.latency_p50_ms:.0f} ms"
    )


def test_auto_codecs_without_a_gpu_decode_and_encode_on_the_cpu_through_a_real_server(
    rtsp_server: RtspServer,
) -> None:
    """``decode: auto`` on the source and ``codec: auto`` on the sink where no NVDEC or NVENC works:
    libavcodec and libx264 carry every frame, in order, as when named."""
    if nvdec_unavailable() is None or nvenc_unavailable() is None:
        pytest.skip("this machine's GPU decodes or encodes: auto takes it")
    report, _, sink, reader, camera = relay_all(rtsp_server, 60, decode="auto", codec="auto")
    assert sink.codec == "libx264"
    assert camera.error is None
    assert report.frames_in == report.frames_out == 60 + TAIL
    assert codes_of(reader)[:60] == list(range(60))


@pytest.mark.parametrize("shared", [False, True], ids=["own-encode", "shared-encode"])
def test_server_restart_mid_stream_reconnects_and_frames_flow_again(
    rtsp_server: RtspServer, tmp_path: Path, shared: bool
) -> None:
    """Shared: a recording follows the RTSP output (one encode), so the reconnected connection starts
    at a keyframe the shared encoder makes on request."""
    reader = Reader(rtsp_server.url("out"))
    camera = Publisher(rtsp_server.publish_url("cam"))
    source = RtspSource(rtsp_server.url("cam"), stall_timeout_s=3.0, backoff_initial_s=0.2, backoff_max_s=1.0)
    sink = RtspSink(rtsp_server.publish_url("out"), backoff_initial_s=0.2, backoff_max_s=1.0)
    recording = FileSink(tmp_path / "recording.mp4")
    recording.follow(sink.encoding())
    pipeline = build(source, TeeSink([sink, recording], ["rtsp", "file"]) if shared else sink)
    measured: dict[str, float] = {}

    async def scenario() -> PipelineReport:
        running = await start(rtsp_server, reader, pipeline, camera)
        await until(lambda: len(reader.snapshot()) >= 30, 20, "30 frames at the reader")
        rtsp_server.kill()
        await until(lambda: reader.ends >= 1, 10, "the reader to lose the server")
        await until(lambda: source.rtsp_stats().state is not RtspState.LIVE, 10, "the source to notice")
        before = max(code for code in codes_of(reader) if code is not None)
        await asyncio.to_thread(rtsp_server.restart)
        back = time.monotonic()
        flowing = await until(
            lambda: any(code is not None and code > before for code in codes_of(reader)) or running.done(),
            15,
            "new frames at the reader after the restart",
        )
        assert not running.done(), "the pipeline stopped when the server went away"
        measured["resume_s"] = flowing - back
        resumed = len(reader.snapshot())
        await until(lambda: len(reader.snapshot()) >= resumed + 15, 10, "frames to keep coming")
        return await finish(pipeline, source, running)

    try:
        report = asyncio.run(scenario())
    finally:
        reader.stop()
        camera.stop()
    print(f"frames at the reader again {measured['resume_s']:.2f} s after the server was back")
    assert measured["resume_s"] < 5.0
    stats = source.rtsp_stats()
    assert stats.reconnects >= 1
    assert stats.connects == stats.reconnects + 1
    assert stats.state is RtspState.CLOSED
    assert sink.rtsp_stats().reconnects >= 1
    assert camera.connects >= 2
    assert report.discontinuities >= 1  # the first frame after the reconnect started a new run
    codes = [code for code in codes_of(reader) if code is not None]
    assert None not in codes_of(reader)
    assert codes == sorted(set(codes))  # strictly increasing across both server lifetimes
    if shared:
        assert isinstance(pipeline.sink, TeeSink)
        assert [o.shared for o in pipeline.sink.outputs()] == [True, True]
        assert recording.frames_written == report.frames_out  # the recording lost nothing meanwhile


def test_a_hung_server_is_detected_as_a_stall_and_reconnected(rtsp_server: RtspServer) -> None:
    camera = Publisher(rtsp_server.publish_url("cam"))
    source = RtspSource(rtsp_server.url("cam"), stall_timeout_s=1.0, backoff_initial_s=0.2, backoff_max_s=1.0)
    seen: dict[str, str | None] = {}

    async def scenario() -> None:
        opening = asyncio.create_task(source.open())
        await asyncio.to_thread(rtsp_server.wait_for, "play cam")
        camera.start()
        await opening
        for _ in range(15):
            await source.recv()
        rtsp_server.pause()  # sockets open, nothing said: only the watchdog can tell
        try:
            await until(lambda: source.rtsp_stats().last_error is not None, 10, "the stall watchdog")
            seen["error"] = source.rtsp_stats().last_error
        finally:
            rtsp_server.resume()
        while not (frame := await source.recv()).discontinuity:
            pass
        seen["after"] = str(frame.index)
        await source.aclose()

    try:
        asyncio.run(scenario())
    finally:
        camera.stop()
    # FFmpeg's read interrupt or, on a loaded machine, the decoded-frame watchdog may see it first
    assert seen["error"] in {"no data for 1.0 s", "no frame decoded for 1.0 s"}
    assert source.rtsp_stats().reconnects >= 1


@pytest.mark.parametrize(("transport", "reader"), [("udp", "auto"), ("tcp", "ffmpeg")])
def test_ffmpegs_reader_plays_the_same_stream(rtsp_server: RtspServer, transport: str, reader: str) -> None:
    """UDP always goes through FFmpeg's reader, and TCP does when asked."""
    camera = Publisher(rtsp_server.publish_url("cam"), frames=60)
    source = RtspSource(rtsp_server.url("cam"), transport=transport, reader=reader)  # type: ignore[arg-type]

    async def scenario() -> list[int | None]:
        try:
            return await read_codes(rtsp_server, "cam", source, camera, 30)
        finally:
            await source.aclose()

    try:
        codes = asyncio.run(scenario())
    finally:
        camera.stop()
    assert codes == list(range(30))
    assert source.info.fps == 30


def test_the_sinks_connection_sends_without_nagle(rtsp_server: RtspServer) -> None:
    """A keyframe's RTP packets must not wait for the server's delayed ACKs (streamer.sinks.nodelay)."""
    sink = RtspSink(rtsp_server.publish_url("out"), reconnect=False)
    info = StreamInfo(width=64, height=64, fps=Fraction(30), time_base=Fraction(1, 30), live=True)

    async def scenario() -> list[int]:
        await sink.open(info)
        try:
            await sink.send(make_frame(0, size=(64, 64)))
            return _nodelay_to(rtsp_server.port)
        finally:
            await sink.aclose()

    assert 1 in asyncio.run(scenario())


def _nodelay_to(port: int) -> list[int]:
    """TCP_NODELAY of each of this process's TCP connections to 127.0.0.1:``port``."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):
            if not stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                continue
            with socket.socket(fileno=os.dup(int(name))) as sock:
                if sock.type == socket.SOCK_STREAM and sock.getpeername()[:2] == ("127.0.0.1", port):
                    found.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    return found


def test_sink_without_reconnect_fails_when_the_server_goes_away(rtsp_server: RtspServer) -> None:
    sink = RtspSink(rtsp_server.publish_url("out"), reconnect=False)
    info = StreamInfo(width=64, height=64, fps=Fraction(30), time_base=Fraction(1, 30), live=True)

    async def scenario() -> None:
        await sink.open(info)
        try:
            for i in range(5):
                await sink.send(make_frame(i, size=(64, 64)))
            rtsp_server.kill()
            with pytest.raises(SinkError, match="lost the server: writing frame 5 failed"):
                await sink.send(make_frame(5, size=(64, 64)))
        finally:
            await sink.aclose()

    asyncio.run(scenario())
    assert (sink.frames_written, sink.frames_dropped) == (5, 1)


def test_closed_port_without_reconnect_fails_at_once_naming_the_redacted_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    source = RtspSource(f"rtsp://admin:{SECRET}@127.0.0.1:{port}/cam", reconnect=False)

    async def scenario() -> None:
        try:
            await source.open()
        finally:
            await source.aclose()

    with caplog.at_level(logging.DEBUG), pytest.raises(SourceError) as raised:
        asyncio.run(scenario())
    message = str(raised.value)
    assert f"rtsp://***@127.0.0.1:{port}/cam" in message
    assert "Connection refused" in message
    assert "set reconnect" in message
    assert source.rtsp_stats().attempts == 1
    assert_secret_hidden(raised.value, caplog, source.rtsp_stats())


def test_closed_port_with_max_attempts_gives_up_after_that_many(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    url = f"rtsp://admin:{SECRET}@127.0.0.1:{port}/cam"
    source = RtspSource(url, max_attempts=3, backoff_initial_s=0.05, backoff_max_s=0.1)

    async def scenario() -> None:
        try:
            await source.open()
        finally:
            await source.aclose()

    with (
        caplog.at_level(logging.DEBUG),
        pytest.raises(SourceError, match="gave up after 3 attempts") as raised,
    ):
        asyncio.run(scenario())
    stats = source.rtsp_stats()
    assert stats.attempts == 3
    assert stats.connects == 0
    assert stats.state is RtspState.CLOSED
    assert stats.last_error == "Connection refused"
    assert f"rtsp://***@127.0.0.1:{port}/cam" in str(raised.value)
    assert_secret_hidden(raised.value, caplog, stats)


def test_sink_to_a_closed_port_fails_without_reconnect_and_drops_frames_with_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    url = f"rtsp://admin:{SECRET}@127.0.0.1:{port}/out"
    info = StreamInfo(width=64, height=64, fps=Fraction(30), time_base=Fraction(1, 30))
    strict = RtspSink(url, reconnect=False)
    with caplog.at_level(logging.DEBUG), pytest.raises(SinkError, match="Connection refused") as raised:
        asyncio.run(strict.open(info))
    assert f"rtsp://***@127.0.0.1:{port}/out" in str(raised.value)

    patient = RtspSink(url, backoff_initial_s=5.0)

    async def send_some() -> None:
        await patient.open(info)
        for i in range(3):
            await patient.send(make_frame(i, size=(64, 64)))
        await patient.aclose()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(send_some())
    stats = patient.rtsp_stats()
    assert (stats.frames_written, stats.frames_dropped) == (0, 3)
    assert stats.state is RtspSinkState.CLOSED
    assert_secret_hidden(raised.value, caplog, stats)


def assert_secret_hidden(error: BaseException, caplog: pytest.LogCaptureFixture, stats: object) -> None:
    shown = "".join(traceback.format_exception(error)) + caplog.text + repr(stats)
    assert SECRET not in shown
    assert "admin" not in shown


async def read_codes(
    server: RtspServer, name: str, source: RtspSource, camera: Publisher, frames: int
) -> list[int | None]:
    """Open ``source`` on the server's ``name`` (its player set up before the camera starts, so it sees
    the first frame), start ``camera`` and read the numbers of its first ``frames`` frames, each within
    30 s."""
    opening = asyncio.create_task(source.open())
    await asyncio.to_thread(server.wait_for, f"play {name}")
    camera.start()
    await opening
    return [framecode.read((await asyncio.wait_for(source.recv(), 30)).pixels) for _ in range(frames)]


def test_each_frame_is_handed_on_without_waiting_for_the_next(rtsp_server: RtspServer) -> None:
    """The RTP reader closes a frame on its marker bit: the camera's last frame arrives while the
    camera, still connected, sends nothing more (FFmpeg's reader holds it until the next frame)."""
    frames = 20
    camera = Publisher(rtsp_server.publish_url("cam"), frames=frames, hold=True)
    # A stall would end the wait too (FFmpeg's reader then gives its held frame up): not before 60 s,
    # and each frame is waited for 30 s at most.
    source = RtspSource(rtsp_server.url("cam"), capacity=frames, read_timeout_s=60, stall_timeout_s=60)

    async def scenario() -> tuple[list[int | None], bool, bool]:
        codes = await read_codes(rtsp_server, "cam", source, camera, frames)
        camera_left = camera.done.is_set() or source.rtsp_stats().last_error is not None
        await source.aclose()  # the camera still there and silent: the read in progress is cut short
        reading = any(t.name == "decode-0" for t in threading.enumerate())
        return codes, camera_left, reading

    try:
        codes, camera_left, reading = asyncio.run(scenario())
    finally:
        camera.stop()
    assert codes == list(range(frames))
    assert not camera_left  # the camera was still there, silent, and the connection never dropped
    assert not reading  # closing ended the decode thread, rather than leave it in a 60 s read


@pytest.mark.parametrize("method", ["digest", "basic"])
def test_a_camera_that_asks_for_credentials_gets_those_of_the_url(method: str) -> None:
    with serving(auth=f"{method}:admin:{SECRET} %") as server:
        userinfo = f"admin:{SECRET}%20%25"
        camera = Publisher(server.publish_url("cam").replace("rtsp://", f"rtsp://{userinfo}@"), frames=60)
        source = RtspSource(server.url("cam", userinfo))

        async def scenario() -> list[int | None]:
            try:
                return await read_codes(server, "cam", source, camera, 10)
            finally:
                await source.aclose()

        try:
            codes = asyncio.run(scenario())
            refused = []
            for userinfo in ("admin:wrong", ""):
                wrong = RtspSource(server.url("cam", userinfo), reconnect=False)
                with pytest.raises(SourceError) as raised:
                    asyncio.run(wrong.open())
                refused.append(str(raised.value))
        finally:
            camera.stop()
    assert codes == list(range(10))
    assert "the server refused the user and password in the URL (401 Unauthorized)" in refused[0]
    assert "the server asks for a user and password (401 Unauthorized); put them in the URL" in refused[1]
    assert SECRET not in " ".join(refused)


def test_an_h265_camera_is_read_frame_by_frame_too() -> None:
    frames = 20
    with serving(names=("cam_h265",)) as server:
        camera = Publisher(server.publish_url("cam_h265"), frames=frames, hold=True, codec="libx265")
        # as in the H.264 test above: the last frame must come while the camera, still there, sends nothing
        source = RtspSource(server.url("cam_h265"), capacity=frames, read_timeout_s=60, stall_timeout_s=60)

        async def scenario() -> tuple[list[int | None], str | None]:
            try:
                codes = await read_codes(server, "cam_h265", source, camera, frames)
                return codes, source.connection().reader
            finally:
                await source.aclose()

        try:
            codes, reader = asyncio.run(scenario())
        finally:
            camera.stop()
    assert camera.error is None
    assert reader == "rtp"
    assert codes == list(range(frames))
    assert (source.info.width, source.info.height) == (640, 360)
