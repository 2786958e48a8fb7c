"""``streamer bench latency``: per-frame end-to-end latency through RTSP and WebRTC, on loopback.

A camera draws each frame's number into its pixels (:mod:`streamer.framecode`) and notes when it handed
the frame to its encoder; an independent player at the far end decodes the numbers and notes when each
frame came out of its decoder. The difference is what a viewer waits: camera encode, transport, the
streamer's decode, window, model and encode, transport again and the player's decode, measured on the
frames that really came out rather than on timestamps a server may rewrite. The paths, run one after
the other in one run, each with its own pipeline built from the default config (``streamer.app``):

- ``rtsp``: PyAV camera -> GStreamer relay ``/cam`` -> RtspSource -> Pipeline -> RtspSink -> relay
  ``/out`` -> PyAV reader. The relay is :mod:`streamer.bench.rtsp_relay`, a process of Debian's python3;
  the path is skipped, saying why, when that interpreter cannot import GstRtspServer.
- ``webrtc``: aiortc publisher -> WHIP -> WhipSource -> Pipeline -> WhepSink -> WHEP -> aiortc player.

A center window enhances frame n only once frame n + T//2 has arrived, so T//2 frame periods of every
frame's latency are the window's lookahead, fixed by the model and the frame rate; the rest is
processing and transport. The pipeline's own arrival-to-written latency, per measured frame and as its
PipelineReport gives it over the whole run, tells what happens inside streamer from the encodes,
transports and decodes around it.

With the gate on and ``on_skip: reuse``, a skipped window's frame leaves with the last enhanced frame's
pixels, frame number included; the player cannot tell it from that earlier frame. Latency is therefore
measured only on numbers seen for the first time; repeats count as received, not as measured.

Frames before the measured ones warm up encoders, bitrate control and the model; frames after them let
the measured ones leave the window and the parsers. Every path stops by itself: the camera sends a fixed
number of frames, and a wall-clock cap stops whatever is still running.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import re
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import aiohttp
import av
import av.error
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av.packet import Packet
from av.stream import Stream
from av.video.stream import VideoStream

from streamer import framecode
from streamer.app import build_backend, build_pipeline, build_server
from streamer.bench import rtsp_relay
from streamer.bench.harness import cpu_name, isa_text
from streamer.config import (
    Config,
    GateConfig,
    KeepAliveConfig,
    LatencyConfig,
    ModelConfig,
    RtspSinkConfig,
    RtspSourceConfig,
    WebRtcConfig,
    WhepSinkConfig,
    WhipSourceConfig,
    WindowConfig,
)
from streamer.errors import ConfigError, SourceError, StreamerError
from streamer.frame import Frame
from streamer.nodelay import disable_nagle, rtsp_peer
from streamer.pipeline import Outcome, Pipeline, PipelineReport
from streamer.webrtc.ice import restrict_host_addresses, rtc_configuration

__all__ = [
    "PATHS",
    "Camera",
    "LatencyReport",
    "PathResult",
    "Relay",
    "RtspCamera",
    "Settings",
    "Skipped",
    "format_markdown",
    "format_table",
    "run_from_args",
    "run_latency",
]

PATHS = ("rtsp", "webrtc")
SETUP_S = 30.0
"""Wall-clock allowance per path beyond the frames' own duration: relay, peers, model, drain."""
DRAIN_S = 3.0
"""How long, after the camera's last frame, the player may take to show the last measured one."""
STREAM = "bench"
LOOPBACK = ["127.0.0.1"]
_READER_OPTIONS = {"rtsp_transport": "tcp", "analyzeduration": "100000", "timeout": "10000000"}
"""The player's socket timeout (10 s) outlasts model auto's probe, during which the output is silent."""
_CAMERA_X264 = {"preset": "ultrafast", "tune": "zerolatency", "bf": "0"}
"""The bench camera's libx264 options, besides a keyframe a second."""


@dataclass(frozen=True, slots=True)
class Settings:
    width: int = 640
    height: int = 360
    fps: int = 30
    frames: int = 300
    """Frames measured per path, after the warm-up."""
    warmup: int = 60
    gate: bool = True
    paths: tuple[str, ...] = PATHS
    model: Path | Literal["auto"] | None = None
    """The ONNX model; None is the shipped default, ``auto`` the tier ``model: auto`` chooses."""
    budget_ms: float | None = None
    """latency.budget_ms of the pipeline; None enhances every frame however late."""
    threads: int | None = None
    """model.threads (onnxruntime's intra-op threads); None: its default."""
    encoder_threads: int | None = None
    """The RTSP sink's libx264 threads; None: libx264's choice."""
    workers: int | None = None
    """model.workers (windows run at once); None: its default."""
    camera_ahead: bool = False
    """The RTSP camera encodes every frame before the run and only sends packets during it, as an IP
    camera whose encoder is its own chip: the machine's cores are left to streamer (and the player)."""

    def config(self, **sections: Any) -> Config:
        """The pipeline's config for one path: its source and sink plus this run's model, gate, budget.
        No keep-alive: a repeated frame would be counted as received and measure nothing; no blend: the
        model runs on every frame, whatever the camera's quantizer, which is what is measured."""
        return Config(
            model=ModelConfig(path=self.model, threads=self.threads, workers=self.workers, blend="off"),
            gate=GateConfig(enabled=self.gate),
            latency=LatencyConfig(budget_ms=self.budget_ms),
            keepalive=KeepAliveConfig(enabled=False),
            **sections,
        )

    @property
    def tail(self) -> int:
        """Frames sent after the measured ones, so these leave the window and the parsers (half a second)."""
        return math.ceil(self.fps / 2)

    @property
    def total(self) -> int:
        return self.warmup + self.frames + self.tail

    @property
    def cap_s(self) -> float:
        """A path's wall-clock limit."""
        return self.total / self.fps + SETUP_S


@dataclass(frozen=True, slots=True)
class PathResult:
    """One path's figures; latencies in ms, end to end unless named otherwise."""

    path: str
    route: str
    codec: str
    sent: int
    """Measured frames the camera sent."""
    received: int
    """Decoded frames carrying a measured frame's number, repeats (reused frames) included."""
    lost: int
    measured: int
    """Numbers seen for the first time: the latency samples."""
    unreadable: int
    """Decoded frames whose number could not be read (none expected)."""
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    lookahead_frames: int
    lookahead_ms: float
    rest_p50_ms: float | None
    """p50 minus the lookahead: processing and transport."""
    outside_p50_ms: float | None
    """Per frame, end to end minus the time inside the pipeline (arrival to written): the encodes,
    transports and decodes around it."""
    pipeline_p50_ms: float | None
    """Arrival to written inside the pipeline, over the measured frames: what its PipelineReport records
    for each frame."""
    pipeline_p95_ms: float | None
    pipeline_p99_ms: float | None
    report_frames: int
    """Frames the pipeline wrote, warm-up and tail included; its PipelineReport's latency covers them all."""
    report_p50_ms: float | None
    report_p95_ms: float | None
    report_p99_ms: float | None
    outcomes: dict[str, int]
    """How the measured frames left the pipeline."""
    source_dropped: int
    timed_out: bool
    model: str
    """The model the pipeline ran on (``model: auto``: the tier it chose)."""


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class LatencyReport:
    machine: str
    settings: Settings
    model: str
    provider: str
    on_skip: str
    rows: tuple[PathResult, ...]
    skipped: tuple[Skipped, ...]
    notes: tuple[str, ...]
    wall_s: float


# The camera and what the players saw


class Camera:
    """FFmpeg's moving testsrc2 with each frame's number stamped in; notes when each frame was captured."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.captured: dict[int, float] = {}
        size = f"{settings.width}x{settings.height}"
        self._container = av.open(f"testsrc2=size={size}:rate={settings.fps}", format="lavfi")
        self._frames = self._container.decode(video=0)

    def frame(self, index: int) -> av.VideoFrame:
        """Frame ``index`` as the encoder takes it; blocking (decode, stamp, convert)."""
        pixels = np.asarray(next(self._frames).to_ndarray(format="rgb24"), dtype=np.uint8)
        return av.VideoFrame.from_ndarray(framecode.stamp(pixels, index), format="rgb24")

    def capture(self, index: int) -> None:
        self.captured[index] = time.monotonic()

    def encode_all(self) -> list[Packet[Stream]]:
        """Every frame of the run encoded now as the RTSP camera encodes them (blocking: seconds per
        thousand frames), for :class:`RtspCamera` to send at the frame rate. No global header: the
        parameter sets travel in band, before each keyframe."""
        s = self.settings
        codec = av.VideoCodecContext.create("libx264", "w")
        codec.width, codec.height, codec.pix_fmt = s.width, s.height, "yuv420p"
        codec.time_base, codec.framerate = Fraction(1, s.fps), Fraction(s.fps)
        codec.options = _CAMERA_X264 | {"g": str(s.fps)}
        packets: list[Packet[Stream]] = []
        for index in range(s.total):
            frame = self.frame(index)
            frame.pts, frame.time_base = index, codec.time_base
            packets += codec.encode(frame)
        packets += codec.encode(None)
        return packets

    def close(self) -> None:
        self._container.close()


def _percentiles(samples: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    if not samples:
        return None, None, None
    p50, p95, p99 = np.percentile(np.asarray(samples, dtype=np.float64), [50, 95, 99])
    return float(p50), float(p95), float(p99)


class _Recorder:
    """The pipeline's output hook: how each measured frame left, and how long it was inside."""

    def __init__(self, measured: range) -> None:
        self.measured = measured
        self.outcomes: dict[int, Outcome] = {}
        self.inside: dict[int, float] = {}

    def __call__(self, source: Frame, sent: Frame, outcome: Outcome) -> None:
        code = framecode.read(source.pixels)
        if code is not None and code in self.measured:
            self.outcomes[code] = outcome
            self.inside[code] = time.monotonic() - source.arrival


def _result(
    path: str,
    route: str,
    codec: str,
    settings: Settings,
    camera: Camera,
    arrivals: Sequence[tuple[int | None, float]],
    recorder: _Recorder,
    report: PipelineReport,
    timed_out: bool,
) -> PathResult:
    measured = recorder.measured
    sent = sum(1 for code in measured if code in camera.captured)
    received = sum(1 for code, _ in arrivals if code in measured)
    first: dict[int, float] = {}
    for code, at in arrivals:
        if code is not None and code in measured and code not in first:
            first[code] = at
    e2e = [(at - camera.captured[code]) * 1000 for code, at in first.items()]
    outside = [
        (at - camera.captured[code] - recorder.inside[code]) * 1000
        for code, at in first.items()
        if code in recorder.inside
    ]
    p50, p95, p99 = _percentiles(e2e)
    inside = _percentiles([recorder.inside[code] * 1000 for code in first if code in recorder.inside])
    lookahead_ms = report.lookahead_frames * 1000 / settings.fps
    counts = collections.Counter(o.value for o in recorder.outcomes.values())
    return PathResult(
        path=path,
        route=route,
        codec=codec,
        sent=sent,
        received=received,
        lost=max(0, sent - received),
        measured=len(first),
        unreadable=sum(1 for code, _ in arrivals if code is None),
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        lookahead_frames=report.lookahead_frames,
        lookahead_ms=lookahead_ms,
        rest_p50_ms=None if p50 is None else p50 - lookahead_ms,
        outside_p50_ms=_percentiles(outside)[0],
        pipeline_p50_ms=inside[0],
        pipeline_p95_ms=inside[1],
        pipeline_p99_ms=inside[2],
        report_frames=report.frames_out,
        report_p50_ms=report.latency_p50_ms,
        report_p95_ms=report.latency_p95_ms,
        report_p99_ms=report.latency_p99_ms,
        outcomes={o.value: counts[o.value] for o in Outcome if counts[o.value]},
        source_dropped=report.source_dropped,
        timed_out=timed_out,
        model=report.model,
    )


async def _finish(pipeline: Pipeline, running: asyncio.Task[PipelineReport], deadline: float) -> bool:
    """Waits for the pipeline to end by itself until ``deadline``, else stops it; True if it was stopped."""
    try:
        await asyncio.wait_for(asyncio.shield(running), max(0.0, deadline - time.monotonic()))
        return False
    except TimeoutError:
        pipeline.stop()
        await asyncio.wait_for(running, 20)
        return True


async def _abandon(pipeline: Pipeline, running: asyncio.Task[PipelineReport] | None) -> None:
    """After a failure elsewhere: stop a pipeline still running and let it close its source and sink."""
    if running is None or running.done():
        return
    pipeline.stop()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(running, 20)


def _join(*threads: threading.Thread) -> None:
    """Waits a while for each started thread; they are daemons, so one that hangs cannot block exit."""
    for thread in threads:
        if thread.ident is not None:
            thread.join(10)


# RTSP


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
                encoder = container.add_stream(
                    "libx264", rate=s.fps, options=_CAMERA_X264 | {"g": str(s.fps)}
                )
                assert isinstance(encoder, VideoStream)
                encoder.width, encoder.height, encoder.pix_fmt = s.width, s.height, "yuv420p"
                stream = encoder
            else:
                stream = container.add_mux_stream("h264", rate=s.fps, width=s.width, height=s.height)
            container.start_encoding()
            peer = rtsp_peer(self.url)
            if peer is not None:
                disable_nagle(*peer)  # as a camera's RTSP stack does; see streamer.nodelay
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
    """An independent viewer: plays the relay's ``/out`` once, notes each frame's number and decode time."""

    def __init__(self, url: str, limit: int, open_timeout_s: float) -> None:
        super().__init__(name="bench-rtsp-player", daemon=True)
        self.url = url
        self.limit = limit
        self.open_timeout_s = open_timeout_s
        self.arrivals: list[tuple[int | None, float]] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            # Reads may wait as long as opening: model auto times its tiers (seconds at 720p) with the
            # sink already announced, before the first frame.
            timeouts = (self.open_timeout_s, self.open_timeout_s)
            with av.open(self.url, options=_READER_OPTIONS, timeout=timeouts) as container:
                stream = container.streams.video[0]
                stream.thread_type = "SLICE"  # frame threads would hold frames back, as in RtspSource
                for packet in container.demux(stream):
                    try:
                        frames = packet.decode()
                    except av.error.InvalidDataError:
                        frames = []  # a damaged packet: the next keyframe repairs the picture
                    for frame in frames:
                        at = time.monotonic()
                        pixels = np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)
                        self.arrivals.append((framecode.read(pixels), at))
                    if self._halt.is_set() or len(self.arrivals) >= self.limit:
                        return
        except av.error.FFmpegError as exc:
            if not self._halt.is_set():
                self.error = exc


async def _rtsp(settings: Settings, measured: range) -> PathResult | Skipped:
    missing = await asyncio.to_thread(rtsp_relay.unavailable)
    if missing is not None:
        return Skipped("rtsp", f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    camera = Camera(settings)
    ahead = await asyncio.to_thread(camera.encode_all) if settings.camera_ahead else None
    deadline = time.monotonic() + settings.cap_s
    relay = Relay()
    sender = RtspCamera(relay.publish_url("cam"), camera, ahead)
    player = _RtspPlayer(relay.url("out"), settings.total * 2, open_timeout_s=SETUP_S)
    recorder = _Recorder(measured)
    config = settings.config(
        source=RtspSourceConfig(url=relay.url("cam"), reconnect=False),
        sink=RtspSinkConfig(url=relay.publish_url("out"), reconnect=False, threads=settings.encoder_threads),
    )
    pipeline = build_pipeline(config, on_output=recorder)
    running: asyncio.Task[PipelineReport] | None = None
    failure: StreamerError | None = None
    try:
        await asyncio.to_thread(relay.start)
        # Player, streamer, camera, each waiting at the relay for the one before: a player that comes
        # first gets the stream from its first frame, one that comes later waits for a keyframe.
        player.start()
        await asyncio.to_thread(relay.wait_for, "play out")
        running = asyncio.create_task(pipeline.run())
        await asyncio.to_thread(relay.wait_for, "play cam")
        sender.start()
        timed_out = await _finish(pipeline, running, deadline)  # the camera leaving ends the source
        report = running.result()
        # The sink's TEARDOWN ends /out: the player has seen everything once its session ends.
        await asyncio.to_thread(player.join, max(1.0, deadline - time.monotonic()))
        timed_out = timed_out or player.is_alive()
    except StreamerError as exc:  # a peer's failure, if any, is the cause: it is raised instead
        failure = exc
    finally:
        await _abandon(pipeline, running)
        sender.halt()
        player.halt()
        await asyncio.to_thread(_join, sender, player)
        relay.kill()
        camera.close()
    for peer, what in ((sender, "camera"), (player, "player")):
        if peer.error is not None:
            raise SourceError(f"the benchmark's RTSP {what} failed: {peer.error}") from failure
    if failure is not None:
        raise failure
    route = "PyAV camera -> GStreamer relay -> RtspSource | RtspSink -> relay -> PyAV reader"
    return _result("rtsp", route, "H.264", settings, camera, player.arrivals, recorder, report, timed_out)


# WebRTC


class _CameraTrack(MediaStreamTrack):
    """The camera as an aiortc track, paced in real time; ends after the last frame."""

    kind = "video"

    def __init__(self, camera: Camera) -> None:
        super().__init__()
        self.camera = camera
        self.done = asyncio.Event()
        self._index = 0
        self._start: float | None = None

    async def recv(self) -> av.VideoFrame:
        s = self.camera.settings
        if self._index >= s.total:
            self.done.set()
            self.stop()
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        await asyncio.sleep(max(0.0, self._start + self._index / s.fps - time.monotonic()))
        frame = await asyncio.to_thread(self.camera.frame, self._index)
        frame.pts, frame.time_base = round(self._index * 90_000 / s.fps), Fraction(1, 90_000)
        self.camera.capture(self._index)
        self._index += 1
        return frame


def _answer_codec(sdp: str) -> str:
    """The codec an SDP answer chose for video: the rtpmap of its m-line's first payload type."""
    found = re.search(r"^m=video \S+ \S+ (\d+)", sdp, re.MULTILINE)
    if found is None:
        return "unknown"
    codec = re.search(rf"^a=rtpmap:{found.group(1)} ([^/\s]+)", sdp, re.MULTILINE)
    return codec.group(1) if codec is not None else "unknown"


async def _first_of(*waits: Coroutine[Any, Any, Any], timeout: float | None = None) -> None:
    """Until any of ``waits`` is done (or ``timeout``); the others are cancelled.

    To wait for a task without cancelling it, pass ``asyncio.wait({task})``.
    """
    tasks = [asyncio.create_task(w) for w in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _WebRtcPeers(threading.Thread):
    """The aiortc publisher and player, on an event loop of their own so the streamer's tasks never
    delay their clocks: the player connects, then the camera publishes; both leave once the player has
    shown the last measured frame (or ``DRAIN_S`` after the camera's last)."""

    def __init__(
        self, base_url: str, camera: Camera, last: int, cap_s: float, on_error: Callable[[], object]
    ) -> None:
        super().__init__(name="bench-webrtc-peers", daemon=True)
        self.on_error = on_error
        self.base_url = base_url
        self.camera = camera
        self.last = last
        self.cap_s = cap_s
        self.arrivals: list[tuple[int | None, float]] = []
        self.codec = "unknown"
        self.error: BaseException | None = None
        self.timed_out = False
        self._halted = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._halt: asyncio.Event | None = None

    def halt(self) -> None:
        """Leave now; safe from any thread, before or after the peers' loop started."""
        self._halted.set()
        loop, halt = self._loop, self._halt
        if loop is not None and halt is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(halt.set)

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except TimeoutError:
            self.timed_out = True
        except BaseException as exc:
            self.error = exc
            with contextlib.suppress(RuntimeError):  # the streamer's loop has already ended
                self.on_error()

    async def _main(self) -> None:
        self._halt = halt = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._halted.is_set():
            halt.set()
        player = RTCPeerConnection(rtc_configuration())
        publisher = RTCPeerConnection(rtc_configuration())
        track = _CameraTrack(self.camera)
        seen_last = asyncio.Event()
        locations: list[str] = []
        reading: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(self.cap_s), aiohttp.ClientSession() as http:
                tracks: asyncio.Queue[MediaStreamTrack] = asyncio.Queue(maxsize=1)
                player.on("track", tracks.put_nowait)
                player.addTransceiver("video", direction="recvonly")
                locations.append(await self._negotiate(http, "whep", player))
                reading = asyncio.create_task(self._read(await tracks.get(), seen_last))
                publisher.addTransceiver(track, direction="sendonly")
                locations.append(await self._negotiate(http, "whip", publisher))
                await _first_of(track.done.wait(), seen_last.wait(), halt.wait(), asyncio.wait({reading}))
                await _first_of(seen_last.wait(), halt.wait(), asyncio.wait({reading}), timeout=DRAIN_S)
                for location in locations:  # the publisher leaving ends the streamer's source
                    async with http.delete(self.base_url + location) as response:
                        await response.read()
        finally:
            track.stop()
            if reading is not None:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
            await publisher.close()
            await player.close()

    async def _negotiate(self, http: aiohttp.ClientSession, kind: str, pc: RTCPeerConnection) -> str:
        """Offer (candidates on loopback only), post it, apply the answer; returns the session's URL."""
        with restrict_host_addresses(LOOPBACK):
            await pc.setLocalDescription(await pc.createOffer())
        url = f"{self.base_url}/{kind}/{STREAM}"
        headers = {"Content-Type": "application/sdp"}
        async with http.post(url, data=pc.localDescription.sdp, headers=headers) as response:
            answer = await response.text()
            if response.status != 201:
                raise SourceError(f"{kind.upper()} {url} answered {response.status}: {answer.strip()}")
            location = response.headers["Location"]
        if kind == "whep":
            self.codec = _answer_codec(answer)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        return location

    async def _read(self, track: MediaStreamTrack, seen_last: asyncio.Event) -> None:
        limit = self.camera.settings.total * 2
        while len(self.arrivals) < limit:
            try:
                frame = await track.recv()
            except MediaStreamError:  # the stream was released
                return
            at = time.monotonic()
            assert isinstance(frame, av.VideoFrame)
            pixels = await asyncio.to_thread(frame.to_ndarray, format="rgb24")
            code = framecode.read(np.asarray(pixels, dtype=np.uint8))
            self.arrivals.append((code, at))
            if code is not None and code >= self.last:
                seen_last.set()


async def _webrtc(settings: Settings, measured: range) -> PathResult:
    deadline = time.monotonic() + settings.cap_s
    config = settings.config(
        source=WhipSourceConfig(
            stream=STREAM, open_timeout_s=SETUP_S, end_on_unpublish=True, relay_original=False
        ),
        sink=WhepSinkConfig(stream=STREAM),
        webrtc=WebRtcConfig(port=0),
    )
    server = build_server(config)
    assert server is not None
    recorder = _Recorder(measured)
    pipeline = build_pipeline(config, on_output=recorder, server=server)
    loop = asyncio.get_running_loop()
    await server.start()
    try:
        camera = Camera(settings)
        # Peers that fail stop the pipeline, rather than leave it waiting out its open timeout.
        peers = _WebRtcPeers(
            server.url, camera, measured[-1], settings.cap_s, lambda: loop.call_soon_threadsafe(pipeline.stop)
        )
        running: asyncio.Task[PipelineReport] | None = None
        failure: StreamerError | None = None
        try:
            running = asyncio.create_task(pipeline.run())
            peers.start()
            timed_out = await _finish(pipeline, running, deadline)  # the publisher leaving ends the source
            report = running.result()
        except StreamerError as exc:  # the peers' failure, if any, is the cause: it is raised instead
            failure = exc
        finally:
            await _abandon(pipeline, running)
            peers.halt()
            await asyncio.to_thread(_join, peers)
            camera.close()
    finally:
        await server.stop()
    if peers.error is not None:
        raise SourceError(f"the benchmark's WebRTC peers failed: {peers.error}") from failure
    if failure is not None:
        raise failure
    route = "aiortc publisher -> WHIP -> WhipSource | WhepSink -> WHEP -> aiortc player"
    timed_out = timed_out or peers.timed_out
    return _result(
        "webrtc", route, peers.codec, settings, camera, peers.arrivals, recorder, report, timed_out
    )


# The run and its output


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def _machine() -> str:
    return f"{cpu_name()} ({isa_text()}), {os.cpu_count()} cores"


async def _run(settings: Settings) -> tuple[list[PathResult], list[Skipped]]:
    measured = range(settings.warmup, settings.warmup + settings.frames)
    rows: list[PathResult] = []
    skipped: list[Skipped] = []
    for path in settings.paths:
        result = await (_rtsp(settings, measured) if path == "rtsp" else _webrtc(settings, measured))
        if isinstance(result, Skipped):
            skipped.append(result)
        else:
            rows.append(result)
    return rows, skipped


def run_latency(settings: Settings) -> LatencyReport:
    """Runs each path of ``settings`` in turn on loopback; see the module docstring."""
    started = time.monotonic()
    load_before = _load()
    config = settings.config()
    backend = build_backend(config.model)
    model = backend.info
    backend.close()
    lookahead = WindowConfig().build(model.t, model.output_position).lookahead
    rows, skipped = asyncio.run(_run(settings))
    on_skip = config.gate.on_skip.value if settings.gate else "gate off"
    reuse = (
        f"with the gate on and on_skip {on_skip}, a skipped window's frame repeats the last enhanced frame, "
        "number included: it counts as received, not as measured"
        if on_skip == "reuse"
        else f"gate policy {on_skip}: every frame leaves with its own number"
    )
    notes = [
        "frames: sent = measured frames the camera sent; recv = decoded frames carrying their numbers, "
        "repeats included; lost = sent - recv; new = numbers seen for the first time, the latency samples",
        f"latency is measured only on numbers seen for the first time; {reuse}",
        f"lookahead: a {model.output_position.value} window of T={model.t} enhances a frame once {lookahead} "
        f"later frames have arrived, {lookahead} x 1000/{settings.fps} ms; rest = p50 - lookahead "
        "(processing + transport)",
        "pipeline: arrival -> written inside streamer, per measured frame, as its PipelineReport records "
        "it (RtspSink encodes before 'written', WhepSink leaves encoding to each player's sender); the "
        "report's own figures, over every frame written, warm-up included, are on each path's line; "
        "outside: per measured frame, end to end minus pipeline: encode, transport and decode around it",
        "each PyAV H.264 reader (RtspSource, the RTSP reader) gets a frame only once the next one begins: "
        "one frame period each, inside 'outside'",
        "camera and players run in this process (own threads; the WebRTC peers on their own event loop) "
        "and share its CPUs with the streamer; all traffic is loopback",
        f"load average {load_before} at start, {_load()} at end: other work on the machine inflates the "
        "tails",
    ]
    return LatencyReport(
        machine=_machine(),
        settings=settings,
        model=f"{model.name} (T={model.t}, {model.output_position.value})",
        provider=model.provider,
        on_skip=on_skip,
        rows=tuple(rows),
        skipped=tuple(skipped),
        notes=tuple(notes),
        wall_s=time.monotonic() - started,
    )


_WIDTH = 110
"""Where the lines under the table wrap."""


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


_COLUMNS: tuple[tuple[str, str, Callable[[PathResult], str]], ...] = (
    ("path", "", lambda r: r.path),
    ("sent", "frames", lambda r: str(r.sent)),
    ("recv", "frames", lambda r: str(r.received)),
    ("lost", "frames", lambda r: str(r.lost)),
    ("new", "frames", lambda r: str(r.measured)),
    ("p50", "end-to-end ms", lambda r: _ms(r.p50_ms)),
    ("p95", "end-to-end ms", lambda r: _ms(r.p95_ms)),
    ("p99", "end-to-end ms", lambda r: _ms(r.p99_ms)),
    ("lookahead", "split of p50 ms", lambda r: _ms(r.lookahead_ms)),
    ("rest", "split of p50 ms", lambda r: _ms(r.rest_p50_ms)),
    ("p50", "pipeline ms", lambda r: _ms(r.pipeline_p50_ms)),
    ("p95", "pipeline ms", lambda r: _ms(r.pipeline_p95_ms)),
    ("p99", "pipeline ms", lambda r: _ms(r.pipeline_p99_ms)),
    ("outside p50", "", lambda r: _ms(r.outside_p50_ms)),
)


def _header(report: LatencyReport) -> str:
    s = report.settings
    gate = f"gate on (on_skip {report.on_skip})" if s.gate else "gate off"
    budget = "no latency budget" if s.budget_ms is None else f"budget {s.budget_ms:g} ms"
    return (
        f"streamer bench latency: {s.width}x{s.height} @ {s.fps} fps, {s.frames} frames per path after "
        f"{s.warmup} warm-up; {report.model} on {report.provider}; {gate}; {budget}; {report.machine}"
    )


def format_table(report: LatencyReport) -> str:
    """One aligned table, a row per path, with groups of columns over their headings; then the notes."""
    cells = [[get(r) for _, _, get in _COLUMNS] for r in report.rows]
    widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, (name, _, _) in enumerate(_COLUMNS)]
    groups: list[tuple[str, int]] = []
    for (_, group, _), width in zip(_COLUMNS, widths, strict=True):
        if groups and groups[-1][0] == group and group:
            groups[-1] = (group, groups[-1][1] + 2 + width)
        else:
            groups.append((group, width))
    top = "  ".join(f" {g} ".center(w, "-") if g else " " * w for g, w in groups).rstrip()
    names = "  ".join(
        n.ljust(w) if i == 0 else n.rjust(w)
        for i, ((n, _, _), w) in enumerate(zip(_COLUMNS, widths, strict=True))
    )
    lines = [
        textwrap.fill(_header(report), _WIDTH, subsequent_indent="    "),
        "",
        top,
        names,
        "-" * len(names),
    ]
    for row in cells:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    lines.append("")
    for r in report.rows:
        outcomes = ", ".join(f"{name} {count}" for name, count in r.outcomes.items()) or "none"
        text = (
            f"{r.path}: {r.route}, {r.codec}; measured frames {outcomes}; {r.source_dropped} dropped at the "
            f"source, {r.unreadable} unreadable; PipelineReport over all {r.report_frames} frames written: "
            f"p50 {_ms(r.report_p50_ms)}, p95 {_ms(r.report_p95_ms)}, p99 {_ms(r.report_p99_ms)} ms"
            + ("; stopped at the time cap" if r.timed_out else "")
        )
        lines.append(textwrap.fill(text, _WIDTH, subsequent_indent="    "))
    lines += [
        textwrap.fill(f"{s.path}: skipped: {s.reason}", _WIDTH, subsequent_indent="    ")
        for s in report.skipped
    ]
    lines += [textwrap.fill(f"note: {n}", _WIDTH, subsequent_indent="    ") for n in report.notes]
    lines.append(f"total {report.wall_s:.1f} s")
    return "\n".join(lines)


def format_markdown(report: LatencyReport) -> str:
    """The table for the README, with the setup and the machine under it."""
    lines = [
        "| path | sent | received | lost | p50 ms | p95 ms | p99 ms | lookahead ms | rest p50 ms | "
        "pipeline p50 / p95 / p99 ms | outside p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.rows:
        lines.append(
            f"| {r.path} ({r.codec}) | {r.sent} | {r.received} | {r.lost} | {_ms(r.p50_ms)} | "
            f"{_ms(r.p95_ms)} | {_ms(r.p99_ms)} | {_ms(r.lookahead_ms)} | {_ms(r.rest_p50_ms)} | "
            f"{_ms(r.pipeline_p50_ms)} / {_ms(r.pipeline_p95_ms)} / {_ms(r.pipeline_p99_ms)} | "
            f"{_ms(r.outside_p50_ms)} |"
        )
    lines += ["", _header(report) + "; " + report.notes[-1] + "."]
    lines += [f"{s.path} skipped: {s.reason}." for s in report.skipped]
    return "\n".join(lines) + "\n"


def parse_size(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit():
        raise ConfigError(f"--size {text!r} is not WIDTHxHEIGHT; write e.g. --size 640x360")
    width, height = int(w), int(h)
    least = (framecode.COLUMNS * framecode.CELL, framecode.ROWS * framecode.CELL)
    if width % 2 or height % 2 or width < least[0] or height < least[1]:
        raise ConfigError(
            f"--size {text!r} must be even on both sides (H.264 4:2:0) and at least {least[0]}x{least[1]} "
            "to carry the frame number"
        )
    return width, height


def _parse_paths(text: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in paths if p not in PATHS]
    if not paths or unknown or len(set(paths)) != len(paths):
        raise ConfigError(f"--paths {text!r}: list each of {', '.join(PATHS)} at most once, comma-separated")
    return paths


def run_from_args(args: argparse.Namespace) -> int:
    """The ``bench latency`` handler: prints the table, writes --json / --markdown when asked."""
    width, height = parse_size(args.size)
    if args.frames < 1 or args.warmup < 0:
        raise ConfigError(
            f"--frames must be at least 1 and --warmup at least 0, got {args.frames}, {args.warmup}"
        )
    if not 1 <= args.fps <= 120:
        raise ConfigError(f"--fps {args.fps} is out of range; use 1..120")
    if args.warmup + args.frames > framecode.MAX_VALUE:
        raise ConfigError(
            f"--warmup + --frames must stay below {framecode.MAX_VALUE}, the largest frame number"
        )
    if args.budget_ms is not None and args.budget_ms <= 0:
        raise ConfigError(f"--budget-ms must be positive, got {args.budget_ms}")
    settings = Settings(
        width,
        height,
        args.fps,
        args.frames,
        args.warmup,
        args.gate,
        _parse_paths(args.paths),
        model=args.model,
        budget_ms=args.budget_ms,
    )
    report = run_latency(settings)
    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(report), indent=2, default=str) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(report))
    return 0
