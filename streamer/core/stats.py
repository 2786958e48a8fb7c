"""Bounded record of per-frame durations, for p50/p99 without keeping a month of samples."""

from __future__ import annotations

import numpy as np

from streamer.errors import ConfigError

__all__ = ["DurationRecorder"]


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

    def percentile_ms(self, q: float) -> float | None:
        """The q-th percentile (0..100) of the retained samples in milliseconds; None before any."""
        if self._count == 0:
            return None
        kept = self._samples[: min(self._count, self._samples.size)]
        return float(np.percentile(kept, q)) * 1000.0
