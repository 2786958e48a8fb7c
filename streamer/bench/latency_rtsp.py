"""The RTSP path of ``streamer bench latency``: PyAV camera -> GStreamer relay ``/cam`` -> RtspSource
-> Pipeline -> RtspSink -> relay ``/out`` -> PyAV reader. The stream runs in a
:class:`~streamer.serving.service.Service`, as ``streamer run`` runs it, so ``model: auto`` chooses and
moves tiers as it does for a user. The relay is :mod:`streamer.measure.rtsp_relay`, a process of Debian's
python3; the path is skipped, saying why, when that interpreter cannot import GstRtspServer.
``streamer bench keepalive`` publishes through the same relay and camera."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from fractions import Fraction

import av
import av.error
from av.packet import Packet
from av.stream import Stream
from av.video.stream import VideoStream

from streamer.bench.latency_measure import (
    CAMERA_X264,
    SETUP_S,
    Camera,
    PathResult,
    Recorder,
    Settings,
    Skipped,
    abandon,
    finish,
    join_threads,
    path_result,
    service_report,
    stage_means,
    tier_moves,
)
from streamer.config import RtspSinkConfig, RtspSourceConfig
from streamer.errors import EndOfStream, SourceError, StreamerError
from streamer.measure import rtsp_relay
from streamer.media import framecode
from streamer.serving.service import Service, StreamResult
from streamer.sinks.nodelay import disable_nagle, rtsp_peer
from streamer.sources.rtp import RtspProtocolError
from streamer.sources.rtp_reader import RtpReader
from streamer.sources.rtsp import Reader

__all__ = ["BusyCore", "Relay", "RtspCamera", "run_rtsp"]

_READER_OPTIONS = {"rtsp_transport": "tcp", "analyzeduration": "100000", "timeout": "10000000"}
"""The player's socket timeout (10 s) outlasts model auto's probe, during which the output is silent."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Relay:
    """The relay process on a free loopback port, and the event lines it prints (``play cam`` ...)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self._process: subprocess.Popen[str] | None = None
        self._counts: collections.Counter[str] = collections.Counter()
        self._last: collections.deque[str] = collections.deque(maxlen=30)
        self._changed = threading.Condition()

    def url(self, name: str) -> str:
        return f"rtsp://127.0.0.1:{self.port}/{name}"

    def publish_url(self, name: str) -> str:
        return f"rtsp://127.0.0.1:{self.port}/{name}/publish"

    def start(self) -> None:
        self._process = subprocess.Popen(
            rtsp_relay.command(self.port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        threading.Thread(target=self._collect, args=(self._process,), daemon=True).start()
        self.wait_for("ready")

    def wait_for(self, line: str, timeout: float = 10.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self._counts[line] >= 1, timeout):
                output = "\n".join(self._last) or "nothing"
                raise SourceError(
                    f"the RTSP relay did not print {line!r} within {timeout} s; it printed:\n{output}"
                )

    def kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(timeout=10)

    def _collect(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            with self._changed:
                self._counts[raw.strip()] += 1
                self._last.append(raw.strip())
                self._changed.notify_all()


class RtspCamera(threading.Thread):
    """Publishes the camera's frames to the relay in real time (libx264 ultrafast, zerolatency), then
    leaves (TEARDOWN), which ends the relay's stream for its players."""

    def __init__(self, url: str, camera: Camera, ahead: list[Packet[Stream]] | None = None) -> None:
        """``ahead``: the frames already encoded (:meth:`Camera.encode_all`), sent at the frame rate."""
        super().__init__(name="bench-rtsp-camera", daemon=True)
        self.url = url
        self.camera = camera
        self.ahead = ahead
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            self._publish()
        except BaseException as exc:
            self.error = exc

    def _publish(self) -> None:
        s = self.camera.settings
        container = av.open(
            self.url, "w", format="rtsp", options={"rtsp_transport": "tcp", "timeout": "5000000"}
        )
        try:
            encoder: VideoStream | None = None
            stream: Stream
            if self.ahead is None:
                encoder = container.add_stream("libx264", rate=s.fps, options=CAMERA_X264 | {"g": str(s.fps)})
                assert isinstance(encoder, VideoStream)
                encoder.width, encoder.height, encoder.pix_fmt = s.width, s.height, "yuv420p"
                stream = encoder
            else:
                stream = container.add_mux_stream("h264", rate=s.fps, width=s.width, height=s.height)
            container.start_encoding()
            peer = rtsp_peer(self.url)
            if peer is not None:
                disable_nagle(*peer)  # as a camera's RTSP stack does; see streamer.sinks.nodelay
            pending = collections.deque(self.ahead or ())
            start = time.monotonic()
            for index in range(s.total):
                if self._halt.wait(max(0.0, start + index / s.fps - time.monotonic())):
                    return
                if encoder is not None:
                    frame = self.camera.frame(index)
                    frame.pts, frame.time_base = index, Fraction(1, s.fps)
                    self.camera.capture(index)
                    container.mux(encoder.encode(frame))
                    continue
                self.camera.capture(index)
                while pending and (pending[0].pts or 0) <= index:  # pts counts frames
                    packet = pending.popleft()
                    packet.stream = stream
                    container.mux(packet)
            if encoder is not None:
                container.mux(encoder.encode(None))
        finally:
            container.close()


class _RtspPlayer(threading.Thread):
    """An independent viewer: plays the relay's ``/out`` once, notes each frame's number and decode time.

    ``reader`` as streamer's RTSP source takes it: ``auto`` decodes each frame as its last packet arrives
    (streamer's RTP reader; as players built on live555 or GStreamer do), ``ffmpeg`` through FFmpeg's
    reader, which waits for the next frame to begin (as ffplay does).
    """

    def __init__(self, url: str, limit: int, open_timeout_s: float, reader: Reader = "auto") -> None:
        super().__init__(name="bench-rtsp-player", daemon=True)
        self.url = url
        self.reader = reader
        self.limit = limit
        self.open_timeout_s = open_timeout_s
        self.arrivals: list[tuple[int | None, float]] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            frames = self._rtp() if self.reader == "auto" else self._ffmpeg()
            for batch in frames:
                for frame in batch:
                    at = time.monotonic()
                    self.arrivals.append((framecode.read_frame(frame), at))
                if self._halt.is_set() or len(self.arrivals) >= self.limit:
                    return
        except EndOfStream:
            pass
        except (av.error.FFmpegError, RtspProtocolError) as exc:
            if not self._halt.is_set():
                self.error = exc

    def _ffmpeg(self) -> Iterator[list[av.VideoFrame]]:
        # Reads may wait as long as opening: model auto times its tiers (seconds at 720p) with the
        # sink already announced, before the first frame.
        timeouts = (self.open_timeout_s, self.open_timeout_s)
        with av.open(self.url, options=_READER_OPTIONS, timeout=timeouts) as container:
            stream = container.streams.video[0]
            stream.thread_type = "SLICE"  # frame threads would hold frames back, as in RtspSource
            for packet in container.demux(stream):
                try:
                    yield [f for f in packet.decode() if isinstance(f, av.VideoFrame)]
                except av.error.InvalidDataError:
                    yield []  # a damaged packet: the next keyframe repairs the picture

    def _rtp(self) -> Iterator[list[av.VideoFrame]]:
        s = self.open_timeout_s
        reader = RtpReader(self.url, s, s, s)
        try:
            yield reader.held
            for unit in reader.units():
                yield reader.decode(unit)
        finally:
            reader.close()


class BusyCore(threading.Thread):
    """Another process that spins on one core from ``start_s`` to ``end_s``: a neighbour taking a core from
    the sidecar, and giving it back. The times count from ``start()``."""

    def __init__(self, start_s: float, end_s: float) -> None:
        super().__init__(name="bench-busy-core", daemon=True)
        self._start_s, self._end_s = start_s, end_s
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        if self._halt.wait(self._start_s):
            return
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            self._halt.wait(self._end_s - self._start_s)
        finally:
            spinner.kill()
            spinner.wait()


async def run_rtsp(settings: Settings, measured: range) -> PathResult | Skipped:
    missing = await asyncio.to_thread(rtsp_relay.unavailable)
    if missing is not None:
        return Skipped("rtsp", f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    camera = Camera(settings)
    ahead = await asyncio.to_thread(camera.encode_all) if settings.camera_ahead else None
    deadline = time.monotonic() + settings.cap_s
    relay = Relay()
    sender = RtspCamera(relay.publish_url("cam"), camera, ahead)
    player = _RtspPlayer(relay.url("out"), settings.total * 2, open_timeout_s=SETUP_S, reader=settings.reader)
    busy = BusyCore(*settings.load) if settings.load is not None else None
    recorder = Recorder(measured)
    config = settings.config(
        source=RtspSourceConfig(url=relay.url("cam"), reconnect=False, reader=settings.reader),
        sink=RtspSinkConfig(url=relay.publish_url("out"), reconnect=False, threads=settings.encoder_threads),
    )
    service = Service(config, on_output=recorder, log_failures=False)
    service.prepare()
    pipeline = next(iter(service.runners.values())).pipeline
    running: asyncio.Task[list[StreamResult]] | None = None
    failure: BaseException | None = None
    camera_at = time.time()
    try:
        await asyncio.to_thread(relay.start)
        # Player, streamer, camera, each waiting at the relay for the one before: a player that comes
        # first gets the stream from its first frame, one that comes later waits for a keyframe.
        player.start()
        await asyncio.to_thread(relay.wait_for, "play out")
        running = asyncio.create_task(service.run())
        await asyncio.to_thread(relay.wait_for, "play cam")
        camera_at = time.time()
        sender.start()
        if busy is not None:
            busy.start()
        timed_out = await finish(pipeline, running, deadline)  # the camera leaving ends the source
        report = service_report(running.result())
        # The sink's TEARDOWN ends /out: the player has seen everything once its session ends.
        await asyncio.to_thread(player.join, max(1.0, deadline - time.monotonic()))
        timed_out = timed_out or player.is_alive()
    except StreamerError as exc:  # a peer's failure, if any, is the cause: it is raised instead
        failure = exc
    finally:
        if busy is not None:
            busy.halt()
        await abandon(pipeline, running)
        sender.halt()
        player.halt()
        await asyncio.to_thread(join_threads, sender, player, *([busy] if busy is not None else []))
        relay.kill()
        camera.close()
    for peer, what in ((sender, "camera"), (player, "player")):
        if peer.error is not None:
            raise SourceError(f"the benchmark's RTSP {what} failed: {peer.error}") from failure
    if failure is not None:
        raise failure
    reading = "RTP reader" if settings.reader == "auto" else "FFmpeg reader"
    route = f"PyAV camera -> GStreamer relay -> RtspSource | RtspSink -> relay -> PyAV player ({reading}s)"
    arrivals = player.arrivals
    result = path_result("rtsp", route, "H.264", settings, camera, arrivals, recorder, report, timed_out)
    return dataclasses.replace(result, moves=tier_moves(service, camera_at), stages_ms=stage_means(service))
