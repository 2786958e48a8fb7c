"""WHIP ingest: the video track a WebRTC publisher sends to ``POST /whip/{stream}``, as Frames.

aiortc decodes into an unbounded queue per track, so a reader task drains the publisher's track as
fast as frames come and hands them to a bounded DROP_OLDEST channel: a pipeline that falls behind loses
the oldest frames, counted, instead of growing memory and latency. Frames go on as their decoder's
4:2:0 planes (RGB is made where a model asks for it); a decoder that gives another format is converted
to RGB in a worker thread in :meth:`WhipSource.recv`, only for frames the pipeline takes.

A publisher may leave and another come: the source keeps waiting (the next frame is flagged as a
discontinuity, so no window spans the two) unless built with ``end_on_unpublish=True``.

With ``keep_audio`` the publisher's first audio track is kept for the sink: aiortc decodes its Opus, and
the source encodes it again as Opus packets (48 kHz stereo) into an :class:`~streamer.media.audio.AudioTrack`,
timed on the video's clock through both streams' RTCP sender reports (:mod:`streamer.webrtc.lipsync`):
sound before the publisher's first reports of both streams (within a second or two) is dropped, counted.
The track exists when the first publisher sends audio; a later publisher's sound goes to the same track,
and a later publisher without audio leaves a silence, not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from av.audio.stream import AudioStream

from streamer.channel import Channel, ChannelStats, DropPolicy
from streamer.errors import EndOfStream, SourceError
from streamer.frame import Frame, StreamInfo
from streamer.media.audio import AudioTrack
from streamer.media.colour import BT601, colour_of, planes_fit, resolve, to_rgb, yuv_of
from streamer.sources.base import Source
from streamer.webrtc.lipsync import LipSync, rtp_delta
from streamer.webrtc.playback import AUDIO_RATE, ORIGINAL_SUFFIX, FrameHub

if TYPE_CHECKING:
    from streamer.webrtc.server import WebRtcServer

__all__ = ["ORIGINAL_SUFFIX", "WhipSource"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Arrival:
    video: av.VideoFrame
    arrival: float
    publisher: int
    """Which publisher (counted from 0 for this source) sent it; a change is a discontinuity."""


def _fraction(time_base: Fraction | None) -> Fraction:
    """aiortc stamps received video in 1/90000; a frame without a time base is taken to be so too."""
    return Fraction(1, 90000) if time_base is None else Fraction(time_base.numerator, time_base.denominator)


WEBRTC_MATRIX = BT601
"""What a WebRTC frame without a colour matrix is read as, at any size: VP8 carries none, and libwebrtc
and browsers read untagged video as BT.601; an H.264 publisher's VUI tags, where it sends them, win."""


_OPUS_FRAME = 960
"""Samples in one 20 ms Opus frame, what the encoder takes."""


class _Opus:
    """The publisher's sound, decoded by aiortc, as Opus packets again, and the stream they belong to.

    The stream's container is started (into memory) so that its codec parameters, Opus's header
    among them, are filled in for the :class:`AudioTrack` and the sinks that copy it."""

    def __init__(self) -> None:
        self._holder = av.open(io.BytesIO(), "w", format="nut")
        stream = self._holder.add_stream("libopus", rate=AUDIO_RATE)
        assert isinstance(stream, AudioStream)
        stream.layout, stream.format, stream.bit_rate = "stereo", "s16", 96_000
        stream.time_base = Fraction(1, AUDIO_RATE)
        self._holder.start_encoding()
        self.stream = stream
        self.decoder = av.CodecContext.create("libopus", "r")
        self.decoder.sample_rate, self.decoder.layout = AUDIO_RATE, "stereo"
        self._resampler = av.AudioResampler(
            format="s16", layout="stereo", rate=AUDIO_RATE, frame_size=_OPUS_FRAME
        )

    def encode_into(self, track: AudioTrack, sound: av.AudioFrame, pts: int) -> None:
        """``sound`` starting at ``pts`` (in 1/48000 s), encoded and queued on ``track``; runs in a
        worker thread."""
        sound.pts, sound.time_base = pts, Fraction(1, AUDIO_RATE)
        for frame in self._resampler.resample(sound):
            for packet in self.stream.encode(frame):
                track.put(packet)


class WhipSource(Source):
    """Frames published to ``stream_id`` on ``server``; ``open`` waits for the first one.

    ``open_timeout_s`` bounds that wait (None: wait forever). ``relay_original`` also makes the frames
    playable, unenhanced, at ``/whep/{stream_id}.original``.
    """

    def __init__(
        self,
        server: WebRtcServer,
        stream_id: str = "0",
        *,
        open_timeout_s: float | None = 30.0,
        end_on_unpublish: bool = False,
        capacity: int = 8,
        fps: Fraction = Fraction(30),
        relay_original: bool = True,
        keep_audio: bool = False,
    ) -> None:
        self.stream_id = stream_id
        self.keep_audio = keep_audio
        self._sound_reader: asyncio.Task[None] | None = None
        self._sends_sound = False
        """Whether the current publisher's audio track is being read."""
        self._last_arrival: float | None = None
        """When the current publisher's last video frame came (monotonic); None before one."""
        self._opus: _Opus | None = None
        self._audio: AudioTrack | None = None
        self._unsynced = 0
        self._server = server
        self._open_timeout = open_timeout_s
        self._end_on_unpublish = end_on_unpublish
        self._fps = fps
        self._channel: Channel[_Arrival] = Channel(capacity, DropPolicy.DROP_OLDEST, name=f"whip:{stream_id}")
        self._reader: asyncio.Task[None] | None = None
        self._publishers = 0
        self._first: _Arrival | None = None
        self._last: tuple[int, int, int] | None = None
        """(publisher, width, height) of the last frame delivered."""
        self._index = 0
        self._info: StreamInfo | None = None
        self._closed = False
        server.declare_ingest(stream_id, self)
        self._original: FrameHub | None = (
            server.declare_playback(stream_id + ORIGINAL_SUFFIX) if relay_original else None
        )

    @property
    def info(self) -> StreamInfo:
        if self._info is None:
            raise RuntimeError(f"source {self.stream_id!r} is not open; await open() first")
        return self._info

    @property
    def audio(self) -> AudioTrack | None:
        return self._audio

    @property
    def waiting(self) -> bool:
        """No publisher sends video (none yet, or the last one left) and none is queued."""
        return self._reader is None and not self._closed and self._channel.stats().depth == 0

    def attach(
        self, track: MediaStreamTrack, audio: MediaStreamTrack | None = None, sync: LipSync | None = None
    ) -> None:
        """Called by the server with a new publisher's video track (and its audio track, with the
        clocks its sender reports feed); replaces any previous readers."""
        self._stop_readers()
        self._last_arrival = None
        publisher = self._publishers
        self._publishers += 1
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read(track, publisher), name=f"whip-reader-{self.stream_id}")
        self._sends_sound = audio is not None and sync is not None and self.keep_audio
        if audio is not None and sync is not None and self.keep_audio:
            self._sound_reader = loop.create_task(
                self._read_sound(audio, sync), name=f"whip-sound-{self.stream_id}"
            )

    def idle_s(self, now: float) -> float | None:
        return None if self._last_arrival is None else now - self._last_arrival

    def _stop_readers(self) -> None:
        for reader in (self._reader, self._sound_reader):
            if reader is not None:
                reader.cancel()
        self._reader = self._sound_reader = None

    def detach(self) -> None:
        """Called by the server when the publisher left; frames already in the channel are still read."""
        self._stop_readers()
        if self._end_on_unpublish:
            self.interrupt()

    def interrupt(self) -> None:
        """Stop waiting for publishers: ``recv`` returns what is queued, then raises EndOfStream.

        This is how a pipeline blocked on a stream nobody publishes to is stopped (SIGINT, tests).
        """
        self._channel.close()

    async def _read(self, track: MediaStreamTrack, publisher: int) -> None:
        try:
            while True:
                video = await track.recv()
                if not isinstance(video, av.VideoFrame):
                    continue
                if self._channel.closed:
                    return
                self._last_arrival = time.monotonic()
                self._channel.put_nowait(_Arrival(video, self._last_arrival, publisher))
        except MediaStreamError:
            log.info("stream %s: publisher %d's track ended", self.stream_id, publisher)

    async def _read_sound(self, track: MediaStreamTrack, sync: LipSync) -> None:
        """Drains the publisher's audio track; once a sink takes the sound and both streams have
        reported, encodes it on the video's clock: the first frame's place comes from the reports, the
        rest follow on by their own timestamps, so the sound has no seams where reports arrive."""
        anchor: tuple[int, Fraction] | None = None
        """(audio timestamp, its seconds on the video's timeline) of the first frame placed."""
        try:
            while True:
                sound = await track.recv()
                if not isinstance(sound, av.AudioFrame) or sound.pts is None:
                    continue
                audio, opus = self._audio, self._opus
                if audio is None or opus is None or not audio.taken:
                    continue
                if anchor is None:
                    placed = sync.audio_on_video(sound.pts)
                    if placed is None:
                        self._unsynced += 1
                        continue
                    anchor = (sound.pts, Fraction(placed, sync.video.rate))
                    log.info(
                        "stream %s: the publisher's sound starts (%d audio frames before the sender's "
                        "first reports were dropped)",
                        self.stream_id,
                        self._unsynced,
                    )
                at = anchor[1] + Fraction(rtp_delta(sound.pts, anchor[0]), sync.audio.rate)
                # Queued in the worker thread too: past the queue's bound a put has the sink mux at once.
                await asyncio.to_thread(opus.encode_into, audio, sound, round(at * AUDIO_RATE))
        except MediaStreamError:
            log.info("stream %s: the publisher's audio track ended", self.stream_id)

    async def open(self) -> StreamInfo:
        if self._info is not None:
            return self._info
        try:
            first = await asyncio.wait_for(self._channel.get(), self._open_timeout)
        except TimeoutError:
            raise SourceError(
                f"no publisher sent video to WHIP stream {self.stream_id!r} "
                f"({self._server.url}/whip/{self.stream_id}) within {self._open_timeout} s; start the "
                "publisher first or raise the open timeout"
            ) from None
        except EndOfStream:
            raise SourceError(f"WHIP stream {self.stream_id!r} ended before any frame arrived") from None
        self._first = first
        if self._sends_sound and self._audio is None:
            self._opus = _Opus()
            self._audio = AudioTrack(self._opus.stream, self.stream_id, decoder=self._opus.decoder)
        self._info = StreamInfo(
            width=first.video.width,
            height=first.video.height,
            fps=self._fps,
            time_base=_fraction(first.video.time_base),
            live=True,
            colour=resolve(colour_of(first.video), first.video.height, WEBRTC_MATRIX),
            planes=planes_fit(first.video.format.name, first.video.width, first.video.height),
        )
        return self._info

    async def recv(self) -> Frame:
        if self._info is None:
            raise RuntimeError(f"source {self.stream_id!r} is not open; await open() first")
        item = self._first if self._first is not None else await self._channel.get()
        self._first = None
        video = item.video
        started = time.perf_counter()
        planes = yuv_of(video, WEBRTC_MATRIX)
        pixels = planes if planes is not None else await asyncio.to_thread(to_rgb, video, WEBRTC_MATRIX)
        self._decoded(time.perf_counter() - started)
        shape = (item.publisher, video.width, video.height)
        frame = Frame(
            picture=pixels,
            index=self._index,
            pts=video.pts,
            time_base=_fraction(video.time_base),
            arrival=item.arrival,
            stream_id=self.stream_id,
            discontinuity=self._last is not None and shape != self._last,
        )
        self._last = shape
        self._index += 1
        if self._original is not None:
            self._original.publish(frame)
        return frame

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.interrupt()
        readers = [r for r in (self._reader, self._sound_reader) if r is not None]
        self._stop_readers()
        for reader in readers:
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        await self._server.release_ingest(self.stream_id)
        if self._original is not None:
            await self._server.release_playback(self.stream_id + ORIGINAL_SUFFIX)

    def stats(self) -> ChannelStats:
        return self._channel.stats()
