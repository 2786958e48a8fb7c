"""An RTSP stream's H.264 or H.265 read by streamer's own client and decoded frame by frame as each
arrives.

FFmpeg's RTSP reader passes H.264 on in pieces and its parser closes a frame only when the next one
begins, so every frame waits one frame period before it can be decoded. This reader closes a frame on
the RTP marker bit (:class:`~streamer.sources.rtp.Depacketizer`) and decodes it at once with PyAV's
decoder, slice-threaded (frame threads would hold frames back too).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction

import av
import av.error
from av.codec.context import CodecContext
from av.video.codeccontext import VideoCodecContext
from av.video.frame import VideoFrame

from streamer.media.quantizer import DECODER_OPTIONS
from streamer.sources.rtp import AccessUnit, Depacketizer, VideoTrack
from streamer.sources.rtsp_client import RtspClient, RtspTimeout

__all__ = ["RtpReader"]


class RtpReader:
    """One playing session: ``units`` yields the stream's frames as H.264 access units, ``decode`` turns
    one into pictures. Opening waits (up to ``first_frame_s``) for the first picture, which gives the
    size; it comes out of ``held`` before anything ``decode`` makes."""

    def __init__(
        self,
        url: str,
        open_timeout_s: float,
        read_timeout_s: float,
        first_frame_s: float,
        audio: bool = False,
    ) -> None:
        """``audio``: the stream's audio is wanted (:class:`~streamer.sources.rtsp_client.RtspClient`)."""
        self._client = RtspClient(url, open_timeout_s, read_timeout_s, audio)
        try:
            self.track: VideoTrack = self._client.open()
            track = self.track
            self._depacketizer = Depacketizer(track.payload_type, track.parameter_sets, track.codec)
            codec = CodecContext.create(track.codec, "r")
            assert isinstance(codec, VideoCodecContext)
            codec.thread_type = "SLICE"
            codec.options = DECODER_OPTIONS
            self.codec = codec
            self.time_base = Fraction(1, track.clock_rate)
            self._units = self._arrivals()
            self.held = self._first(first_frame_s)
        except BaseException:
            self._client.close()
            raise
        first = self.held[0]
        self.width, self.height = first.width, first.height
        self.fps: Fraction | None = self.track.fps or (Fraction(codec.framerate) if codec.framerate else None)

    def units(self) -> Iterator[AccessUnit]:
        return self._units

    def decode(self, unit: AccessUnit) -> list[VideoFrame]:
        """The pictures ``unit`` completes; none for a damaged one the decoder refuses (the next
        keyframe repairs the picture)."""
        packet = av.Packet(unit.data)
        packet.pts = unit.timestamp
        packet.time_base = self.time_base
        try:
            return [frame for frame in self.codec.decode(packet) if isinstance(frame, VideoFrame)]
        except av.error.InvalidDataError:
            return []

    def close(self) -> None:
        self._client.close()

    def abort(self) -> None:
        """From another thread: end a read the reader's thread is blocked in (it sees the connection
        closed); ``close`` still follows, in that thread."""
        self._client.abort()

    def _arrivals(self) -> Iterator[AccessUnit]:
        for data in self._client.packets():
            yield from self._depacketizer.push(data)

    def _first(self, within_s: float) -> list[VideoFrame]:
        deadline = time.monotonic() + within_s
        for unit in self._units:
            frames = self.decode(unit)
            if frames:
                return frames
            if time.monotonic() > deadline:
                break
        raise RtspTimeout(f"no picture decoded within {within_s:g} s of PLAY")
