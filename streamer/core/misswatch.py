"""Notices a stream that keeps missing its latency budget, so an operator hears of it once, not never.

A live stream that passes a few frames through unenhanced is the budget doing its job; one that passes
more than ``limit`` of them over a whole ``window_s`` is running a model tier, resolution or budget
the machine cannot keep: someone should change one of them. The watch counts frames per second of
media time in a fixed ring of buckets (bounded memory), and says *warn* at most once per window while
the share stays over the limit. Time is passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from streamer.errors import ConfigError

__all__ = ["MissWatch", "MissWatchStats"]


@dataclass(frozen=True, slots=True)
class MissWatchStats:
    warnings: int
    share: float
    """Passed-through share over the last full window (0 before one has elapsed)."""


class MissWatch:
    def __init__(self, limit: float = 0.05, window_s: float = 60.0) -> None:
        if not 0.0 <= limit < 1.0 or window_s < 1.0:
            raise ConfigError(f"a miss watch needs 0 <= limit < 1 and window_s >= 1; got {limit}, {window_s}")
        self.limit = limit
        self.window_s = window_s
        size = math.ceil(window_s)
        self._total = [0] * size
        self._missed = [0] * size
        self._second: int | None = None
        self._start: float | None = None
        self._warned_at: float | None = None
        self._warnings = 0

    def observe(self, now: float, missed: bool) -> bool:
        """Count one frame leaving at ``now`` (seconds); True when this call should log the warning."""
        second = math.floor(now)
        if self._start is None:
            self._start = now
        self._advance(second)
        slot = second % len(self._total)
        self._total[slot] += 1
        self._missed[slot] += int(missed)
        if now - self._start < self.window_s or self.share() <= self.limit:
            return False
        if self._warned_at is not None and now - self._warned_at < self.window_s:
            return False
        self._warned_at = now
        self._warnings += 1
        return True

    def share(self) -> float:
        total = sum(self._total)
        return sum(self._missed) / total if total else 0.0

    def stats(self) -> MissWatchStats:
        full = (
            self._start is not None
            and self._second is not None
            and self._second - self._start >= self.window_s
        )
        return MissWatchStats(self._warnings, self.share() if full else 0.0)

    def _advance(self, second: int) -> None:
        """Empty the buckets of the seconds that passed since the last frame (all of them after a gap)."""
        if self._second is None:
            self._second = second
            return
        gap = second - self._second
        if gap <= 0:
            return
        for s in range(self._second + 1, self._second + 1 + min(gap, len(self._total))):
            self._total[s % len(self._total)] = 0
            self._missed[s % len(self._total)] = 0
        self._second = second
