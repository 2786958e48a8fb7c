"""WHEP playback: frames fanned out to any number of WebRTC players, each on its own track.

Each player gets its own :class:`PlayerTrack`, which holds only the newest frame (LATEST_ONLY): a
player whose encoder or network is slow skips frames, counted, and never builds a queue that would
delay everyone else or grow memory. The pixels are converted to a ``VideoFrame`` in a worker thread
when the player's sender asks for a frame, so frames a player skips cost nothing. The server owns the
hubs and hands players their tracks; the WHEP sink and the WHIP source's original relay publish to a
hub the server gives them.

A hub that :meth:`~FrameHub.carries_audio` also gives each player a :class:`PlayerAudioTrack`: the
sink publishes a frame's sound (48 kHz stereo s16, what aiortc's Opus encoder takes) as it publishes
the frame, so both go out together and the player's RTCP reports map both tracks to the same moment.
Sound is a queue, not a slot (a gap is heard where a skipped frame is not seen), bounded at
:data:`AUDIO_CHUNKS`, oldest dropped.
"""

from __future__ import annotations

import asyncio
import time
from fractions import Fraction

import av
import numpy as np
import numpy.typing as npt
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from streamer.channel import Channel, ChannelStats, DropPolicy
from streamer.errors import EndOfStream
from streamer.frame import Frame
from streamer.media.colour import yuv_frame
from streamer.media.planes import convert, rgb_frame

__all__ = [
    "AUDIO_CHUNKS",
    "AUDIO_RATE",
    "ORIGINAL_SUFFIX",
    "RTP_CLOCK_RATE",
    "FrameHub",
    "PlayerAudioTrack",
    "PlayerTrack",
    "RtpClock",
    "Sound",
]

RTP_CLOCK_RATE = 90_000
"""The RTP clock of every video codec WebRTC uses."""
_TIME_BASE = Fraction(1, RTP_CLOCK_RATE)

ORIGINAL_SUFFIX = ".original"
"""``/whep/{stream}.original`` plays the frames as they entered the pipeline, for side-by-side views."""

AUDIO_RATE = 48_000
"""Opus's clock, and the rate sound is published at."""
AUDIO_CHUNKS = 60
"""A player's queued sound, in the sink's chunks (one a frame: 2 s at 30 fps); past it the oldest goes."""

Sound = npt.NDArray[np.int16]
"""One chunk of sound: (1, 2 * samples) s16, stereo interleaved at :data:`AUDIO_RATE`."""


class RtpClock:
    """Maps frame times to one player's 90 kHz timeline, which only moves forward.

    Media time is followed while it advances by at most ``max_step_s`` per frame; a step back (a new
    publisher, whose clock starts again) or a larger jump re-anchors the timeline one nominal frame
    after the last stamp, so the player's jitter buffer never sees time go back or stall.
    """

    def __init__(self, max_step_s: float = 1.0, nominal_fps: float = 30.0) -> None:
        self._max_step = round(max_step_s * RTP_CLOCK_RATE)
        self._nominal = round(RTP_CLOCK_RATE / nominal_fps)
        self._anchor: tuple[float, int] | None = None
        self._last: int | None = None

    def stamp(self, seconds: float) -> int:
        """The RTP ticks for a frame at ``seconds`` (media time, or a monotonic clock when it has none)."""
        if self._anchor is None:
            self._anchor = (seconds, 0)
        ticks = self._anchor[1] + round((seconds - self._anchor[0]) * RTP_CLOCK_RATE)
        if self._last is not None and not self._last < ticks <= self._last + self._max_step:
            ticks = self._last + self._nominal
            self._anchor = (seconds, ticks)
        self._last = ticks
        return ticks


def _video_frame(frame: Frame) -> av.VideoFrame:
    """A frame as the yuv420p frame aiortc's encoders take, BT.601 in tv range as players read WebRTC
    video: 4:2:0 planes already so go as they are, others from RGB (made here, in a worker thread)."""
    colour = frame.planes_out
    if colour is not None and (colour.matrix, colour.range) in ((5, 1), (6, 1)):
        planes = frame.planes
        assert planes is not None
        return yuv_frame(planes)
    return convert(rgb_frame(frame.pixels), format="yuv420p")


class PlayerTrack(MediaStreamTrack):
    """One player's video track: the newest frame only, stamped on this player's own clock."""

    kind = "video"

    def __init__(self, hub: FrameHub) -> None:
        super().__init__()
        self._hub = hub
        self._slot: Channel[Frame] = Channel(1, DropPolicy.LATEST_ONLY, name=f"player:{hub.name}")
        self._clock = RtpClock()

    def offer(self, frame: Frame) -> None:
        """Make ``frame`` the next one sent, replacing (and counting) one the player has not taken."""
        if not self._slot.closed:
            self._slot.put_nowait(frame)

    async def recv(self) -> av.VideoFrame:
        try:
            frame = await self._slot.get()
        except EndOfStream:
            raise MediaStreamError from None
        video = await asyncio.to_thread(_video_frame, frame)
        video.pts = self._clock.stamp(frame.time if frame.time is not None else time.monotonic())
        video.time_base = _TIME_BASE
        return video

    def stop(self) -> None:
        self._slot.close()
        self._hub.unsubscribe(self)
        super().stop()

    def stats(self) -> ChannelStats:
        """``dropped`` counts frames this player skipped because it was still busy with an earlier one."""
        return self._slot.stats()


class PlayerAudioTrack(MediaStreamTrack):
    """One player's sound: the chunks in order, on this player's own sample clock."""

    kind = "audio"

    def __init__(self, hub: FrameHub) -> None:
        super().__init__()
        self._hub = hub
        self._queue: Channel[Sound] = Channel(AUDIO_CHUNKS, DropPolicy.DROP_OLDEST, name=f"sound:{hub.name}")
        self._samples = 0

    def offer(self, sound: Sound) -> None:
        if not self._queue.closed:
            self._queue.put_nowait(sound)

    async def recv(self) -> av.AudioFrame:
        try:
            sound = await self._queue.get()
        except EndOfStream:
            raise MediaStreamError from None
        # A frame of its own for each player: aiortc's encoder reads ``pts`` in a worker thread.
        frame = av.AudioFrame.from_ndarray(sound, format="s16", layout="stereo")
        frame.sample_rate = AUDIO_RATE
        frame.pts, frame.time_base = self._samples, Fraction(1, AUDIO_RATE)
        self._samples += frame.samples
        return frame

    def stop(self) -> None:
        self._queue.close()
        self._hub.unsubscribe(self)
        super().stop()

    def stats(self) -> ChannelStats:
        """``dropped`` counts chunks this player fell too far behind to play."""
        return self._queue.stats()


class FrameHub:
    """Fans the frames of one playable stream out to its players; players joining later start from then."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._players: set[PlayerTrack] = set()
        self._listeners: set[PlayerAudioTrack] = set()
        self._published = 0
        self._audio = False

    @property
    def carries_audio(self) -> bool:
        """Whether players are given a sound track: set by a sink that publishes the source's audio."""
        return self._audio

    def carry_audio(self) -> None:
        self._audio = True

    @property
    def players(self) -> int:
        return len(self._players)

    @property
    def published(self) -> int:
        return self._published

    def subscribe(self) -> PlayerTrack:
        track = PlayerTrack(self)
        self._players.add(track)
        return track

    def subscribe_audio(self) -> PlayerAudioTrack:
        track = PlayerAudioTrack(self)
        self._listeners.add(track)
        return track

    def unsubscribe(self, track: PlayerTrack | PlayerAudioTrack) -> None:
        if isinstance(track, PlayerTrack):
            self._players.discard(track)
        else:
            self._listeners.discard(track)

    def publish_audio(self, sound: Sound) -> None:
        for listener in tuple(self._listeners):
            listener.offer(sound)

    def publish(self, frame: Frame) -> None:
        for player in tuple(self._players):
            player.offer(frame)
        self._published += 1

    def close(self) -> None:
        """End every player's tracks; their peers see the tracks end."""
        for player in (*self._players, *self._listeners):
            player.stop()
