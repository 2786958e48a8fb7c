"""The outgoing track every WHEP player gets, whatever it carries: what its hub offers waits in a
bounded channel of this player's own, taken by the player's sender in order, and stopping the track
closes the channel and leaves the hub. The kinds differ only in their channel's bound and drop policy
and in what ``recv`` makes of an item (``streamer.webrtc.playback``: a video frame or a chunk of sound;
``streamer.webrtc.shared_h264``: a packet of the shared encode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from streamer.channel import Channel, ChannelStats
from streamer.errors import EndOfStream

__all__ = ["QueuedTrack"]

Item = TypeVar("Item")


class QueuedTrack(MediaStreamTrack, Generic[Item]):
    """A track fed through ``channel``; ``leave`` is called with the track once when it stops."""

    def __init__(self, channel: Channel[Item], leave: Callable[[Any], None]) -> None:
        super().__init__()
        self._channel = channel
        self._leave = leave

    def offer(self, item: Item) -> None:
        """Queue ``item`` for the player, as the channel's policy allows; nothing once stopped."""
        if not self._channel.closed:
            self._channel.put_nowait(item)

    async def next_item(self) -> Item:
        """The next item offered; aiortc's ``MediaStreamError`` (the track is over) once stopped."""
        try:
            return await self._channel.get()
        except EndOfStream:
            raise MediaStreamError from None

    def stop(self) -> None:
        self._channel.close()
        self._leave(self)
        super().stop()

    def stats(self) -> ChannelStats:
        """What the channel took and dropped: ``dropped`` counts what this player fell too far behind
        to get."""
        return self._channel.stats()
