"""Per-stream store of the most recent frames, fixed capacity, overwrite-oldest.

Frames are immutable arrays straight from the decoder, so the ring keeps references in a slot table
allocated once: memory is bounded by ``capacity`` frames by construction and no pixel is copied.
Slots go in push order, not by index, so an index gap (frames dropped upstream) costs no slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamer.errors import ConfigError, FrameError, FrameEvictedError
from streamer.frame import Frame

__all__ = ["RingBuffer", "RingStats"]


@dataclass(frozen=True, slots=True)
class RingStats:
    capacity: int
    size: int
    pushed: int
    overwritten: int
    dropped: int
    """Frames overwritten before the consumer released them: the ring was too small for its reader."""


class RingBuffer:
    """The last ``capacity`` frames pushed; ``push`` returns the frame it evicted."""

    def __init__(self, capacity: int, stream_id: str = "0") -> None:
        if capacity < 1:
            raise ConfigError(f"ring capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.stream_id = stream_id
        self._slots: list[Frame | None] = [None] * capacity
        self._where: dict[int, int] = {}
        self._head = 0
        self._newest = -1
        self._released = 0
        self._size = 0
        self._pushed = 0
        self._overwritten = 0
        self._dropped = 0

    def push(self, frame: Frame) -> Frame | None:
        """Store ``frame`` (indices must increase); returns the frame it overwrote, if any."""
        if frame.stream_id != self.stream_id:
            raise FrameError(
                f"frame of stream {frame.stream_id!r} pushed to the ring of stream {self.stream_id!r}"
            )
        if frame.index <= self._newest:
            raise FrameError(
                f"frame index {frame.index} pushed after {self._newest} on stream {self.stream_id!r}; "
                "indices must increase"
            )
        slot = self._head
        evicted = self._slots[slot]
        if evicted is None:
            self._size += 1
        else:
            del self._where[evicted.index]
            self._overwritten += 1
            if evicted.index >= self._released:
                self._dropped += 1
        self._slots[slot] = frame
        self._where[frame.index] = slot
        self._head = (slot + 1) % self.capacity
        self._newest = frame.index
        self._pushed += 1
        return evicted

    def get(self, index: int) -> Frame:
        slot = self._where.get(index)
        if slot is None:
            raise FrameEvictedError(
                f"frame {index} of stream {self.stream_id!r} is not in the ring (capacity {self.capacity}, "
                f"newest {self._newest}); raise runtime.ring_capacity"
            )
        frame = self._slots[slot]
        assert frame is not None
        return frame

    def __contains__(self, index: int) -> bool:
        return index in self._where

    def release_before(self, index: int) -> None:
        """The consumer no longer needs frames older than ``index``; overwriting them is no drop."""
        self._released = max(self._released, index)

    def __len__(self) -> int:
        return self._size

    def stats(self) -> RingStats:
        return RingStats(
            capacity=self.capacity,
            size=self._size,
            pushed=self._pushed,
            overwritten=self._overwritten,
            dropped=self._dropped,
        )
