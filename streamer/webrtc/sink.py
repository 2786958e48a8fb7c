"""WHEP egress: the enhanced frames, published to the stream's players through the server's hub.

Players hold only the newest frame (:mod:`streamer.webrtc.playback`, whose names this module still
exports): a slow player skips frames, it never queues them.

A source's audio, attached before ``open``, goes to the players as Opus: each frame takes the sound of
its own period from the source's queue (the packets that start before the next frame's time), decoded
and resampled to 48 kHz stereo in a worker thread, and publishes it beside the frame. So the sound is
delayed by exactly the video's pipeline latency, and a frame the pipeline passes through or drops moves
none of it. aiortc encodes Opus for each player; the video goes to players as
:mod:`streamer.webrtc.playback` hands it out (one H.264 encode shared where players take it).
"""

from __future__ import annotations

import asyncio
import logging
from fractions import Fraction
from typing import TYPE_CHECKING

import av
import av.error
import numpy as np

from streamer.frame import Frame, StreamInfo
from streamer.sinks.base import Sink
from streamer.webrtc.playback import (
    AUDIO_RATE,
    ORIGINAL_SUFFIX,
    RTP_CLOCK_RATE,
    FrameHub,
    PlayerAudioTrack,
    PlayerTrack,
    RtpClock,
    Sound,
)

if TYPE_CHECKING:
    from av.packet import Packet
    from av.stream import Stream

    from streamer.media.audio import AudioTrack
    from streamer.webrtc.server import WebRtcServer

__all__ = ["RTP_CLOCK_RATE", "FrameHub", "PlayerAudioTrack", "PlayerTrack", "RtpClock", "WhepSink"]

log = logging.getLogger(__name__)


class WhepSink(Sink):
    """Sends the pipeline's output to the WHEP players of ``stream_id`` on ``server``.

    The stream is playable from construction (``POST /whep/{stream_id}``), before the pipeline opens
    the sink, so a viewer may connect first and receive frames as soon as they come; players that
    connect once the sink carries the source's audio (``keep_audio``) get it too.
    """

    live = True

    def __init__(
        self,
        server: WebRtcServer,
        stream_id: str = "0",
        keep_audio: bool = True,
        relay_original: bool = False,
    ) -> None:
        """``relay_original``: also play the frames as they entered the pipeline at
        ``/whep/{stream_id}.original`` (:meth:`publish_original`), for a source that does not (a WHIP
        source relays its own)."""
        self.stream_id = stream_id
        self.keep_audio = keep_audio
        self.server = server
        self._hub = server.declare_playback(stream_id)
        self._original = server.declare_playback(stream_id + ORIGINAL_SUFFIX) if relay_original else None
        self._written = 0
        self._closed = False
        self._opened = False
        self._track: AudioTrack | None = None
        self._period = Fraction(1, 30)
        self._resampler: av.AudioResampler | None = None
        self._broken = False
        """Decoding the source's sound failed once (said in the log); the rest is dropped."""

    @property
    def frames_written(self) -> int:
        """Frames handed to the players there were at the time (none, one or many)."""
        return self._written

    @property
    def hub(self) -> FrameHub:
        return self._hub

    @property
    def relays_original(self) -> bool:
        return self._original is not None

    def publish_original(self, frame: Frame) -> None:
        """The source frame of the one just sent, to the ``.original`` players: both panes of a
        side-by-side view then show the same moment, each as late as the pipeline made it."""
        if self._original is not None:
            self._original.publish(frame)

    def attach_audio(self, track: AudioTrack) -> bool:
        if self._opened:
            raise RuntimeError(f"WHEP sink {self.stream_id!r} is already open; attach audio before open")
        if not self.keep_audio:
            return False
        self._track = track
        return True

    async def open(self, info: StreamInfo) -> None:
        self._opened = True
        if info.fps > 0:
            self._period = 1 / info.fps
        if self._track is not None:
            self._resampler = av.AudioResampler(format="s16", layout="stereo", rate=AUDIO_RATE)
            self._hub.carry_audio()
            # Players want the live edge: sound past the queue's bound is stale, dropped and counted.
            self._track.take(self._track.drop_over)
            log.info(
                "WHEP stream %s: the source's %s audio goes to players as Opus",
                self.stream_id,
                self._track.stream.codec_context.codec.canonical_name,
            )

    async def send(self, frame: Frame) -> None:
        track = self._track
        if track is not None and frame.pts is not None:
            packets = track.pop_until(frame.pts * frame.time_base + self._period)
            if packets:
                for sound in await asyncio.to_thread(self._decode, packets):
                    self._hub.publish_audio(sound)
        self._hub.publish(frame)
        self._written += 1

    def _decode(self, packets: list[Packet[Stream]]) -> list[Sound]:
        """In a worker thread, one call at a time: ``packets`` as 48 kHz stereo s16 chunks."""
        assert self._track is not None
        assert self._resampler is not None
        if self._broken:
            return []
        sounds: list[Sound] = []
        try:
            for packet in packets:
                for decoded in self._track.decoder.decode(packet):
                    resampled = self._resampler.resample(decoded)
                    sounds.extend(np.asarray(f.to_ndarray(), dtype=np.int16) for f in resampled)
        except (av.error.FFmpegError, ValueError) as exc:
            self._broken = True
            log.warning(
                "WHEP stream %s: decoding the source's audio failed (%s); players get video only",
                self.stream_id,
                exc,
            )
        return sounds

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            if self._track is not None:
                self._track.discard()
            await self.server.release_playback(self.stream_id)
            if self._original is not None:
                await self.server.release_playback(self.stream_id + ORIGINAL_SUFFIX)
