"""The WebRTC path of ``streamer bench latency``: aiortc publisher -> WHIP -> WhipSource -> Pipeline
-> WhepSink -> WHEP -> aiortc player, the two peers on an event loop of their own."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import re
import threading
import time
from collections.abc import Callable, Coroutine
from fractions import Fraction
from typing import Any

import aiohttp
import av
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av.packet import Packet
from av.stream import Stream

from streamer.bench.latency_measure import (
    SETUP_S,
    Camera,
    PathResult,
    Recorder,
    Settings,
    abandon,
    finish,
    join_threads,
    path_result,
    service_report,
    stage_means,
    tier_moves,
)
from streamer.config import WebRtcConfig, WhepSinkConfig, WhipSourceConfig
from streamer.errors import SourceError, StreamerError
from streamer.media import framecode
from streamer.serving.service import Service, StreamResult
from streamer.webrtc.ice import restrict_host_addresses, rtc_configuration
from streamer.webrtc.jitter import release_on_marker
from streamer.webrtc.server import WebRtcServer

__all__ = ["run_webrtc"]

DRAIN_S = 3.0
"""How long, after the camera's last frame, the player may take to show the last measured one."""
STREAM = "bench"
LOOPBACK = ["127.0.0.1"]


class _CameraTrack(MediaStreamTrack):
    """The camera as an aiortc track, paced in real time; ends after the last frame. With ``ahead``
    (VP8 packets encoded before the run) it sends those, which aiortc's sender only packetizes."""

    kind = "video"

    def __init__(self, camera: Camera, ahead: list[Packet[Stream]] | None = None) -> None:
        super().__init__()
        self.camera = camera
        self.done = asyncio.Event()
        self._ahead = None if ahead is None else collections.deque(ahead)
        self._index = 0
        self._start: float | None = None

    async def recv(self) -> av.VideoFrame | Packet[Stream]:
        s = self.camera.settings
        while self._index < s.total:
            if self._start is None:
                self._start = time.monotonic()
            await asyncio.sleep(max(0.0, self._start + self._index / s.fps - time.monotonic()))
            index = self._index
            self._index += 1
            if self._ahead is None:
                frame = await asyncio.to_thread(self.camera.frame, index)
                frame.pts, frame.time_base = round(index * 90_000 / s.fps), Fraction(1, 90_000)
                self.camera.capture(index)
                return frame
            self.camera.capture(index)
            if self._ahead and (self._ahead[0].pts or 0) <= index:  # pts counts frames
                return self._ahead.popleft()
        self.done.set()
        self.stop()
        raise MediaStreamError


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
        self,
        base_url: str,
        camera: Camera,
        last: int,
        cap_s: float,
        on_error: Callable[[], object],
        ahead: list[Packet[Stream]] | None = None,
    ) -> None:
        """``ahead``: the camera's frames encoded as VP8 before the run, which the publisher sends."""
        super().__init__(name="bench-webrtc-peers", daemon=True)
        self.ahead = ahead
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
        track = _CameraTrack(self.camera, self.ahead)
        seen_last = asyncio.Event()
        locations: list[str] = []
        reading: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(self.cap_s), aiohttp.ClientSession() as http:
                tracks: asyncio.Queue[MediaStreamTrack] = asyncio.Queue(maxsize=1)
                player.on("track", tracks.put_nowait)
                # as a browser plays: each frame decoded as its last packet arrives
                release_on_marker(player.addTransceiver("video", direction="recvonly").receiver)
                locations.append(await self._negotiate(http, "whep", player))
                reading = asyncio.create_task(self._read(await tracks.get(), seen_last))
                sending = publisher.addTransceiver(track, direction="sendonly")
                if self.ahead is not None:  # its packets are VP8: offer nothing else
                    vp8 = RTCRtpSender.getCapabilities("video").codecs
                    sending.setCodecPreferences([c for c in vp8 if c.mimeType in ("video/VP8", "video/rtx")])
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
            code = framecode.read_frame(frame)
            self.arrivals.append((code, at))
            if code is not None and code >= self.last:
                seen_last.set()


async def run_webrtc(settings: Settings, measured: range) -> PathResult:
    """Through a :class:`~streamer.serving.service.Service`, as ``streamer run`` serves a WHIP stream:
    ``model: auto`` calibrated before the server starts, the stream started on its tier at once and
    moved as it runs. The peers connect once the server is up."""
    deadline = time.monotonic() + settings.cap_s
    config = settings.config(
        source=WhipSourceConfig(
            stream=STREAM, open_timeout_s=SETUP_S, end_on_unpublish=True, relay_original=False
        ),
        sink=WhepSinkConfig(stream=STREAM),
        webrtc=WebRtcConfig(port=0),
    )
    recorder = Recorder(measured)
    service = Service(config, on_output=recorder, log_failures=False)
    service.prepare()
    server = service.server
    assert server is not None
    pipeline = next(iter(service.runners.values())).pipeline
    loop = asyncio.get_running_loop()
    camera = Camera(settings)
    ahead = await asyncio.to_thread(camera.encode_all, "libvpx") if settings.camera_ahead else None
    peers: _WebRtcPeers | None = None
    running: asyncio.Task[list[StreamResult]] | None = None
    failure: StreamerError | None = None
    camera_at = time.time()
    try:
        running = asyncio.create_task(service.run())
        await _serving(server, running, deadline)
        # Peers that fail stop the pipeline, rather than leave it waiting out its open timeout.
        peers = _WebRtcPeers(
            server.url,
            camera,
            measured[-1],
            settings.cap_s,
            lambda: loop.call_soon_threadsafe(pipeline.stop),
            ahead,
        )
        camera_at = time.time()
        peers.start()
        timed_out = await finish(pipeline, running, deadline)  # the publisher leaving ends the source
        report = service_report(running.result())
    except StreamerError as exc:  # the peers' failure, if any, is the cause: it is raised instead
        failure = exc
    finally:
        await abandon(pipeline, running)
        if peers is not None:
            peers.halt()
            await asyncio.to_thread(join_threads, peers)
        camera.close()
    if peers is not None and peers.error is not None:
        raise SourceError(f"the benchmark's WebRTC peers failed: {peers.error}") from failure
    if failure is not None:
        raise failure
    assert peers is not None
    route = "aiortc publisher -> WHIP -> WhipSource | WhepSink -> WHEP -> aiortc player"
    timed_out = timed_out or peers.timed_out
    result = path_result(
        "webrtc", route, peers.codec, settings, camera, peers.arrivals, recorder, report, timed_out
    )
    return dataclasses.replace(result, moves=tier_moves(service, camera_at), stages_ms=stage_means(service))


async def _serving(server: WebRtcServer, running: asyncio.Task[Any], deadline: float) -> None:
    """Until the service's WHIP/WHEP server listens (after ``model: auto``'s calibration), or the
    service ended first (its error raised), or the deadline passed."""
    while not server.serving:
        if running.done():
            running.result()
            raise SourceError("the service ended before its WHIP/WHEP server started")
        if time.monotonic() > deadline:
            raise SourceError("the service's WHIP/WHEP server did not start before the run's deadline")
        await asyncio.sleep(0.02)
