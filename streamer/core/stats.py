"""Bounded records of a stream's figures: per-frame durations, for p50/p99 without keeping a month of
samples, and frame rates over the last seconds, for live displays."""

from __future__ import annotations

import collections

import numpy as np

from streamer.errors import ConfigError

__all__ = ["DurationRecorder", "RateMeter"]


class RateMeter:
    """Events per second over the last ``window_s``: a count sampled at most ``per_s`` times a second,
    so a frame costs an append only now and then and the memory stays bounded."""

    def __init__(self, window_s: float = 5.0, per_s: float = 4.0) -> None:
        if window_s <= 0 or per_s <= 0:
            raise ConfigError(f"rate window ({window_s} s) and sampling ({per_s} per s) must be positive")
        self.window_s = window_s
        self._every = 1.0 / per_s
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._count = 0

    def add(self, now: float, n: int = 1) -> None:
        self._count += n
        if not self._samples or now - self._samples[-1][0] >= self._every:
            self._samples.append((now, self._count))
            while now - self._samples[0][0] > self.window_s:
                self._samples.popleft()

    def rate(self, now: float) -> float | None:
        """Per second from the oldest sample kept to ``now`` (the events since the newest count too);
        None until two samples are a sampling interval apart, and 0 once none came for a window."""
        if not self._samples:
            return None
        start, first = self._samples[0]
        if now - self._samples[-1][0] > self.window_s:
            return 0.0
        span = now - start
        if span < self._every:
            return None
        return (self._count - first) / span


class DurationRecorder:
    """Keeps the most recent ``capacity`` samples in a preallocated array, plus an all-time count."""

    def __init__(self, capacity: int = 65536) -> None:
        if capacity < 1:
            raise ConfigError(f"recorder capacity must be at least 1, got {capacity}")
        self._samples = np.zeros(capacity, dtype=np.float64)
        self._count = 0

    def record(self, seconds: float) -> None:
        self._samples[self._count % self._samples.size] = seconds
        self._count += 1

    @property
    def nbytes(self) -> int:
        """Memory the samples take: fixed at construction, whatever the count."""
        return int(self._samples.nbytes)

    @property
    def count(self) -> int:
        return self._count

    def recent_percentile_ms(self, q: float, last: int) -> float | None:
        """The q-th percentile of the ``last`` samples recorded, in milliseconds; None before any."""
        if self._count == 0 or last < 1:
            return None
        n = min(last, self._count, self._samples.size)
        end = self._count % self._samples.size
        idx = (np.arange(end - n, end)) % self._samples.size
        return float(np.percentile(self._samples[idx], q)) * 1000.0

    def percentile_ms(self, q: float) -> float | None:
        """The q-th percentile (0..100) of the retained samples in milliseconds; None before any."""
        if self._count == 0:
            return None
        kept = self._samples[: min(self._count, self._samples.size)]
        return float(np.percentile(kept, q)) * 1000.0
