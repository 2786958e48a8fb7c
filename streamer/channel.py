"""Bounded hand-off between pipeline stages, each with a named overflow policy.

No stage may queue without bound: a file pipeline wants back-pressure (BLOCK) so nothing is lost,
a live one wants the newest frames (DROP_OLDEST, LATEST_ONLY) so latency stays flat. What a channel
evicts is returned to the caller, who counts it.
"""

from __future__ import annotations

import asyncio
import collections
import enum
from dataclasses import dataclass
from typing import Generic, TypeVar

from streamer.errors import ConfigError, EndOfStream

__all__ = ["Channel", "ChannelStats", "DropPolicy"]

T = TypeVar("T")


class DropPolicy(enum.Enum):
    BLOCK = "block"
    """The producer waits for room: lossless, for files and offline work."""
    DROP_OLDEST = "drop_oldest"
    """The oldest queued item is evicted to make room: bounded latency for live streams."""
    LATEST_ONLY = "latest_only"
    """Only the newest item is kept, whatever the capacity: a viewer that wants now, not history."""


@dataclass(frozen=True, slots=True)
class ChannelStats:
    name: str
    capacity: int
    depth: int
    max_depth: int
    put: int
    got: int
    dropped: int


class Channel(Generic[T]):
    """An asyncio queue with a hard capacity; ``get`` raises EndOfStream once closed and drained."""

    def __init__(self, capacity: int, policy: DropPolicy = DropPolicy.BLOCK, name: str = "channel") -> None:
        if capacity < 1:
            raise ConfigError(f"channel {name!r}: capacity must be at least 1, got {capacity}")
        self.name = name
        self.policy = policy
        self.capacity = 1 if policy is DropPolicy.LATEST_ONLY else capacity
        self._items: collections.deque[T] = collections.deque()
        self._closed = False
        self._changed = asyncio.Event()
        self._max_depth = 0
        self._put = 0
        self._got = 0
        self._dropped = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    async def put(self, item: T) -> T | None:
        """Queue ``item``; returns the item evicted to make room, if the policy evicts."""
        while self.policy is DropPolicy.BLOCK and len(self._items) >= self.capacity and not self._closed:
            await self._wait()
        return self.put_nowait(item)

    def put_nowait(self, item: T) -> T | None:
        """Queue without waiting; under BLOCK a full channel is a caller bug, not a silent drop."""
        if self._closed:
            raise EndOfStream(f"channel {self.name!r} is closed")
        evicted: T | None = None
        if len(self._items) >= self.capacity:
            if self.policy is DropPolicy.BLOCK:
                raise RuntimeError(f"channel {self.name!r} is full; use 'await put()' to wait for room")
            evicted = self._items.popleft()
            self._dropped += 1
        self._items.append(item)
        self._put += 1
        self._max_depth = max(self._max_depth, len(self._items))
        self._notify()
        return evicted

    async def get(self) -> T:
        while not self._items:
            if self._closed:
                raise EndOfStream(f"channel {self.name!r} is closed")
            await self._wait()
        return self._take()

    def get_nowait(self) -> T | None:
        """The next item, or None when nothing is queued right now."""
        return self._take() if self._items else None

    def close(self) -> None:
        """No more puts; consumers drain what is queued, then get EndOfStream."""
        self._closed = True
        self._notify()

    def stats(self) -> ChannelStats:
        return ChannelStats(
            name=self.name,
            capacity=self.capacity,
            depth=len(self._items),
            max_depth=self._max_depth,
            put=self._put,
            got=self._got,
            dropped=self._dropped,
        )

    def __aiter__(self) -> Channel[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.get()
        except EndOfStream:
            raise StopAsyncIteration from None

    def _take(self) -> T:
        item = self._items.popleft()
        self._got += 1
        self._notify()
        return item

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self) -> None:
        await self._changed.wait()
