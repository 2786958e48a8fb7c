"""A source that decodes the first video stream of any file PyAV can read.

Files are read on demand, so the default policy is BLOCK: the decode thread runs only as fast as the
pipeline consumes and no frame is lost. With ``keep_audio`` the same demux also hands the first audio
stream's packets, undecoded, to an :class:`~streamer.media.audio.AudioTrack` for a file sink to write.

A recording can also stand in for a camera: ``realtime`` releases each frame at its PTS on the wall
clock and makes the source live (DROP_OLDEST: a slow pipeline loses the oldest frames, counted);
``loop`` starts the file again at its end, its PTS continuing across the seam and the first frame of
each pass marked as a discontinuity, so no window spans two passes. A looped file's audio is dropped
(logged once): each pass's audio would go back in time.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import av.error
from av.audio.stream import AudioStream
from av.container import InputContainer
from av.stream import Stream
from av.video.frame import VideoFrame
from av.video.stream import VideoStream

from streamer.channel import DropPolicy
from streamer.core.pacing import LoopTimeline, Pacer
from streamer.errors import ConfigError, SourceError, SourceNotFoundError
from streamer.frame import Frame, StreamInfo
from streamer.media.audio import AudioTrack
from streamer.media.colour import colour_of, planes_fit, to_rgb, yuv_of
from streamer.media.hwcodec import Decode, decoder_hwaccel
from streamer.media.metadata import kept_tags
from streamer.media.quantizer import DECODER_OPTIONS, quantizer
from streamer.sources.base import DecodeLoss, ThreadedSource
from streamer.sources.noise import GaussianNoise

__all__ = ["FileSource"]

log = logging.getLogger(__name__)

DEFAULT_FPS = Fraction(30)
"""Frame rate assumed when the container states none, so sinks can still size their encoder."""


def _reason(exc: av.error.FFmpegError) -> str:
    return exc.strerror or str(exc)


class FileSource(ThreadedSource):
    """Frames of a video file as rgb24, indexed from 0, with the file's own PTS and time base.

    Each frame is converted with its own colour matrix and range; ``info.colour`` carries the stream's,
    for the sink to encode and tag alike.

    ``keep_audio``: expose the file's first audio stream as :attr:`audio` once open; the decode thread
    then waits, before its first packet, until a sink takes the track or it is declined (a
    :class:`~streamer.engine.pipeline.Pipeline` does one or the other as soon as the source has opened).

    ``realtime``: pace frames to the wall clock and report a live stream; ``policy`` then defaults to
    DROP_OLDEST. ``loop``: play the file again and again (``max_frames`` counts across passes), without
    its audio. ``decode``: where the video is decoded (``streamer.media.hwcodec``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        stream_id: str = "0",
        capacity: int = 8,
        policy: DropPolicy | None = None,
        *,
        max_frames: int | None = None,
        noise_sigma: float = 0.0,
        seed: int = 0,
        keep_audio: bool = False,
        realtime: bool = False,
        loop: bool = False,
        decode: Decode = "cpu",
        planes: bool = True,
    ) -> None:
        """``planes``: frames decoded as yuv420p (or yuvj420p) are handed on as their 4:2:0 planes, as
        they lie in the decoder's frame (their RGB made where a model asks, and an encoder taking the
        planes back unchanged where the frame leaves as it came); others, and any with
        ``noise_sigma``, as RGB. False hands on RGB only."""
        if max_frames is not None and max_frames < 1:
            raise ConfigError(f"max_frames must be at least 1 or None (the whole file), got {max_frames}")
        if policy is None:
            policy = DropPolicy.DROP_OLDEST if realtime else DropPolicy.BLOCK
        super().__init__(stream_id, capacity, policy)
        self.path = Path(path)
        self._hwaccel = decoder_hwaccel(decode, f"file source '{path}'")
        self.max_frames = max_frames
        self.keep_audio = keep_audio
        self.realtime = realtime
        self.loop = loop
        self._noise = GaussianNoise(noise_sigma, seed)
        self._planes = planes and noise_sigma == 0
        self._loss = DecodeLoss()
        self._container: InputContainer | None = None
        self._stream: VideoStream | None = None
        self._audio_stream: AudioStream | None = None
        self._audio: AudioTrack | None = None
        self._time_base = Fraction(0)
        self._fps = DEFAULT_FPS

    @property
    def audio(self) -> AudioTrack | None:
        return self._audio

    def _open(self) -> StreamInfo:
        try:
            mode = self.path.stat().st_mode
        except FileNotFoundError:
            raise SourceNotFoundError(f"video file '{self.path}' does not exist; check the path") from None
        except OSError as exc:
            raise SourceError(f"video file '{self.path}' cannot be read: {exc.strerror}") from None
        if not stat.S_ISREG(mode):
            # Opening a FIFO waits for a writer, and a thread blocked in open() cannot be stopped.
            raise SourceError(
                f"'{self.path}' is not a regular file (a FIFO, device or directory); pass a video file"
            )
        try:
            self._container = av.open(str(self.path), hwaccel=self._hwaccel)
        except av.error.FFmpegError as exc:
            raise SourceError(
                f"PyAV cannot open '{self.path}': {_reason(exc)}; pass a video file FFmpeg can read"
            ) from exc
        if not self._container.streams.video:
            kinds = ", ".join(sorted({s.type for s in self._container.streams})) or "none"
            raise SourceError(f"'{self.path}' has no video stream (streams: {kinds}); pass a video file")
        stream = self._container.streams.video[0]
        stream.thread_type = "AUTO"
        stream.codec_context.options = DECODER_OPTIONS
        self._stream = stream
        if self.keep_audio and self._container.streams.audio:
            if self.loop:
                log.warning(
                    "'%s' is looped (source.loop), so its audio is dropped: each pass's sound would go "
                    "back in time; set sink.audio: drop to say so",
                    self.path,
                )
            else:
                self._audio_stream = self._container.streams.audio[0]
                self._audio = AudioTrack(self._audio_stream, self.stream_id)
        fps = stream.average_rate or stream.guessed_rate
        if not fps:
            log.warning("'%s' states no frame rate; assuming %s fps", self.path, DEFAULT_FPS)
            fps = DEFAULT_FPS
        # Kept here: ``info`` is set on the loop only after ``_open`` returns, by which time this thread
        # is already in ``_frames``.
        self._fps = Fraction(fps)
        self._time_base = Fraction(stream.time_base) if stream.time_base else 1 / self._fps
        return StreamInfo(
            width=stream.width,
            height=stream.height,
            fps=self._fps,
            time_base=self._time_base,
            frame_count=self.max_frames if self.loop else _expected(stream.frames, self.max_frames),
            live=self.realtime,
            colour=colour_of(stream.codec_context),
            rotation=self._rotation(),
            tags=kept_tags(dict(self._container.metadata), f"'{self.path}'"),
            planes=self._planes and planes_fit(stream.codec_context.pix_fmt, stream.width, stream.height),
        )

    def _rotation(self) -> int:
        """The display rotation of the file's video, which FFmpeg attaches to decoded frames only: read
        from the first frame of a second, short-lived demuxer, so the decode thread's is not moved."""
        try:
            with av.open(str(self.path)) as probe:
                for frame in probe.decode(video=0):
                    return round(frame.rotation) % 360
        except (av.error.FFmpegError, ValueError):
            pass  # the decode thread meets the same trouble and reports it
        return 0

    def _frames(self) -> Iterator[Frame]:
        container, stream = self._container, self._stream
        assert container is not None
        assert stream is not None
        track = self._audio
        if track is not None and not track.wait_taken(self._stop):
            track = None
        timeline = LoopTimeline(max(1, round(1 / (self._fps * self._time_base))))
        pacer = Pacer() if self.realtime else None
        index = 0
        try:
            while True:
                decoded = self._decode(container, stream, track)
                while True:
                    started = time.perf_counter()
                    av_frame = next(decoded, None)
                    if av_frame is None:
                        break
                    planes = yuv_of(av_frame) if self._planes else None
                    picture = planes if planes is not None else self._noise(to_rgb(av_frame))
                    self._decoded(time.perf_counter() - started)
                    seam = timeline.passes > 1 and timeline.frames == 0
                    pts = timeline.place(av_frame.pts, av_frame.duration)
                    if pacer is not None and not self._wait(pacer, pts, index):
                        return
                    self._loss.frame()
                    yield Frame(
                        picture,
                        index,
                        pts,
                        self._time_base,
                        time.monotonic(),
                        self.stream_id,
                        discontinuity=seam,
                        quantizer=quantizer(av_frame) if self._noise.sigma == 0 else None,
                    )
                    index += 1
                    if index == self.max_frames:
                        return
                if track is not None:
                    track.reached_end()
                self._loss.settle()
                if not self.loop or timeline.frames == 0:
                    return
                log.debug("'%s' ended after pass %d; starting again", self.path, timeline.passes)
                container.seek(0)
                timeline.restart()
        except av.error.FFmpegError as exc:
            raise SourceError(
                f"decoding '{self.path}' failed after {index} frames: {_reason(exc)}; "
                "the file is truncated or corrupt"
            ) from exc
        finally:
            if self._loss.lost:
                log.warning(
                    "'%s': %d frames could not be decoded (damaged or missing data); the stream went on "
                    "without them",
                    self.path,
                    self._loss.lost,
                )

    @property
    def undecodable(self) -> int:
        return self._loss.lost

    def _wait(self, pacer: Pacer, pts: int | None, index: int) -> bool:
        """Hold the frame until its time on the wall clock; False when the source is stopped meanwhile.
        A frame without PTS is timed by its index at the stream's rate."""
        media = float(pts * self._time_base) if pts is not None else float(index / self._fps)
        now = time.monotonic()
        delay = pacer.due(media, now) - now
        return delay <= 0 or not self._stop.wait(delay)

    def _decode(
        self, container: InputContainer, stream: VideoStream, track: AudioTrack | None
    ) -> Iterator[VideoFrame]:
        """The video's frames, from one demux that also queues the audio packets on ``track``."""
        streams: list[Stream] = [stream]
        if track is not None and self._audio_stream is not None:
            streams.append(self._audio_stream)
        for packet in container.demux(*streams):
            if packet.stream.index == stream.index:  # a flush packet's own stream_index is always 0
                if packet.size:
                    self._loss.packet()
                try:
                    yield from stream.decode(packet)
                except av.error.InvalidDataError:
                    continue  # a damaged packet: its frame is counted lost, the next keyframe repairs
            elif track is not None and packet.size:  # the demuxer's empty last packet only flushes
                track.put(packet)

    def _close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None
            self._stream = None
            self._audio_stream = None


def _expected(in_file: int, limit: int | None) -> int | None:
    """Frames the source will deliver, when the file says (0 means it does not)."""
    if in_file <= 0:
        return None
    return in_file if limit is None else min(in_file, limit)
