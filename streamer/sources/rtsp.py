"""A live source that plays an RTSP (or RTSPS) stream with PyAV and keeps it playing.

A camera or server goes away and comes back; the source survives that without the pipeline noticing
more than a gap. In its decode thread it connects, decodes and, when the stream fails, ends or stalls,
reconnects with exponential backoff and jitter (forever by default). Frame indices keep counting across
reconnects and the first frame of every new connection carries ``discontinuity=True``, so no window spans
the gap; PTS and time base are the stream's own and may restart, which the flag also covers.

A stall is watched at two levels: PyAV's read timeout interrupts a read that blocks longer than
``stall_timeout_s`` (FFmpeg's own ``timeout`` bounds each socket operation at ``read_timeout_s``), and a
connection that delivers packets but no decodable frame for ``stall_timeout_s`` is dropped too.

With ``reconnect=False`` the first failure raises SourceError instead, and the server ending the
stream ends the source (EndOfStream).

Frames go to the pipeline through a DROP_OLDEST channel: a live feed must never queue without bound.

Two readers, chosen once per source by :func:`rtp_reads`: streamer's own RTP reader
(:class:`~streamer.sources.rtp_reader.RtpReader`) for H.264 or H.265 over TCP from an rtsp:// URL,
which decodes each frame as its last packet arrives, and FFmpeg's for the rest (rtsps://, UDP, a GPU
decoder). FFmpeg's parser hands a frame over only when the next one begins, so its reader costs one frame
period of latency. A stream the RTP reader does not read (another codec, or with audio to keep) is read by
FFmpeg from then on, said once.
URLs are shown only through :func:`redact_url`, so credentials never reach logs, errors or stats.

With ``keep_audio`` the same demux hands the stream's first audio track, undecoded, to an
:class:`~streamer.media.audio.AudioTrack` for the sink (a camera's AAC or G.711), its packets timed on the
video's clock (FFmpeg aligns the tracks by RTCP). A connection whose audio differs from the first one's
(codec, rate, channels) plays without sound, said once: the sink was set up for the first.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import av
import av.error
from av.audio.stream import AudioStream
from av.container import InputContainer
from av.video.frame import VideoFrame

from streamer.channel import DropPolicy
from streamer.core.retries import RetryReport, backoff_delays, check_backoff
from streamer.errors import ConfigError, EndOfStream, SourceError
from streamer.frame import Frame, StreamInfo
from streamer.media.audio import AudioTrack
from streamer.media.colour import colour_of, planes_fit, to_rgb, yuv_of
from streamer.media.hwcodec import Decode, decoder_hwaccel
from streamer.media.quantizer import DECODER_OPTIONS, quantizer
from streamer.redact import redact_url
from streamer.sources.base import Connection, DecodeLoss, ThreadedSource
from streamer.sources.rtp import RtspProtocolError, UnsupportedStream
from streamer.sources.rtp_reader import RtpReader

__all__ = [
    "Reader",
    "RtspSource",
    "RtspSourceStats",
    "RtspState",
    "Transport",
    "check_rtsp_url",
    "ffmpeg_reason",
    "redact_url",
    "rtp_reads",
]

log = logging.getLogger(__name__)

Transport = Literal["tcp", "udp"]
Reader = Literal["auto", "ffmpeg"]
"""``auto``: streamer's RTP reader where it reads the stream (:func:`rtp_reads`), FFmpeg's elsewhere."""

DEFAULT_FPS = Fraction(30)
"""Frame rate assumed when the stream states none, so sinks can still size their encoder."""


_LOSS_REPORT_S = 60.0
"""Frames a camera's stream lost to damage are said at most this often, with the count."""


def check_rtsp_url(url: str, what: str) -> None:
    """Raises ConfigError unless ``url`` is an rtsp:// or rtsps:// URL with a host."""
    try:
        parts = urllib.parse.urlsplit(url)
        has_host = bool(parts.hostname)
    except ValueError:
        has_host = False
        parts = None
    if parts is None or parts.scheme not in ("rtsp", "rtsps") or not has_host:
        raise ConfigError(
            f"{what} URL {redact_url(url)!r} is not an RTSP URL; use rtsp://host/path or, with a port, "
            "rtsp://host:8554/path (or rtsps:// for TLS)"
        )


def rtp_reads(reader: Reader, url: str, transport: Transport, gpu_decode: bool) -> bool:
    """Whether streamer's own RTP reader plays this source: asked for (``auto``), an rtsp:// URL (TLS is
    FFmpeg's), over TCP, decoded on the CPU. A camera with audio to keep is found at DESCRIBE and goes to
    FFmpeg then, whose demuxer carries the audio."""
    scheme = urllib.parse.urlsplit(url).scheme
    return reader == "auto" and scheme == "rtsp" and transport == "tcp" and not gpu_decode


def ffmpeg_reason(exc: av.error.FFmpegError) -> str:
    """FFmpeg's reason alone: ``str(exc)`` would carry the URL, credentials included."""
    return exc.strerror or type(exc).__name__


class RtspState(enum.Enum):
    CONNECTING = "connecting"
    """Opening a connection, or waiting out the backoff before the next attempt."""
    LIVE = "live"
    STALLED = "stalled"
    """The stream stopped delivering frames; the connection is being dropped."""
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class RtspSourceStats:
    """A snapshot of an :class:`RtspSource`'s connection, for logs and metrics."""

    url: str
    """Redacted."""
    state: RtspState
    attempts: int
    """Connection attempts made, successful or not."""
    connects: int
    """Connections that opened."""
    reconnects: int
    """Connections that opened after the first one."""
    frames: int
    """Frames decoded, including any the hand-off later dropped."""
    last_error: str | None
    failures: int = 0
    """Connection attempts that failed."""
    last_error_at: float | None = None
    """Wall-clock time (Unix seconds) of ``last_error``."""
    next_retry_in: float | None = None
    """Seconds until the next attempt while waiting out a backoff; None otherwise."""


class _Stalled(Exception):
    """The connection delivers packets but no frame."""


class RtspSource(ThreadedSource):
    """Frames of the first video stream of an RTSP URL as rgb24; reconnects on failure, stall or end.

    Each frame is converted with its own colour matrix and range, so a camera that comes back with
    other colour tags still gives true RGB; ``info.colour`` is the first connection's, for the sink.

    ``open`` returns once the first connection is up (waiting through retries while the server is
    down). ``max_attempts`` bounds the consecutive failed attempts of one reconnection (None: forever);
    every connection that opens starts the count again. ``capacity`` is the hand-off's size in frames.
    """

    def __init__(
        self,
        url: str,
        stream_id: str = "0",
        transport: Transport = "tcp",
        open_timeout_s: float = 5.0,
        read_timeout_s: float = 5.0,
        stall_timeout_s: float = 5.0,
        reconnect: bool = True,
        max_attempts: int | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
        jitter: float = 0.2,
        capacity: int = 8,
        keep_audio: bool = False,
        decode: Decode = "cpu",
        planes: bool = True,
        reader: Reader = "auto",
    ) -> None:
        """``decode``: where the video is decoded (``streamer.media.hwcodec``). ``planes``: frames decoded
        as yuv420p (or yuvj420p) are handed on as their 4:2:0 planes, as ``FileSource`` does; others
        as RGB. False hands on RGB only. ``reader``: see :data:`Reader`."""
        check_rtsp_url(url, "RTSP source")
        if transport not in ("tcp", "udp"):
            raise ConfigError(f"RTSP source transport must be 'tcp' or 'udp', got {transport!r}")
        if reader not in ("auto", "ffmpeg"):
            raise ConfigError(f"RTSP source reader must be 'auto' or 'ffmpeg', got {reader!r}")
        for name, value in (
            ("open_timeout_s", open_timeout_s),
            ("read_timeout_s", read_timeout_s),
            ("stall_timeout_s", stall_timeout_s),
        ):
            if value <= 0:
                raise ConfigError(f"RTSP source {name} must be positive seconds, got {value}")
        check_backoff(backoff_initial_s, backoff_max_s, jitter, max_attempts, "RTSP source")
        super().__init__(stream_id, capacity, DropPolicy.DROP_OLDEST)
        self.url = url
        self._planes = planes
        self.transport = transport
        self.open_timeout_s = open_timeout_s
        self.read_timeout_s = read_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.reconnect = reconnect
        self.max_attempts = max_attempts
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.jitter = jitter
        self.keep_audio = keep_audio
        self._audio: AudioTrack | None = None
        self._audio_mismatch_said = False
        self._shown = redact_url(url)
        self._hwaccel = decoder_hwaccel(decode, f"RTSP source {self._shown}")
        self._rtp = rtp_reads(reader, url, transport, self._hwaccel is not None)
        self._rng = random.Random()
        self._container: InputContainer | RtpReader | None = None
        # Counters are written by the decode thread and read from the event loop.
        self._lock = threading.Lock()
        self._state = RtspState.CONNECTING
        self._attempts = 0
        self._connects = 0
        self._frames_decoded = 0
        self._loss = DecodeLoss()
        self._loss_said = 0
        self._loss_said_at = -_LOSS_REPORT_S
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._failures = 0
        self._next_retry_at: float | None = None
        self._decode_started = 0.0
        """When the packet being decoded was handed to the decoder: the decode stage starts there."""

    def connection(self) -> Connection:
        stats = self.rtsp_stats()
        return Connection(
            state=stats.state.value,
            attempts=stats.attempts,
            failures=stats.failures,
            reconnects=stats.reconnects,
            last_error=stats.last_error,
            last_error_at=stats.last_error_at,
            next_retry_in=stats.next_retry_in,
            reader="rtp" if self._rtp else "ffmpeg",
        )

    def rtsp_stats(self) -> RtspSourceStats:
        with self._lock:
            return RtspSourceStats(
                url=self._shown,
                state=self._state,
                attempts=self._attempts,
                connects=self._connects,
                reconnects=max(0, self._connects - 1),
                frames=self._frames_decoded,
                last_error=self._last_error,
                failures=self._failures,
                last_error_at=self._last_error_at,
                next_retry_in=(
                    None if self._next_retry_at is None else max(0.0, self._next_retry_at - time.monotonic())
                ),
            )

    @property
    def audio(self) -> AudioTrack | None:
        return self._audio

    def _open(self) -> StreamInfo:
        container = self._connect()
        if container is None:
            raise SourceError(f"RTSP source {self._shown} was closed before it connected")
        if isinstance(container, RtpReader):
            return self._info_of(container)
        if self.keep_audio and container.streams.audio:
            self._audio = AudioTrack(container.streams.audio[0], self.stream_id)
        stream = container.streams.video[0]
        fps = stream.average_rate or stream.guessed_rate
        if not fps:
            log.warning("RTSP stream %s states no frame rate; assuming %s fps", self._shown, DEFAULT_FPS)
            fps = DEFAULT_FPS
        return StreamInfo(
            width=stream.width,
            height=stream.height,
            fps=Fraction(fps),
            time_base=Fraction(stream.time_base) if stream.time_base else 1 / Fraction(fps),
            frame_count=None,
            live=True,
            colour=colour_of(stream.codec_context),
            planes=self._planes
            and self._hwaccel is None  # a hardware decoder's frames come down as NV12, handed on as RGB
            and planes_fit(stream.codec_context.pix_fmt, stream.width, stream.height),
        )

    def _info_of(self, reader: RtpReader) -> StreamInfo:
        fps = reader.fps
        if fps is None:
            log.warning("RTSP stream %s states no frame rate; assuming %s fps", self._shown, DEFAULT_FPS)
            fps = DEFAULT_FPS
        first = reader.held[0]
        return StreamInfo(
            width=reader.width,
            height=reader.height,
            fps=fps,
            time_base=reader.time_base,
            frame_count=None,
            live=True,
            colour=colour_of(first),
            planes=self._planes and planes_fit(first.format.name, reader.width, reader.height),
        )

    def _frames(self) -> Iterator[Frame]:
        index = 0
        fresh = False
        track = self._audio
        if track is not None and not track.wait_taken(self._stop):
            track = None
        while not self._stop.is_set():
            container = self._container
            if container is None:
                container = self._connect()
                if container is None:
                    return
                fresh = True
            if isinstance(container, RtpReader):
                time_base = container.time_base
                frames = self._watched(self._decode_rtp(container))
            else:
                stream = container.streams.video[0]
                time_base = Fraction(stream.time_base) if stream.time_base else 1 / DEFAULT_FPS
                frames = self._watched(self._decode(container, track))
            ended = False
            try:
                for av_frame in frames:
                    planes = yuv_of(av_frame) if self._planes else None
                    pixels = planes if planes is not None else to_rgb(av_frame)
                    self._decoded(time.perf_counter() - self._decode_started)
                    arrival = time.monotonic()
                    with self._lock:
                        self._frames_decoded += 1
                    self._loss.frame()
                    self._say_loss(arrival)
                    yield Frame(
                        pixels,
                        index,
                        av_frame.pts,
                        time_base,
                        arrival,
                        self.stream_id,
                        discontinuity=fresh,
                        quantizer=quantizer(av_frame),
                    )
                    fresh = False
                    index += 1
                if self._stop.is_set():
                    return
                ended, reason = True, "the server ended the stream"
            except EndOfStream as exc:
                ended, reason = True, str(exc)
            except RtspProtocolError as exc:
                reason = str(exc)
            except _Stalled:
                reason = f"no frame decoded for {self.stall_timeout_s} s"
            except av.error.ExitError:
                reason = f"no data for {self.stall_timeout_s} s"
            except av.error.FFmpegError as exc:
                reason = ffmpeg_reason(exc)
            self._loss.settle(flushed=ended)
            if self._stop.is_set():
                return  # closed: the read was cut short on purpose
            self._drop(reason)
            if self.reconnect:
                continue
            if ended:
                return
            raise SourceError(
                f"RTSP stream {self._shown} failed after {index} frames: {reason}; check the server, "
                "or set reconnect to keep retrying"
            )

    async def aclose(self) -> None:
        """Stop, cutting short a read the RTP reader is blocked in (FFmpeg's reader gives up its read
        within ``stall_timeout_s``)."""
        self._stop.set()
        link = self._container
        if isinstance(link, RtpReader):
            link.abort()
        await super().aclose()

    @property
    def undecodable(self) -> int:
        return self._loss.lost

    def _say_loss(self, now: float) -> None:
        """One warning a minute at most while frames are being lost, with how many."""
        lost = self._loss.lost
        if lost > self._loss_said and now - self._loss_said_at >= _LOSS_REPORT_S:
            log.warning(
                "RTSP stream %s: %d frames could not be decoded (damaged or missing packets), %d in all",
                self._shown,
                lost - self._loss_said,
                lost,
            )
            self._loss_said, self._loss_said_at = lost, now

    def _watched(self, decodes: Iterator[list[VideoFrame]]) -> Iterator[VideoFrame]:
        """The frames of each decode, the connection marked live as they come; _Stalled once decodes
        have given no frame for ``stall_timeout_s`` (packets arrive, pictures do not)."""
        last = time.monotonic()
        for frames in decodes:
            for av_frame in frames:
                last = time.monotonic()
                with self._lock:
                    self._state = RtspState.LIVE
                yield av_frame
            if time.monotonic() - last > self.stall_timeout_s:
                raise _Stalled

    def _decode(self, container: InputContainer, track: AudioTrack | None) -> Iterator[list[VideoFrame]]:
        """Each video packet's frames, through FFmpeg's reader; audio packets go to ``track``."""
        stream = container.streams.video[0]
        audio = self._audio_of(container, track)
        for packet in container.demux(stream, *([audio] if audio is not None else [])):
            if self._stop.is_set():
                return
            if audio is not None and packet.stream.index == audio.index:
                if packet.size:  # the demuxer's empty last packet only flushes
                    assert track is not None
                    track.put(packet)
                continue
            self._decode_started = time.perf_counter()
            if packet.size:
                self._loss.packet()
            try:
                yield stream.decode(packet)
            except av.error.InvalidDataError:
                yield []  # a damaged packet of a live stream: the next keyframe repairs the picture

    def _decode_rtp(self, reader: RtpReader) -> Iterator[list[VideoFrame]]:
        """Each access unit's frames, through streamer's RTP reader."""
        for av_frame in reader.held:  # decoded while connecting: their decode time counts as none
            self._decode_started = time.perf_counter()
            self._loss.packet()
            yield [av_frame]
        for unit in reader.units():
            if self._stop.is_set():
                return
            self._decode_started = time.perf_counter()
            self._loss.packet()
            yield reader.decode(unit)

    def _audio_of(self, container: InputContainer, track: AudioTrack | None) -> AudioStream | None:
        """The connection's audio stream to demux for ``track``: None without one, or one of another
        codec, rate or channel count than the sink was set up for (said once)."""
        streams = container.streams.audio
        if track is None or not streams:
            return None
        if track.same_codec(streams[0]):
            return streams[0]
        if not self._audio_mismatch_said:
            self._audio_mismatch_said = True
            log.warning(
                "RTSP source %s came back with other audio (%s, %d Hz, %d channels) than it began with; "
                "the video goes on without sound",
                self._shown,
                streams[0].codec_context.codec.canonical_name,
                streams[0].sample_rate,
                streams[0].channels,
            )
        return None

    def _connect(self) -> InputContainer | RtpReader | None:
        """The next open connection, after as many attempts as the policy allows; None once stopped."""
        failures = 0
        report = RetryReport()
        delays = backoff_delays(self.backoff_initial_s, self.backoff_max_s, self.jitter, self._rng)
        options = {
            "rtsp_transport": self.transport,
            "timeout": str(round(self.read_timeout_s * 1_000_000)),
            "analyzeduration": "100000",
        }
        while not self._stop.is_set():
            with self._lock:
                self._state = RtspState.CONNECTING
                self._attempts += 1
            started = time.monotonic()
            attempt = self._rtp_attempt if self._rtp else self._ffmpeg_attempt
            reason = attempt(options, started)
            if self._container is not None:
                with self._lock:
                    self._connects += 1
                log.info("RTSP source %s connected", self._shown)
                return self._container
            failures += 1
            with self._lock:
                self._failures += 1
                self._last_error = reason
                self._last_error_at = time.time()
            if not self.reconnect:
                raise SourceError(
                    f"cannot play RTSP stream {self._shown}: {reason}; check that the server is running and "
                    "the URL is right, or set reconnect to keep retrying"
                )
            if self.max_attempts is not None and failures >= self.max_attempts:
                raise SourceError(
                    f"cannot play RTSP stream {self._shown}: gave up after {failures} attempts, the last "
                    f"failing with: {reason}; check that the server is running and the URL is right, or "
                    "raise max_attempts"
                )
            delay = next(delays)
            if report.due(failures, time.monotonic()):
                log.warning(
                    "RTSP source %s: %s; %s, retrying in %.1f s (source.max_attempts, or source.reconnect: "
                    "false, stops retrying)",
                    self._shown,
                    reason,
                    "failed once" if failures == 1 else f"still failing after {failures} attempts",
                    delay,
                )
            with self._lock:
                self._next_retry_at = time.monotonic() + delay
            stopped = self._stop.wait(delay)
            with self._lock:
                self._next_retry_at = None
            if stopped:
                break
        return None

    def _rtp_attempt(self, options: dict[str, str], started: float) -> str:
        """One connection attempt through the RTP reader, as :meth:`_ffmpeg_attempt`; a stream it cannot
        read goes to FFmpeg, now and from then on."""
        try:
            read_s = min(self.read_timeout_s, self.stall_timeout_s)
            self._container = RtpReader(
                self.url, self.open_timeout_s, read_s, self.stall_timeout_s, audio=self.keep_audio
            )
        except UnsupportedStream as exc:
            log.info("RTSP source %s: %s; FFmpeg's reader plays it", self._shown, exc)
            self._rtp = False
            return self._ffmpeg_attempt(options, started)
        except RtspProtocolError as exc:
            return str(exc)
        except EndOfStream:
            return "the server ended the stream before its first picture"
        except av.error.FFmpegError as exc:  # the decoder refused the first pictures
            return f"decoding the first picture failed: {ffmpeg_reason(exc)}"
        return ""

    def _ffmpeg_attempt(self, options: dict[str, str], started: float) -> str:
        """One connection attempt through FFmpeg: the container is left in ``_container``, or the reason
        it failed returned."""
        try:
            container = av.open(
                self.url,
                options=options,
                timeout=(self.open_timeout_s, self.stall_timeout_s),
                hwaccel=self._hwaccel,
            )
        except av.error.FFmpegError as exc:
            reason = ffmpeg_reason(exc)
            if time.monotonic() - started >= 0.9 * min(self.open_timeout_s, self.read_timeout_s):
                # FFmpeg words a server that accepts and never answers as bad data: say what it was.
                reason = f"no answer within {self.open_timeout_s:g} s (open_timeout_s); FFmpeg: {reason}"
            return reason
        video = container.streams.video
        if video and video[0].width > 0 and video[0].height > 0:
            video[0].thread_type = "SLICE"  # frame threads would hold frames back: latency
            video[0].codec_context.options = DECODER_OPTIONS
            self._container = container
            return ""
        container.close()
        return "the stream has no video track" if not video else "the stream states no picture size"

    def _drop(self, reason: str) -> None:
        """Close the current connection after it failed, stalled or ended."""
        log.warning("RTSP source %s lost its stream: %s", self._shown, reason)
        with self._lock:
            self._state = RtspState.STALLED
            self._last_error = reason
            self._last_error_at = time.time()
        self._release()

    def _release(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            try:
                container.close()
            except av.error.FFmpegError as exc:
                log.debug("closing RTSP stream %s: %s", self._shown, ffmpeg_reason(exc))

    def _close(self) -> None:
        self._release()
        with self._lock:
            self._state = RtspState.CLOSED
