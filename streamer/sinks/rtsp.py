"""A live sink that publishes H.264 to an RTSP server (ANNOUNCE/RECORD) with PyAV, and keeps publishing.

Encoding is libx264 tuned for latency (``zerolatency``, no B-frames, a short GOP, a set bitrate) and
runs off the event loop, one frame at a time under a lock. When the server goes away (a write fails),
the connection is dropped and a background thread reopens it with exponential backoff and jitter;
frames sent meanwhile are dropped and counted, never queued, so a viewer that comes back gets the
present, not a backlog. Every connection gets a fresh encoder, so it begins with a keyframe.

Output timestamps are the sink's own (90 kHz, the RTP clock), advanced by each frame's distance in
media time from the one before (one frame period at a discontinuity or without PTS): they increase
strictly even when the source's PTS restart after its reconnects, and across the sink's own.

A source's audio, attached before ``open``, is published as a second track of the same session: each
packet goes out just before the first video frame that does not start earlier, moved onto the output
clock by that frame's offset, so pictures and sound leave together and stay in sync however late the
enhancement makes them. AAC, G.711 and Opus go as they are; other codecs are transcoded to AAC. Audio
from before the first frame, or sent while the server is away, is dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import av
import av.error
from av.container import OutputContainer
from av.stream import Stream
from av.video.stream import VideoStream

from streamer.core.retries import RetryReport, backoff_delays, check_backoff
from streamer.errors import ConfigError, FrameError, SinkError
from streamer.frame import Frame, StreamInfo
from streamer.media.colour import encoder_frame
from streamer.media.hwcodec import encoder_options, resolve_encoder
from streamer.sinks.audio import AudioWriter
from streamer.sinks.base import PacketSink
from streamer.sinks.clock import MAX_STEP_S, TIME_BASE, OutputClock
from streamer.sinks.encoder import EncodedFrame, Encoding, Resync, SharedEncoder, add_video
from streamer.sinks.nodelay import disable_nagle, rtsp_peer
from streamer.sources.rtsp import Transport, check_rtsp_url, ffmpeg_reason, redact_url

if TYPE_CHECKING:
    from streamer.media.audio import AudioTrack

__all__ = ["MAX_STEP_S", "TIME_BASE", "OutputClock", "RtspSink", "RtspSinkState", "RtspSinkStats"]

log = logging.getLogger(__name__)

_STOPS = "the output's max_attempts, or reconnect: false, stops retrying"
"""What a reconnecting output's log lines say ends the retries."""


class RtspSinkState(enum.Enum):
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    """Not publishing: waiting out the backoff or reconnecting; frames sent now are dropped."""
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class RtspSinkStats:
    """A snapshot of an :class:`RtspSink`'s connection, for logs and metrics."""

    url: str
    """Redacted."""
    state: RtspSinkState
    connects: int
    reconnects: int
    frames_written: int
    frames_dropped: int
    """Frames sent while disconnected."""
    last_error: str | None


@dataclass(slots=True)
class _Connection:
    container: OutputContainer
    stream: VideoStream
    audio: AudioWriter | None


class RtspSink(PacketSink):
    """Publishes frames in the order sent; ``open`` fails only when the first connection does and
    ``reconnect`` is off (with it on, the sink starts disconnected and keeps trying)."""

    live = True

    def __init__(
        self,
        url: str,
        bitrate: int = 2_000_000,
        gop: int = 30,
        preset: str = "ultrafast",
        tune: str = "zerolatency",
        transport: Transport = "tcp",
        reconnect: bool = True,
        max_attempts: int | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
        jitter: float = 0.2,
        timeout_s: float = 5.0,
        threads: int | None = None,
        keep_audio: bool = True,
        codec: str = "libx264",
    ) -> None:
        """``codec``: libx264, h264_nvenc or auto (``streamer.media.hwcodec``); preset and tune are libx264's
        names, which NVENC gets as its nearest."""
        check_rtsp_url(url, "RTSP sink")
        if transport not in ("tcp", "udp"):
            raise ConfigError(f"RTSP sink transport must be 'tcp' or 'udp', got {transport!r}")
        if bitrate < 1 or gop < 1:
            raise ConfigError(f"RTSP sink bitrate and gop must be positive, got {bitrate} and {gop}")
        if timeout_s <= 0:
            raise ConfigError(f"RTSP sink timeout_s must be positive seconds, got {timeout_s}")
        if threads is not None and threads < 1:
            raise ConfigError(
                f"RTSP sink threads must be at least 1, or null for libx264's choice; got {threads}"
            )
        check_backoff(backoff_initial_s, backoff_max_s, jitter, max_attempts, "RTSP sink")
        self.url = url
        self.codec = resolve_encoder(codec, f"RTSP sink {redact_url(url)}")
        self.bitrate = bitrate
        self.gop = gop
        self.preset = preset
        self.tune = tune
        self.transport = transport
        self.reconnect = reconnect
        self.max_attempts = max_attempts
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.jitter = jitter
        self.timeout_s = timeout_s
        self.threads = threads
        self.keep_audio = keep_audio
        self._shown = redact_url(url)
        self._rng = random.Random()
        self._info: StreamInfo | None = None
        # Guards everything below; held while encoding, so aclose never races a send.
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._state = RtspSinkState.DISCONNECTED
        self._closing = threading.Event()
        self._reconnector: threading.Thread | None = None
        self._failed: SinkError | None = None
        self._connects = 0
        self._written = 0
        self._dropped = 0
        self._last_error: str | None = None
        self._clock: OutputClock | None = None
        self._track: AudioTrack | None = None
        self._period = Fraction(1, 30)
        """One frame period in seconds, the stream's."""
        self._last_media: Fraction | None = None
        """Media time of the last frame published: the audio after it is not sent at close."""
        self._encoder: SharedEncoder | None = None
        """Set when this sink writes a shared encode's packets instead of encoding."""
        self._resync = Resync()

    @property
    def frames_written(self) -> int:
        return self._written

    @property
    def frames_dropped(self) -> int:
        return self._dropped

    @property
    def reconnects(self) -> int:
        return max(0, self._connects - 1)

    def rtsp_stats(self) -> RtspSinkStats:
        """Read without the lock, which an encode may hold: each field is current, together they may be
        a frame apart. Safe to call from the event loop."""
        return RtspSinkStats(
            url=self._shown,
            state=self._state,
            connects=self._connects,
            reconnects=self.reconnects,
            frames_written=self._written,
            frames_dropped=self._dropped,
            last_error=self._last_error,
        )

    def attach_audio(self, track: AudioTrack) -> bool:
        if self._info is not None:
            raise RuntimeError(f"RTSP sink {self._shown} is already open; attach audio before open")
        if not self.keep_audio:
            return False
        self._track = track
        return True

    async def open(self, info: StreamInfo) -> None:
        if self._closing.is_set():
            raise RuntimeError(f"RTSP sink {self._shown} is closed; make a new sink")
        if self._info is not None:
            raise RuntimeError(f"RTSP sink {self._shown} is already open")
        self._info = info
        self._clock = OutputClock(info.fps)
        self._period = 1 / info.fps if info.fps > 0 else Fraction(1, 30)
        try:
            conn = await asyncio.to_thread(self._connect, info)
        except SinkError as exc:
            if not self.reconnect:
                if self._track is not None:
                    self._track.decline()
                raise SinkError(f"{exc}, or set reconnect to keep retrying") from None
            log.warning("RTSP sink %s: %s; retrying in the background (%s)", self._shown, exc, _STOPS)
            with self._lock:
                self._last_error = str(exc)
                self._start_reconnecting()
        else:
            with self._lock:
                self._install(conn)
        if self._track is not None:
            self._track.take(self._spill)

    def encoding(self) -> Encoding:
        return Encoding.of(self.codec, self._codec_options(), bitrate=self.bitrate)

    async def open_encoded(self, info: StreamInfo, encoder: SharedEncoder) -> None:
        self._encoder = encoder
        await self.open(info)

    async def send_encoded(self, encoded: EncodedFrame) -> None:
        if self._info is None or self._closing.is_set():
            raise RuntimeError(f"RTSP sink {self._shown} is not open; await open_encoded() first")
        await asyncio.to_thread(self._write_encoded, encoded)

    async def send(self, frame: Frame) -> None:
        info = self._info
        if info is None or self._closing.is_set():
            raise RuntimeError(f"RTSP sink {self._shown} is not open; await open(info) first")
        if (frame.width, frame.height) != (info.width, info.height):
            raise FrameError(
                f"frame {frame.index} of stream {frame.stream_id!r} is {frame.width}x{frame.height} but "
                f"RTSP sink {self._shown} was opened for {info.width}x{info.height}; resize upstream or "
                "open a new sink"
            )
        await asyncio.to_thread(self._write, frame)

    async def aclose(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        reconnector = self._reconnector
        if reconnector is not None:
            await asyncio.to_thread(reconnector.join, self.timeout_s + 1.0)
        await asyncio.to_thread(self._finish)

    def _write(self, frame: Frame) -> None:
        with self._lock:
            if self._failed is not None:
                raise self._failed
            assert self._clock is not None
            pts = self._clock.advance(frame)  # dropped frames advance it too: the output keeps media time
            conn = self._conn
            media = None if frame.pts is None else frame.pts * frame.time_base
            if conn is None:
                self._drop(media)
                return
            try:
                av_frame = encoder_frame(frame, conn.stream.codec_context)
                av_frame.pts = pts
                av_frame.time_base = TIME_BASE
                packets = conn.stream.encode(av_frame)
            except (av.error.FFmpegError, ValueError) as exc:
                raise SinkError(
                    f"encoding frame {frame.index} for RTSP sink {self._shown} failed: "
                    f"{exc.strerror if isinstance(exc, av.error.FFmpegError) else exc}"
                ) from None
            if self._publish(conn, packets, media, pts, frame.index):
                self._written += 1

    def _write_encoded(self, encoded: EncodedFrame) -> None:
        with self._lock:
            if self._failed is not None:
                raise self._failed
            conn, encoder = self._conn, self._encoder
            assert encoder is not None
            if conn is None:
                self._drop(encoded.media)
                return
            admitted = self._resync.admit(encoded)
            if admitted.ask_keyframe:
                encoder.request_keyframe()
            self._dropped += admitted.skipped
            packets = [p.packet(conn.stream) for p in admitted.packets]
            if self._publish(conn, packets, encoded.media, encoded.pts, encoded.index):
                self._written += len(packets)

    def _drop(self, media: Fraction | None) -> None:
        """A frame not published (lock held); its sound goes with it."""
        self._dropped += 1
        if self._track is not None and media is not None:
            self._track.drop_until(media)

    def _publish(
        self,
        conn: _Connection,
        packets: list[av.Packet[Stream]],
        media: Fraction | None,
        pts: int,
        index: int,
    ) -> bool:
        """Sends one frame's packets and the sound up to its end (lock held); False: the server is lost."""
        try:
            if conn.audio is not None and media is not None:
                # The sound of the frame's whole period goes first: FFmpeg sends a packet once every
                # track has a later one queued, and players sync the tracks by when each began
                # (RTCP), so a frame left waiting for the next frame's audio would play late.
                conn.audio.offset = media - pts * TIME_BASE
                conn.audio.mux_until(conn.container, media + self._period)
            conn.container.mux(packets)
            self._last_media = media
        except av.error.FFmpegError as exc:
            self._lose(f"writing frame {index} failed: {ffmpeg_reason(exc)}")
            self._dropped += 1
            if self._failed is not None:
                raise self._failed from None
            return False
        return True

    def _connect(self, info: StreamInfo) -> _Connection:
        """One connection attempt: ANNOUNCE, SETUP and RECORD with a fresh encoder; raises SinkError."""
        options = {"rtsp_transport": self.transport, "timeout": str(round(self.timeout_s * 1_000_000))}
        try:
            container = av.open(self.url, "w", format="rtsp", options=options)
        except (av.error.FFmpegError, ValueError) as exc:
            raise SinkError(self._cannot_publish(exc)) from None
        try:
            stream = self._add_video(container, info)
            audio = None if self._track is None else AudioWriter.add(container, self._track, self._shown)
            container.start_encoding()
        except SinkError:
            with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                container.close()
            raise
        except (av.error.FFmpegError, ValueError) as exc:
            with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                container.close()
            raise SinkError(self._cannot_publish(exc)) from None
        peer = rtsp_peer(self.url)
        if self.transport == "tcp" and peer is not None:
            disable_nagle(*peer)  # a keyframe's packets would wait out the server's delayed ACKs
        return _Connection(container, stream, audio)

    def _codec_options(self) -> dict[str, str]:
        codec = {
            "preset": self.preset,
            "tune": self.tune,
            "bf": "0",
            "g": str(self.gop),
            "maxrate": str(self.bitrate),
            "bufsize": str(self.bitrate),
        }
        if self.threads is not None:
            codec["threads"] = str(self.threads)
        return encoder_options(self.codec, codec)

    def _add_video(self, container: OutputContainer, info: StreamInfo) -> VideoStream:
        """The connection's video stream: its own encoder, or a copy of the shared encoder's."""
        if self._encoder is None:
            return add_video(container, self.encoding(), info, TIME_BASE)
        stream = container.add_stream_from_template(self._encoder.template)
        stream.time_base = TIME_BASE
        return stream

    def _cannot_publish(self, exc: Exception) -> str:
        reason = ffmpeg_reason(exc) if isinstance(exc, av.error.FFmpegError) else str(exc)
        return (
            f"cannot publish to RTSP server {self._shown}: {reason}; check that the server is running "
            "and accepts RECORD on this path"
        )

    def _install(self, conn: _Connection) -> None:
        """Make ``conn`` the live connection (lock held)."""
        self._conn = conn
        self._resync.restart()
        self._connects += 1
        self._state = RtspSinkState.CONNECTED
        log.info("RTSP sink %s publishing (connection %d)", self._shown, self._connects)

    def _lose(self, reason: str) -> None:
        """Drop the broken connection and start reconnecting (lock held)."""
        log.warning("RTSP sink %s lost the server: %s", self._shown, reason)
        self._last_error = reason
        conn, self._conn = self._conn, None
        self._state = RtspSinkState.DISCONNECTED
        if conn is not None:
            with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                conn.container.close()
        if not self.reconnect:
            self._failed = SinkError(
                f"RTSP sink {self._shown} lost the server: {reason}; check the server, or set reconnect "
                "to keep publishing through outages"
            )
            if self._track is not None:
                self._track.discard()
            return
        self._start_reconnecting()

    def _start_reconnecting(self) -> None:
        if self._reconnector is None or not self._reconnector.is_alive():
            self._reconnector = threading.Thread(
                target=self._reconnect, name="rtsp-sink-reconnect", daemon=True
            )
            self._reconnector.start()

    def _reconnect(self) -> None:
        info = self._info
        assert info is not None
        failures = 0
        report = RetryReport()
        for delay in backoff_delays(self.backoff_initial_s, self.backoff_max_s, self.jitter, self._rng):
            if self._closing.wait(delay):
                return
            try:
                conn = self._connect(info)
            except SinkError as exc:
                failures += 1
                with self._lock:
                    self._last_error = str(exc)
                    if self.max_attempts is not None and failures >= self.max_attempts:
                        self._failed = SinkError(
                            f"RTSP sink {self._shown} gave up after {failures} attempts to reconnect: {exc}"
                        )
                        if self._track is not None:
                            self._track.discard()
                        return
                if report.due(failures, time.monotonic()):
                    log.warning(
                        "RTSP sink %s: reconnect attempt %d failed: %s; retrying (%s)",
                        self._shown,
                        failures,
                        exc,
                        _STOPS,
                    )
                continue
            with self._lock:
                if self._closing.is_set():
                    with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                        conn.container.close()
                    return
                self._install(conn)
            return

    def _spill(self) -> None:
        """In the demuxer's thread: the audio past its queue's bound, sent now (or dropped while the
        server is away); a server lost meanwhile is handled as a failed video write is."""
        with self._lock:
            conn = self._conn
            if conn is None or conn.audio is None:
                if self._track is not None:
                    self._track.drop_over()
                return
            try:
                conn.audio.spill(conn.container)
            except (av.error.FFmpegError, ValueError) as exc:
                reason = ffmpeg_reason(exc) if isinstance(exc, av.error.FFmpegError) else str(exc)
                self._lose(f"writing audio failed: {reason}")

    def _video_end(self) -> Fraction | None:
        """When the last frame published ends, in media seconds; None before the first."""
        return None if self._last_media is None else self._last_media + self._period

    def _finish(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._state = RtspSinkState.CLOSED
            if conn is None:
                if self._track is not None:
                    self._track.discard()
                return
            try:
                if self._encoder is None:  # a shared encoder's last packets came through send_encoded
                    conn.container.mux(conn.stream.encode(None))
                if conn.audio is not None:
                    complete = conn.audio.track.complete  # the source's sound past its last frame
                    conn.audio.finish(conn.container, None if complete else self._video_end())
            except (av.error.FFmpegError, ValueError, OSError) as exc:
                log.warning("RTSP sink %s: flushing at close failed: %s", self._shown, type(exc).__name__)
            finally:
                with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                    conn.container.close()
