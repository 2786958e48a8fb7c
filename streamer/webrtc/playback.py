"""WHEP playback: frames fanned out to any number of WebRTC players, each on its own track.

A player whose offer takes H.264 in Constrained Baseline (every browser's does) gets a share of the
stream's one H.264 encode (:mod:`streamer.webrtc.shared_h264`, ``webrtc.shared_h264``). Any other
gets its own :class:`PlayerTrack`, which aiortc's sender encodes, and which holds only the newest frame
(LATEST_ONLY): a player whose encoder or network is slow skips frames, counted, and never builds a
queue that would delay everyone else or grow memory. The pixels are converted to a ``VideoFrame`` in a
worker thread when the player's sender asks for a frame, so frames a player skips cost nothing. The
server owns the hubs and hands players their tracks; the WHEP sink and the WHIP source's original relay
publish to a hub the server gives them.

A hub that :meth:`~FrameHub.carries_audio` also gives each player a :class:`PlayerAudioTrack`: the
sink publishes a frame's sound (48 kHz stereo s16, what aiortc's Opus encoder takes) as it publishes
the frame, so both go out together and the player's RTCP reports map both tracks to the same moment.
Sound is a queue, not a slot (a gap is heard where a skipped frame is not seen), bounded at
:data:`AUDIO_CHUNKS`, oldest dropped.
"""

from __future__ import annotations

import asyncio
from fractions import Fraction
from typing import Any

import av
import numpy as np
import numpy.typing as npt

from streamer.channel import Channel, DropPolicy
from streamer.frame import Frame
from streamer.webrtc.frames import RTP_CLOCK_RATE, RtpClock, stamped_frame
from streamer.webrtc.shared_h264 import PacketTrack, SharedH264
from streamer.webrtc.tracks import QueuedTrack

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

ORIGINAL_SUFFIX = ".original"
"""``/whep/{stream}.original`` plays the frames as they entered the pipeline, for side-by-side views."""

AUDIO_RATE = 48_000
"""Opus's clock, and the rate sound is published at."""
AUDIO_CHUNKS = 60
"""A player's queued sound, in the sink's chunks (one a frame: 2 s at 30 fps); past it the oldest goes."""

Sound = npt.NDArray[np.int16]
"""One chunk of sound: (1, 2 * samples) s16, stereo interleaved at :data:`AUDIO_RATE`."""


class PlayerTrack(QueuedTrack[Frame]):
    """One player's video track: the newest frame only, stamped on this player's own clock.
    ``stats().dropped`` counts frames this player skipped because it was still busy with an earlier one."""

    kind = "video"

    def __init__(self, hub: FrameHub) -> None:
        super().__init__(Channel(1, DropPolicy.LATEST_ONLY, name=f"player:{hub.name}"), hub.unsubscribe)
        self._clock = RtpClock()

    async def recv(self) -> av.VideoFrame:
        return await asyncio.to_thread(stamped_frame, await self.next_item(), self._clock)


class PlayerAudioTrack(QueuedTrack[Sound]):
    """One player's sound: the chunks in order, on this player's own sample clock. ``stats().dropped``
    counts chunks this player fell too far behind to play."""

    kind = "audio"

    def __init__(self, hub: FrameHub) -> None:
        super().__init__(
            Channel(AUDIO_CHUNKS, DropPolicy.DROP_OLDEST, name=f"sound:{hub.name}"), hub.unsubscribe
        )
        self._samples = 0

    async def recv(self) -> av.AudioFrame:
        sound = await self.next_item()
        # A frame of its own for each player: aiortc's encoder reads ``pts`` in a worker thread.
        frame = av.AudioFrame.from_ndarray(sound, format="s16", layout="stereo")
        frame.sample_rate = AUDIO_RATE
        frame.pts, frame.time_base = self._samples, Fraction(1, AUDIO_RATE)
        self._samples += frame.samples
        return frame


class FrameHub:
    """Fans the frames of one playable stream out to its players; players joining later start from then.

    A player gets its own :class:`PlayerTrack` (:meth:`subscribe`, its sender encodes) or a share of the
    stream's one H.264 encode (:meth:`subscribe_h264`, ``h264_bitrate`` bits per second, None: by the
    frames' size)."""

    def __init__(self, name: str, h264_bitrate: int | None = None) -> None:
        self.name = name
        self._h264 = SharedH264(name, h264_bitrate)
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
        """Players on either kind of track."""
        return len(self._players) + self._h264.players

    @property
    def shared(self) -> SharedH264:
        """The stream's one H.264 encode for the players that share it."""
        return self._h264

    @property
    def published(self) -> int:
        return self._published

    def subscribe(self) -> PlayerTrack:
        track = PlayerTrack(self)
        self._players.add(track)
        return track

    def subscribe_h264(self) -> PacketTrack:
        """A player's share of the stream's one H.264 encode, from a keyframe asked for now."""
        return self._h264.subscribe()

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
        self._h264.offer(frame)
        self._published += 1

    def close(self) -> None:
        """End every player's tracks; their peers see the tracks end."""
        tracks: list[QueuedTrack[Any]] = [*self._players, *self._listeners, *self._h264.tracks]
        for track in tracks:
            track.stop()
        self._h264.close()
