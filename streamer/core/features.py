"""Per-stream store of what a streaming model computed for each frame, so each frame is encoded once.

Overlapping windows share T-1 frames; a streaming model encodes each frame once and its fusion step
reads the cached results. The cache is keyed by frame index and bound to one window run: features of
a frame before a discontinuity (a reconnect, a PTS jump, a size change) must never meet a window of the
next run, so asking for another run empties it. Capacity is fixed; the lowest indices go first, which
is what sliding windows stop needing first. The values are opaque here (arrays in the runtime), so the
cache is tested without a model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from streamer.errors import ConfigError, FrameEvictedError

__all__ = ["FeatureCache", "FeatureCacheStats"]

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class FeatureCacheStats:
    capacity: int
    size: int
    encoded: int
    """Frames whose features were stored: the encoder's work."""
    hits: int
    """Lookups of frames already stored: the work overlapping windows did not repeat."""
    resets: int
    """Runs that emptied the cache (the first run of a stream not counted)."""


class FeatureCache(Generic[V]):
    """The features of the newest ``capacity`` frames of one run of one stream."""

    def __init__(self, capacity: int, stream_id: str = "0") -> None:
        if capacity < 1:
            raise ConfigError(f"feature cache capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.stream_id = stream_id
        self._values: dict[int, V] = {}
        self._run: int | None = None
        self._encoded = 0
        self._hits = 0
        self._resets = 0

    @property
    def run(self) -> int | None:
        return self._run

    def missing(self, indices: Iterable[int], run: int) -> list[int]:
        """The distinct frames of ``indices`` with no stored features, ascending; a new ``run`` empties
        the cache first. More than ``capacity`` distinct frames could not be held for one window."""
        if run != self._run:
            if self._run is not None:
                self._resets += 1
            self._values.clear()
            self._run = run
        wanted = sorted(set(indices))
        if len(wanted) > self.capacity:
            raise ConfigError(
                f"a window of stream {self.stream_id!r} needs {len(wanted)} frames' features but the "
                f"feature cache holds {self.capacity}; size it to the model's T at least"
            )
        absent = [i for i in wanted if i not in self._values]
        self._hits += len(wanted) - len(absent)
        return absent

    def put(self, index: int, run: int, value: V) -> None:
        """Store one frame's features; call ``missing`` for this run first."""
        if run != self._run:
            raise ConfigError(
                f"features of frame {index} (run {run}) offered to the cache of stream "
                f"{self.stream_id!r} while it holds run {self._run}; ask missing() for the run first"
            )
        self._values[index] = value
        self._encoded += 1
        while len(self._values) > self.capacity:
            del self._values[min(self._values)]

    def get(self, index: int) -> V:
        value = self._values.get(index)
        if value is None:
            raise FrameEvictedError(
                f"no features of frame {index} of stream {self.stream_id!r} in the cache (run {self._run}, "
                f"frames {sorted(self._values)}); encode it first"
            )
        return value

    def __contains__(self, index: int) -> bool:
        return index in self._values

    def __len__(self) -> int:
        return len(self._values)

    def stats(self) -> FeatureCacheStats:
        return FeatureCacheStats(
            capacity=self.capacity,
            size=len(self._values),
            encoded=self._encoded,
            hits=self._hits,
            resets=self._resets,
        )
