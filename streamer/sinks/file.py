"""A sink that encodes frames to a video file with PyAV, keeping every frame's PTS.

The container follows the path's suffix (H.264 in mp4 by default). The header is written in ``open``,
so an unusable path or encoder setting fails there rather than on the first frame; ``aclose`` flushes
the encoder so the file is complete.

A recording survives the process: mp4 and mov are written as fragments of at most ``fragment_s``
(fragmented MP4, the index with each fragment rather than one at the end), each handed to the OS as it
is made, so a process killed mid-recording leaves a file that plays to within about a fragment and the
encoder's lookahead of where it stopped. MPEG-TS (``.ts``) and Matroska are written as they go anyway.
An output stops with one line when its file would pass ``max_bytes`` or the disk's free space would fall
under ``min_free_bytes``, checked about once a second; the stream's other outputs go on.

Output PTS are the frames' own, in the stream's time base, as long as they increase. A live source's
PTS restart when it reconnects (an RTSP camera's new session starts its clock again); a muxer refuses
a timestamp that goes back, so from such a frame on the sink shifts every PTS to continue one frame
period after the last one written: the file keeps playing in order instead of failing.

A file source's audio track, attached before ``open``, is written beside the video with its own
timestamps (:mod:`streamer.sinks.audio`): each packet before the first video frame that does not start
earlier, so the file is interleaved by time and A/V sync holds by construction.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
from fractions import Fraction
from pathlib import Path

import av
import av.error
from av.container import OutputContainer
from av.video.stream import VideoStream

from streamer.errors import FrameError, SinkError
from streamer.frame import Frame, StreamInfo
from streamer.media.audio import AudioTrack
from streamer.media.codecs import DEFAULT_CRF
from streamer.media.colour import encoder_frame
from streamer.media.hwcodec import encoder_options, resolve_encoder
from streamer.sinks.audio import AudioWriter
from streamer.sinks.base import PacketSink
from streamer.sinks.clock import TIME_BASE
from streamer.sinks.encoder import EncodedFrame, Encoding, Resync, SharedEncoder, add_video

__all__ = ["DEFAULT_CRF", "NEAR_LOSSLESS_CRF", "FileSink"]

log = logging.getLogger(__name__)


NEAR_LOSSLESS_CRF = 4
"""A recording setting that keeps nearly all of the picture it is given, at several times the size."""

_FRAGMENTED = frozenset({"mp4", "mov", "ipod", "ismv", "3gp", "3g2", "psp", "f4v"})
"""FFmpeg muxers that write ISO BMFF and so can write it as fragments."""

_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM})


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def _storage_trouble(exc: Exception) -> bool:
    """Whether ``exc`` says the disk or the path failed (full, read-only, denied), not the encoder."""
    return isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS


class FileSink(PacketSink):
    """Writes frames in the order sent; ``options`` go to the encoder and win over preset/crf/bf.
    ``codec``: any encoder PyAV has; ``auto`` is h264_nvenc where NVENC works, libx264 otherwise
    (``streamer.media.hwcodec``), and h264_nvenc gets libx264's preset and CRF as its nearest."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        codec: str = "libx264",
        preset: str = "veryfast",
        crf: int = DEFAULT_CRF,
        bitrate: int | None = None,
        gop: int | None = None,
        options: dict[str, str] | None = None,
        fragment_s: float | None = 1.0,
        max_bytes: int | None = None,
        min_free_bytes: int = 0,
    ) -> None:
        if fragment_s is not None and not fragment_s > 0:
            raise SinkError(f"file sink '{path}': fragment_s is {fragment_s}; give seconds above 0, or null")
        self.path = Path(path)
        self.fragment_s = fragment_s
        self.max_bytes = max_bytes
        self.min_free_bytes = min_free_bytes
        self._next_check = 0
        """Frames written when the file's size and the disk's free space are next looked at."""
        self.codec = resolve_encoder(codec, f"file sink '{path}'")
        self.preset = preset
        self.crf = crf
        self.bitrate = bitrate
        self.gop = gop
        self.options = dict(options or {})
        self._info: StreamInfo | None = None
        self._container: OutputContainer | None = None
        self._stream: VideoStream | None = None
        self._written = 0
        self._shift = 0
        """Added to every PTS (stream time base) since the input's PTS last went back."""
        self._last_pts: int | None = None
        self._track: AudioTrack | None = None
        self._audio: AudioWriter | None = None
        self._audio_failure: Exception | None = None
        """Writing audio from the demuxer's thread failed: the next send or aclose raises it."""
        self._closed = False
        self._follows: Encoding | None = None
        self._encoder: SharedEncoder | None = None
        """Set when this sink writes a shared encode's packets instead of encoding."""
        self._resync = Resync()
        self._skipped = 0
        self._shared_end: Fraction | None = None
        """When the last frame of a shared encode written ends, in the source's media time."""
        # Encoding runs in worker threads; a send still running when aclose starts must not race the flush.
        self._lock = threading.Lock()

    @property
    def frames_written(self) -> int:
        return self._written

    @property
    def frames_dropped(self) -> int:
        return self._skipped

    def follow(self, encoding: Encoding) -> None:
        """Record ``encoding`` (a live output's) rather than encode with this sink's own settings: with
        that output in the same stream, the two share one encode."""
        self._follows = encoding

    def encoding(self) -> Encoding:
        if self._follows is not None:
            return self._follows
        return Encoding.of(self.codec, self._codec_options(), bitrate=self.bitrate, gop=self.gop)

    async def open_encoded(self, info: StreamInfo, encoder: SharedEncoder) -> None:
        self._encoder = encoder
        await self.open(info)

    async def send_encoded(self, encoded: EncodedFrame) -> None:
        if self._info is None or self._closed:
            raise RuntimeError(f"file sink '{self.path}' is not open; await open_encoded() first")
        await asyncio.to_thread(self._write_encoded, encoded)

    def attach_audio(self, track: AudioTrack) -> bool:
        if self._info is not None:
            raise RuntimeError(f"file sink '{self.path}' is already open; attach audio before open")
        self._track = track
        return True

    async def open(self, info: StreamInfo) -> None:
        if self._closed:
            raise RuntimeError(f"file sink '{self.path}' is closed; make a new sink")
        if self._info is not None:
            raise RuntimeError(f"file sink '{self.path}' is already open")
        try:
            await asyncio.to_thread(self._open, info)
        except BaseException:
            if self._track is not None:
                self._track.decline()  # the demuxer waits for a decision
            raise
        self._info = info

    async def send(self, frame: Frame) -> None:
        info = self._info
        if info is None or self._closed:
            raise RuntimeError(f"file sink '{self.path}' is not open; await open(info) first")
        if (frame.width, frame.height) != (info.width, info.height):
            raise FrameError(
                f"frame {frame.index} of stream {frame.stream_id!r} is {frame.width}x{frame.height} but "
                f"'{self.path}' was opened for {info.width}x{info.height}; resize upstream or open a new sink"
            )
        await asyncio.to_thread(self._encode, frame, info)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._finish)

    def _open(self, info: StreamInfo) -> None:
        try:
            kind = av.Codec(self.codec, "w").type
        except ValueError as exc:
            raise SinkError(
                f"cannot write '{self.path}': FFmpeg has no encoder {self.codec!r}; use libx264 or another "
                "video encoder listed by `ffmpeg -encoders`"
            ) from exc
        if kind != "video":
            raise SinkError(f"cannot write '{self.path}': {self.codec!r} encodes {kind}, not video")
        parent = self.path.parent
        if not parent.exists():
            raise SinkError(
                f"cannot write '{self.path}': directory '{parent}' does not exist; create it first"
            )
        if not parent.is_dir():
            raise SinkError(f"cannot write '{self.path}': '{parent}' is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise SinkError(f"cannot write '{self.path}': directory '{parent}' is not writable")
        try:
            container = av.open(str(self.path), "w")
        except (av.error.FFmpegError, ValueError, OSError) as exc:
            raise SinkError(
                f"cannot create '{self.path}': {_reason(exc)}; use a suffix FFmpeg knows (.mp4, .mkv, .mov)"
            ) from exc
        try:
            stream = self._add_video(container, info)
            if info.rotation:
                stream.set_display_rotation(info.rotation)
            container.metadata.update(dict(info.tags))
            audio = None if self._track is None else AudioWriter.add(container, self._track, str(self.path))
            self._fragment(container, audio)
            container.start_encoding()
        except SinkError:
            with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                container.close()
            raise
        except (av.error.FFmpegError, ValueError, OSError) as exc:
            with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                container.close()
            fix = (
                "check that the disk has space and the path is writable"
                if _storage_trouble(exc)
                else "check the codec name and its options"
            )
            raise SinkError(
                f"cannot start encoding '{self.path}' with {self.codec} at {info.width}x{info.height}"
                f"{'' if self._track is None else ' and the source audio'}: {_reason(exc)}; {fix}"
            ) from exc
        self._container, self._stream, self._audio = container, stream, audio
        if self._track is not None:
            self._track.take(self._spill)

    def _fragment(self, container: OutputContainer, audio: AudioWriter | None) -> None:
        """Ask an mp4 or mov muxer for fragments of ``fragment_s``, each flushed to the OS as it is made,
        where the file's streams are all configured in its header."""
        if self.fragment_s is None or container.format.name not in _FRAGMENTED:
            return
        if audio is not None and audio.configured_in_packets:
            log.info(
                "'%s': written with its index at the end (not fragmented: a crash loses it), since the "
                "source's audio states its format only in its packets (ADTS); sink.audio: drop records the "
                "video crash-safe",
                self.path,
            )
            return
        container.container_options.update(
            {
                "movflags": "+frag_keyframe+empty_moov+default_base_moof",
                "frag_duration": str(round(self.fragment_s * 1e6)),
                "flush_packets": "1",  # each fragment to the OS as it is made, not when 32 KiB are due
            }
        )

    def _add_video(self, container: OutputContainer, info: StreamInfo) -> VideoStream:
        """The file's video stream: its own encoder, or a copy of the shared encoder's."""
        if self._encoder is not None:
            shared = container.add_stream_from_template(self._encoder.template)
            shared.time_base = TIME_BASE
            return shared
        return add_video(container, self.encoding(), info, info.time_base)

    def _codec_options(self) -> dict[str, str]:
        opts = {"preset": self.preset, "bf": "0"}
        if self.bitrate is None:
            opts["crf"] = str(self.crf)
        return encoder_options(self.codec, opts) | self.options

    def _encode(self, frame: Frame, info: StreamInfo) -> None:
        with self._lock:
            container, stream = self._container, self._stream
            if container is None or stream is None:
                raise SinkError(
                    f"file sink '{self.path}' was closed while frame {frame.index} was being sent"
                )
            self._raise_audio_failure()
            try:
                av_frame = encoder_frame(frame, stream.codec_context)
                av_frame.pts = self._output_pts(frame, info)
                av_frame.time_base = info.time_base
                packets = stream.encode(av_frame)
                if self._audio is not None:
                    self._audio.mux_until(container, av_frame.pts * info.time_base)
                container.mux(packets)
            except (av.error.FFmpegError, ValueError) as exc:
                raise SinkError(
                    f"encoding frame {frame.index} (pts {frame.pts}) to '{self.path}' failed: {_reason(exc)}"
                    + ("; check that the disk has space" if _storage_trouble(exc) else "")
                ) from exc
            self._written += 1
            self._last_pts = av_frame.pts
            self._check_room(info)

    def _write_encoded(self, encoded: EncodedFrame) -> None:
        with self._lock:
            container, stream, encoder = self._container, self._stream, self._encoder
            if container is None or stream is None:
                raise SinkError(
                    f"file sink '{self.path}' was closed while frame {encoded.index} was being sent"
                )
            assert encoder is not None
            self._raise_audio_failure()
            # After frames this output lost (its queue was full), a decoder can resume only at a keyframe.
            admitted = self._resync.admit(encoded)
            if admitted.ask_keyframe:
                encoder.request_keyframe()
            self._skipped += admitted.skipped
            try:
                if self._audio is not None and encoded.media is not None:
                    # The shared encode's clock starts at zero: the sound moves with the pictures.
                    self._audio.offset = encoded.media - encoded.pts * TIME_BASE
                    self._audio.mux_until(container, encoded.media)
                container.mux([p.packet(stream) for p in admitted.packets])
            except (av.error.FFmpegError, ValueError) as exc:
                raise SinkError(
                    f"writing frame {encoded.index} to '{self.path}' failed: {_reason(exc)}"
                    + ("; check that the disk has space" if _storage_trouble(exc) else "")
                ) from exc
            self._written += len(admitted.packets)
            if self._info is not None:
                self._check_room(self._info)
            if encoded.index >= 0:
                info = self._info
                if encoded.media is not None and info is not None and info.fps > 0:
                    self._shared_end = encoded.media + 1 / info.fps

    def _check_room(self, info: StreamInfo) -> None:
        """About once a second of video: SinkError once the file has passed ``max_bytes`` or the disk's
        free space is under ``min_free_bytes``."""
        if self._written < self._next_check or (self.max_bytes is None and not self.min_free_bytes):
            return
        self._next_check = self._written + max(1, round(info.fps))
        try:
            size = os.stat(self.path).st_size
            disk = os.statvfs(self.path.parent)
        except OSError as exc:
            raise SinkError(f"'{self.path}' cannot be looked at ({_reason(exc)}); was it moved?") from exc
        if self.max_bytes is not None and size > self.max_bytes:
            raise SinkError(
                f"'{self.path}' reached {size / 1e6:.1f} MB, past the output's max_mb "
                f"({self.max_bytes / 1e6:.1f} MB); the recording stops here (what was written plays)"
            )
        free = disk.f_bavail * disk.f_frsize
        if free < self.min_free_bytes:
            raise SinkError(
                f"the disk of '{self.path}' has {free / 1e6:.0f} MB free, under the output's min_free_mb "
                f"({self.min_free_bytes / 1e6:.0f} MB); the recording stops here (what was written plays)"
            )

    def _output_pts(self, frame: Frame, info: StreamInfo) -> int:
        """The frame's PTS in the stream's time base, shifted to stay after the last one written."""
        if frame.pts is None:
            pts = round(frame.index / info.fps / info.time_base)
        else:
            pts = round(frame.pts * frame.time_base / info.time_base)
        pts += self._shift
        last = self._last_pts
        if last is not None and pts <= last:
            step = _period(info)
            log.info(
                "'%s': frame %d's time goes back (a source reconnect?); later frames shift to follow on",
                self.path,
                frame.index,
            )
            self._shift += last + step - pts
            pts = last + step
        return pts

    def _spill(self) -> None:
        """In the demuxer's thread: the audio past its queue's bound, muxed now; a failure waits for
        the next send (or aclose), and the track drops what comes after it."""
        with self._lock:
            container, audio = self._container, self._audio
            if container is None or audio is None:
                return
            try:
                audio.spill(container)
            except (av.error.FFmpegError, ValueError, OSError) as exc:
                self._audio_failure = exc
                self._audio = None
                audio.track.discard()

    def _raise_audio_failure(self) -> None:
        failure = self._audio_failure
        if failure is not None:
            raise SinkError(
                f"writing the source audio to '{self.path}' failed: {_reason(failure)}"
                + ("; check that the disk has space" if _storage_trouble(failure) else "")
            ) from failure

    def _video_end(self) -> Fraction | None:
        """When the last frame written ends, in seconds; None before the first."""
        info = self._info
        if self._encoder is not None:
            return self._shared_end
        if info is None or self._last_pts is None:
            return None
        return (self._last_pts + _period(info)) * info.time_base

    def _finish(self) -> None:
        with self._lock:
            container, stream, audio = self._container, self._stream, self._audio
            self._container = self._stream = self._audio = None
            if container is None or stream is None:
                return
            failure: Exception | None = self._audio_failure
            try:
                if self._encoder is None:  # a shared encoder's last packets came through send_encoded
                    container.mux(stream.encode(None))
            except (av.error.FFmpegError, ValueError, OSError) as exc:
                failure = failure or exc
            if audio is not None:
                # Audio past the video is the file's own only when the source read it to the end.
                try:
                    audio.finish(container, None if audio.track.complete else self._video_end())
                except (av.error.FFmpegError, ValueError, OSError) as exc:
                    failure = failure or exc
            try:
                container.close()  # writes the trailer: the disk filling up shows here too
            except (av.error.FFmpegError, ValueError, OSError) as exc:
                failure = failure or exc
            if failure is not None:
                raise SinkError(
                    f"finishing '{self.path}' failed: {_reason(failure)}; the file is incomplete"
                    + ("; check that the disk has space" if _storage_trouble(failure) else "")
                ) from failure
            end = self._video_end()
            with contextlib.suppress(OSError):
                log.info(
                    "'%s': %d frames written (%s s), %d bytes",
                    self.path,
                    self._written,
                    "?" if end is None else f"{float(end):.2f}",
                    os.stat(self.path).st_size,
                )


def _period(info: StreamInfo) -> int:
    """One frame period in the stream's time base, at least one tick."""
    return max(1, round(1 / info.fps / info.time_base))
