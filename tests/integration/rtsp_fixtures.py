"""A real RTSP server for integration tests, and real PyAV peers to publish to it and play from it.

The server is ``streamer/measure/rtsp_relay.py`` (GStreamer's RTSP server, which ``streamer bench latency``
runs too) started with Debian's system ``/usr/bin/python3``, which has ``gi``; the venv does not. Publish
on ``publish_url(name)``, play ``url(name)``: a relay. The fixture skips only when that interpreter cannot
import GstRtspServer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from fractions import Fraction

import av
import av.error
import numpy as np
import pytest

from streamer.measure import rtsp_relay
from streamer.media import framecode

__all__ = [
    "Publisher",
    "Reader",
    "RtspServer",
    "camera_frames",
    "free_port",
    "rtsp_server",
    "serving",
    "until",
]

READER_OPTIONS = {"rtsp_transport": "tcp", "analyzeduration": "100000", "timeout": "2000000"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RtspServer:
    """One server process on a fixed loopback port; ``restart`` brings a fresh one up on the same port.

    The server prints one line per event (``ready``, ``play NAME``, ``publish NAME``, ``unpublish NAME``);
    ``wait_for`` waits on them, counted over every process this handle started.
    """

    def __init__(self, port: int, names: tuple[str, ...] = (), auth: str = "") -> None:
        """``names``: the streams it serves (default: ``cam`` and ``out``); ``auth``: the credentials its
        players must give, ``METHOD:USER:PASSWORD`` (``rtsp_relay.AUTH_ENV``)."""
        self.port = port
        self.names = names
        self.auth = auth
        self._process: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._changed = threading.Condition()

    def url(self, name: str, userinfo: str = "") -> str:
        """Where players play ``name``."""
        return f"rtsp://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}/{name}"

    def publish_url(self, name: str) -> str:
        """Where one publisher sends ``name`` (ANNOUNCE/RECORD)."""
        return f"rtsp://127.0.0.1:{self.port}/{name}/publish"

    def start(self, timeout: float = 10.0) -> None:
        ready = self.count("ready")
        process = subprocess.Popen(
            rtsp_relay.command(self.port, self.names),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, rtsp_relay.AUTH_ENV: self.auth},
        )
        self._process = process
        threading.Thread(target=self._collect, args=(process,), daemon=True).start()
        self.wait_for("ready", count=ready + 1, timeout=timeout)

    def kill(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
        if process is not None:
            process.wait(timeout=10)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): its sockets stay open and silent, as a hung camera's do."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start()

    def count(self, line: str) -> int:
        with self._changed:
            return self._lines.count(line)

    def wait_for(self, line: str, count: int = 1, timeout: float = 10.0) -> None:
        """Until the servers printed ``line`` at least ``count`` times; fails with their output if not."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._lines.count(line) >= count, timeout):
                output = "\n".join(self._lines[-30:])
                pytest.fail(f"RTSP server did not print {line!r} x{count} in {timeout} s; output:\n{output}")

    def _collect(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            with self._changed:
                self._lines.append(raw.strip())
                self._changed.notify_all()


@contextlib.contextmanager
def serving(names: tuple[str, ...] = (), auth: str = "") -> Iterator[RtspServer]:
    """A running relay on a free loopback port (as :class:`RtspServer` takes ``names`` and ``auth``),
    always stopped afterwards; the test is skipped where the system interpreter has no GstRtspServer."""
    missing = rtsp_relay.unavailable()
    if missing is not None:
        pytest.skip(f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    server = RtspServer(free_port(), names, auth)
    try:
        server.start()
        yield server
    finally:
        server.kill()


@pytest.fixture
def rtsp_server() -> Iterator[RtspServer]:
    """A running relay serving ``cam`` and ``out``."""
    with serving() as server:
        yield server


def camera_frames(width: int = 640, height: int = 360, fps: int = 30) -> Iterator[np.ndarray]:
    """FFmpeg's moving testsrc2 pattern, endless, as rgb24 arrays."""
    with av.open(f"testsrc2=size={width}x{height}:rate={fps}", format="lavfi") as container:
        for frame in container.decode(video=0):
            yield frame.to_ndarray(format="rgb24")


class Publisher(threading.Thread):
    """A camera: testsrc2 with each frame's number stamped in, paced at ``fps``, pushed with PyAV.

    Frame n is due at start + n / fps whether or not it can be sent, as a camera's clock runs on: while
    the server is away the frames are skipped (counted in ``skipped``) and the push is retried every
    ``retry_s``. ``sent[n]`` is when frame n was handed to the muxer (monotonic). After ``frames``
    frames (None: until stopped) it ends its session, which ends the relay's stream for its players.
    """

    def __init__(
        self,
        url: str,
        frames: int | None = None,
        fps: int = 30,
        retry_s: float = 0.1,
        hold: bool = False,
        codec: str = "libx264",
    ) -> None:
        """``hold``: after ``frames``, keep the session open, sending nothing, until stopped; ``codec``:
        libx264 or libx265 (for a relay name ending in ``_h265``)."""
        super().__init__(name="publisher", daemon=True)
        self.url = url
        self.codec = codec
        self.frames = frames
        self.hold = hold
        self.fps = fps
        self.retry_s = retry_s
        self.sent: dict[int, float] = {}
        self.skipped = 0
        self.connects = 0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def run(self) -> None:
        try:
            self._publish()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def _connect(self) -> tuple[av.container.OutputContainer, av.video.stream.VideoStream]:
        container = av.open(self.url, "w", format="rtsp", options={"rtsp_transport": "tcp"})
        options = {"preset": "ultrafast", "tune": "zerolatency", "g": "30", "bf": "0"}
        if self.codec == "libx265":
            options = {
                "preset": "ultrafast",
                "tune": "zerolatency",
                "x265-params": "keyint=30:bframes=0:log-level=error",
            }
        stream = container.add_stream(self.codec, rate=self.fps, options=options)
        stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv420p"
        container.start_encoding()
        self.connects += 1
        return container, stream

    def _publish(self) -> None:
        conn: tuple[av.container.OutputContainer, av.video.stream.VideoStream] | None = None
        retry_at = 0.0
        start = time.monotonic()
        try:
            for index, pixels in enumerate(camera_frames(fps=self.fps)):
                if (self.frames is not None and index >= self.frames) or self._halt.is_set():
                    break
                if self._halt.wait(max(0.0, start + index / self.fps - time.monotonic())):
                    break
                if conn is None and time.monotonic() >= retry_at:
                    try:
                        conn = self._connect()
                    except av.error.FFmpegError:
                        retry_at = time.monotonic() + self.retry_s
                if conn is None:
                    self.skipped += 1
                    continue
                # from_ndarray leaves pict_type unset: a decoded lavfi frame would force every frame to I.
                frame = av.VideoFrame.from_ndarray(framecode.stamp(pixels, index), format="rgb24")
                frame.pts, frame.time_base = index, Fraction(1, self.fps)
                try:
                    conn[0].mux(conn[1].encode(frame))
                except av.error.FFmpegError:
                    with contextlib.suppress(av.error.FFmpegError):
                        conn[0].close()
                    conn, retry_at = None, time.monotonic() + self.retry_s
                    self.skipped += 1
                    continue
                self.sent[index] = time.monotonic()
            if self.hold:
                self._halt.wait()
        finally:
            if conn is not None:
                with contextlib.suppress(av.error.FFmpegError):
                    conn[0].close()


class Reader(threading.Thread):
    """An independent player: decodes ``url`` and reads each frame's code, reconnecting until stopped
    (or, without ``reconnect``, until its one session ends).

    ``codes`` holds (code, monotonic arrival) for every frame, None where no code was found, ``pts`` and
    ``means`` each frame's PTS (in the stream's time base) and mean pixel level; ``ends`` counts sessions
    that ended (server gone or stream over).
    """

    def __init__(
        self, url: str, reconnect: bool = True, open_timeout_s: float = 10.0, retry_s: float = 0.1
    ) -> None:
        super().__init__(name="reader", daemon=True)
        self.url = url
        self.reconnect = reconnect
        self.open_timeout_s = open_timeout_s
        self.retry_s = retry_s
        self.codes: list[tuple[int | None, float]] = []
        self.pts: list[int | None] = []
        self.means: list[float] = []
        self.ends = 0
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._halt.set()
        self.join(self.open_timeout_s + 5)

    def snapshot(self) -> list[tuple[int | None, float]]:
        with self._lock:
            return list(self.codes)

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                timeouts = (self.open_timeout_s, 3.0)
                with av.open(self.url, options=READER_OPTIONS, timeout=timeouts) as container:
                    for frame in container.decode(video=0):
                        pixels = np.asarray(frame.to_ndarray(format="rgb24"), np.uint8)
                        code = framecode.read(pixels)
                        with self._lock:
                            self.codes.append((code, time.monotonic()))
                            self.pts.append(frame.pts)
                            self.means.append(float(pixels.mean()))
                        if self._halt.is_set():
                            return
            except av.error.FFmpegError:
                pass
            self.ends += 1
            if not self.reconnect:
                return
            self._halt.wait(self.retry_s)


async def until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls ``condition()`` on the event loop until true; returns the monotonic time it became true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic()
