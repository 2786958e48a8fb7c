"""RTSP faults with real peers: servers that answer with garbage, a camera process killed mid-stream, and
an output that keeps its clock while its camera is gone.

The garbage servers are real TCP servers on 127.0.0.1 (they need no GStreamer); the camera is a real
process pushing H.264 with PyAV to GStreamer's RTSP server, SIGKILLed as a crashed camera would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.core.gate import MotionGate
from streamer.core.keepalive import KeepAlive
from streamer.core.windower import Windower
from streamer.engine.pipeline import Outcome, Pipeline, PipelineReport
from streamer.errors import SourceError
from streamer.sinks import FileSink, NullSink
from streamer.sinks.rtsp import RtspSink
from streamer.sources import SyntheticSource
from streamer.sources.rtsp import RtspSource, RtspState
from tests.integration.rtsp_fixtures import Publisher, Reader, RtspServer, until
from tests.media import probe

pytestmark = pytest.mark.slow

SECRET = "s3cret-pw"
ROOT = Path(__file__).parents[2]


class GarbageServer:
    """A TCP server on 127.0.0.1 that answers every RTSP request the way ``mode`` says:

    - ``close``: accepts, then closes at once;
    - ``random``: answers each request with random bytes and keeps the connection open;
    - ``silent``: accepts and never says anything;
    - ``no-video``: a well-formed ``RTSP/1.0 200 OK`` with an SDP that describes no media;
    - ``not-found``: a well-formed ``RTSP/1.0 404 Not Found``.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.connections = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self.port = int(self._sock.getsockname()[1])
        self._clients: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"rtsp://admin:{SECRET}@127.0.0.1:{self.port}/cam"

    def close(self) -> None:
        self._sock.close()
        for client in self._clients:
            with contextlib.suppress(OSError):
                client.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._clients.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self.mode == "close":
            client.close()
            return
        pending, cseq = b"", 0
        with contextlib.suppress(OSError):
            while chunk := client.recv(4096):
                pending += chunk
                while b"\r\n\r\n" in pending:
                    _, _, pending = pending.partition(b"\r\n\r\n")
                    cseq += 1
                    if self.mode == "random":
                        client.sendall(os.urandom(3000))
                    elif self.mode == "no-video":
                        sdp = b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=nothing\r\nt=0 0\r\n"
                        client.sendall(
                            b"RTSP/1.0 200 OK\r\nCSeq: %d\r\nContent-Type: application/sdp\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (cseq, len(sdp), sdp)
                        )
                    elif self.mode == "not-found":
                        client.sendall(b"RTSP/1.0 404 Not Found\r\nCSeq: %d\r\n\r\n" % cseq)


@pytest.fixture
def garbage(request: pytest.FixtureRequest) -> Iterator[GarbageServer]:
    server = GarbageServer(request.param)
    try:
        yield server
    finally:
        server.close()


def open_source(source: RtspSource) -> None:
    async def scenario() -> None:
        try:
            await asyncio.wait_for(source.open(), 30)  # a hang would fail here, not block the suite
        finally:
            await source.aclose()

    asyncio.run(scenario())


FAST = {"open_timeout_s": 0.5, "read_timeout_s": 0.5, "stall_timeout_s": 0.5}
REASONS = {
    "close": "the server closed the connection",
    "random": "the server's answer is not RTSP",
    "silent": "no answer within 0.5 s (open_timeout_s)",
    "no-video": "the stream has no video track",
    "not-found": "the server answered 404 Not Found to DESCRIBE",
}
"""What streamer's RTP reader (the default for rtsp:// over TCP) says of each server."""
FFMPEG_REASONS = {
    **REASONS,
    "close": "Invalid data found when processing input",
    "random": "Invalid data found when processing input",
    "not-found": "Server returned 404 Not Found",
}
"""What FFmpeg's reader says (rtsps://, UDP, a camera's audio)."""


@pytest.mark.parametrize("reader", ["auto", "ffmpeg"])
@pytest.mark.parametrize("garbage", list(REASONS), indirect=True)
def test_garbage_on_the_rtsp_port_without_reconnect_is_one_line_naming_the_redacted_url(
    garbage: GarbageServer, reader: str, caplog: pytest.LogCaptureFixture
) -> None:
    source = RtspSource(garbage.url(), reconnect=False, reader=reader, **FAST)  # type: ignore[arg-type]

    with caplog.at_level(logging.DEBUG), pytest.raises(SourceError) as raised:
        open_source(source)

    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"cannot play RTSP stream rtsp://***@127.0.0.1:{garbage.port}/cam: ")
    assert (REASONS if reader == "auto" else FFMPEG_REASONS)[garbage.mode] in message
    assert "set reconnect" in message
    stats = source.rtsp_stats()
    assert (stats.attempts, stats.connects, stats.state) == (1, 0, RtspState.CLOSED)
    assert garbage.connections >= 1
    assert SECRET not in message + caplog.text + repr(stats)


@pytest.mark.parametrize("garbage", ["close", "random", "no-video"], indirect=True)
def test_garbage_on_the_rtsp_port_with_max_attempts_gives_up_after_that_many(
    garbage: GarbageServer, caplog: pytest.LogCaptureFixture
) -> None:
    source = RtspSource(
        garbage.url(),
        max_attempts=3,
        backoff_initial_s=0.05,
        backoff_max_s=0.1,
        **FAST,  # type: ignore[arg-type]
    )

    with (
        caplog.at_level(logging.DEBUG),
        pytest.raises(SourceError, match="gave up after 3 attempts") as raised,
    ):
        open_source(source)

    assert REASONS[garbage.mode] in str(raised.value)
    stats = source.rtsp_stats()
    assert (stats.attempts, stats.connects, stats.failures) == (3, 0, 3)
    assert stats.last_error_at is not None
    assert garbage.connections >= 3
    assert SECRET not in str(raised.value) + caplog.text
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 2  # failures 1 and 2 (a line per doubling); the third gives up
    assert "failed once" in retries[0]
    assert "still failing after 2 attempts" in retries[1]


@pytest.mark.parametrize("garbage", ["silent"], indirect=True)
def test_a_camera_that_never_answers_shows_in_streams_and_metrics(garbage: GarbageServer) -> None:
    from streamer.config import load_config
    from streamer.serving.control import ControlServer
    from streamer.serving.service import Service

    config = load_config(
        None,
        {
            "source": {"kind": "rtsp", "url": garbage.url(), **FAST, "backoff_initial_s": 0.1},
            "model.path": str(TEMPORAL_FILTER),
            "http.port": 0,
        },
    )

    async def scenario() -> tuple[dict[str, Any], str]:
        service = Service(config)
        service.prepare()
        control = ControlServer(service, config.http)
        await control.start()
        task = asyncio.create_task(service.run())
        try:
            async with aiohttp.ClientSession() as http:
                for _ in range(300):
                    async with http.get(control.url + "/streams/0") as r:
                        status = await r.json()
                    if (status["connection"] or {}).get("failures", 0) >= 2:
                        break
                    await asyncio.sleep(0.05)
                async with http.get(control.url + "/metrics") as r:
                    metrics = await r.text()
            return status, metrics
        finally:
            service.request_stop()
            await asyncio.wait_for(task, 30)
            await control.stop()

    status, metrics = asyncio.run(scenario())
    connection = status["connection"]
    assert status["state"] == "connecting"
    assert connection["failures"] >= 2
    assert connection["attempts"] >= connection["failures"]
    assert "no answer within 0.5 s (open_timeout_s)" in connection["last_error"]
    assert connection["last_error_at"].endswith("+00:00")
    assert connection["reader"] == "rtp"  # rtsp:// over TCP: streamer's own reader
    assert 'streamer_connect_failures_total{stream="0"}' in metrics
    assert SECRET not in json.dumps(status) + metrics


# --- a camera process killed mid-stream ----------------------------------------------------------------

CAMERA = (
    "import sys\n"
    "from tests.integration.rtsp_fixtures import Publisher\n"
    "camera = Publisher(sys.argv[1])\n"
    "camera.start()\n"
    "camera.join()\n"
)


def camera_process(url: str) -> subprocess.Popen[bytes]:
    """A camera of its own process (testsrc2 640x360 @ 30 fps, H.264 over RTSP RECORD), endless."""
    return subprocess.Popen([sys.executable, "-c", CAMERA, url], cwd=ROOT)


@pytest.mark.timeout(120)
def test_camera_killed_mid_stream_reconnects_to_the_next_one_and_the_file_stays_valid(
    rtsp_server: RtspServer, tmp_path: Path
) -> None:
    out = tmp_path / "out.mp4"
    source = RtspSource(
        rtsp_server.url("cam"),
        stall_timeout_s=2.0,
        read_timeout_s=2.0,
        backoff_initial_s=0.2,
        backoff_max_s=0.5,
    )
    written: list[tuple[int, bool, Outcome]] = []
    run = Pipeline(
        source,
        FileSink(out, preset="ultrafast"),
        OnnxBackend(TEMPORAL_FILTER),
        Windower(5),
        MotionGate(),
        max_batch=4,
        on_output=lambda src, sent, outcome: written.append((src.index, src.discontinuity, outcome)),
    )
    cameras: list[subprocess.Popen[bytes]] = []
    marks: dict[str, int] = {}

    async def scenario() -> tuple[PipelineReport, PipelineReport]:
        # Another stream in the same process: the camera's crash must not touch it.
        other = asyncio.create_task(
            Pipeline(
                SyntheticSource(width=64, height=48, frames=150, realtime=True),
                NullSink(),
                OnnxBackend(TEMPORAL_FILTER),
                Windower(5),
            ).run()
        )
        running = asyncio.create_task(run.run())
        await asyncio.to_thread(rtsp_server.wait_for, "play cam")
        cameras.append(camera_process(rtsp_server.publish_url("cam")))
        await until(lambda: run.counters()["out"] >= 30 or running.done(), 30, "30 frames written")
        cameras[0].send_signal(signal.SIGKILL)
        cameras[0].wait(10)
        marks["killed"] = run.counters()["in"]
        await until(
            lambda: source.rtsp_stats().state is not RtspState.LIVE or running.done(), 10, "the loss noticed"
        )
        cameras.append(camera_process(rtsp_server.publish_url("cam")))
        await until(lambda: source.rtsp_stats().reconnects >= 1 or running.done(), 20, "a reconnect")
        resumed = run.counters()["in"]
        await until(lambda: run.counters()["out"] >= resumed + 30 or running.done(), 30, "30 more frames")
        assert not running.done(), "the pipeline stopped when the camera died"
        run.stop()
        await source.aclose()
        return await asyncio.wait_for(running, 20), await asyncio.wait_for(other, 30)

    try:
        report, other = asyncio.run(scenario())
    finally:
        for camera in cameras:
            if camera.poll() is None:
                camera.kill()
            camera.wait(10)
    assert cameras[0].returncode == -signal.SIGKILL
    stats = source.rtsp_stats()
    assert stats.reconnects >= 1
    assert stats.last_error is not None  # why the first connection went: ended, stalled or failed
    assert report.frames_in == report.frames_out
    assert report.discontinuities >= 1
    # The first frame of the new connection is flagged, so no window spans the crash.
    assert any(flagged and index >= marks["killed"] for index, flagged, _ in written)
    assert [index for index, _, _ in written] == sorted(index for index, _, _ in written)
    decoded = probe(out)
    assert decoded.frames == report.frames_out
    assert decoded.pts == sorted(set(decoded.pts))  # strictly increasing across the camera's two lives
    assert other.frames_out == 150
    assert other.discontinuities == 0


# --- an output that keeps its clock while its camera is gone -------------------------------------------


@pytest.mark.timeout(180)
def test_an_rtsp_output_keeps_its_clock_while_the_camera_is_gone_and_resumes_enhanced_after(
    rtsp_server: RtspServer,
) -> None:
    source = RtspSource(
        rtsp_server.url("cam"), read_timeout_s=2.0, backoff_initial_s=0.2, backoff_max_s=0.5, jitter=0.0
    )
    written: list[tuple[int, Outcome]] = []
    run = Pipeline(
        source,
        RtspSink(rtsp_server.publish_url("out"), gop=15),
        OnnxBackend(TEMPORAL_FILTER),
        Windower(5),
        on_output=lambda src, sent, outcome: written.append((src.index, outcome)),
        keepalive=lambda fps: KeepAlive(1 / fps, card_after_s=1.0),
    )
    # An NVR of its own: one session, never reconnecting; a 3 s read timeout ends it if frames stop.
    reader = Reader(rtsp_server.url("out"), reconnect=False)
    cameras = [Publisher(rtsp_server.publish_url("cam"))]
    marks: dict[str, int] = {}

    async def scenario() -> PipelineReport:
        running = asyncio.create_task(run.run())
        cameras[0].start()
        await asyncio.to_thread(rtsp_server.wait_for, "publish out", 1, 60.0)
        reader.start()
        await until(lambda: len(reader.snapshot()) >= 30 or running.done(), 60, "30 frames at the reader")
        cameras[0].stop()  # the camera goes: its session ends, the relay ends the stream it played
        marks["gone"] = len(reader.snapshot())
        alive = run.keepalive
        assert alive is not None
        # Longer than the reader's 3 s read timeout: the card shows for 4 s of the gap.
        await until(lambda: alive.stats().cards >= 120 or running.done(), 60, "4 s of the no-signal card")
        marks["card"] = len(reader.snapshot())
        cameras.append(Publisher(rtsp_server.publish_url("cam")))
        cameras[1].start()
        marks["back"] = len(written)
        await until(lambda: len(written) >= marks["back"] + 30 or running.done(), 60, "30 frames after")

        def camera_again() -> bool:
            return sum(code is not None for code, _ in reader.snapshot()[marks["card"] :]) >= 30

        await until(lambda: camera_again() or running.done(), 60, "the second camera at the reader")
        assert not running.done(), "the pipeline stopped when the camera went"
        marks["reader ends"] = reader.ends  # before the output ends, which ends the reader's session
        run.stop()
        await source.aclose()
        return await asyncio.wait_for(running, 30)

    try:
        report = asyncio.run(scenario())
    finally:
        reader.stop()
        for camera in cameras:
            camera.stop()
    stats = run.keepalive.stats() if run.keepalive is not None else None
    assert stats is not None
    assert stats.gaps >= 1
    assert stats.repeats >= 25  # the last frame again for the card's first second, one per period
    # The reader's one session outlived 5 s without a camera, past its own 3 s read timeout.
    assert marks["reader ends"] == 0
    during = reader.means[marks["gone"] :]
    assert any(abs(m - 47) < 8 for m in during)  # the card (mid-grey 40, its text 200) was shown
    assert report.discontinuities >= 1
    after = [outcome for _, outcome in written[marks["back"] :]]
    assert after.count(Outcome.ENHANCED) >= 25  # frames of the second camera are enhanced again
