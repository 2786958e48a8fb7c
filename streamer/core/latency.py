"""Latency budget: decides, as a window reaches the model, whether it can still make its deadline.

The estimate of a model call is an exponentially weighted mean of the calls measured so far plus twice
their weighted mean deviation (as TCP sizes its retransmission timeout from round-trip times): calls
on a busy machine often run well over their mean, and a budget judged by the mean alone is missed by
the frames behind them. A frame whose age plus that estimate exceeds the budget leaves unenhanced (or
is dropped) instead of waiting,
so when the model cannot keep up the queue drains rather than grows. An estimate is only corrected by
calls that run, so a refused frame young enough to make the budget on its own becomes a probe once the
model has had no frame for a while: it leaves as refused frames do, while the model is timed on its
window in the background, and that call replaces the estimate. The wait before a probe starts at
``probe_min_s`` and doubles while probes keep confirming the miss, up to ``probe_s`` (as TCP backs off
its retransmissions): slow spikes at a stream's start (cold first calls, codecs and peers starting on
the same cores, a burst of other streams) cost a fraction of a second of enhancement, not seconds, and a
model that truly cannot keep up is timed only every ``probe_s``. A probe never delays a frame.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from streamer.errors import ConfigError

__all__ = ["Admission", "LatencyBudget", "LatencyStats", "MissAction"]

DEVIATIONS = 2.0
"""How many mean deviations of the call time admission adds to the mean."""


class MissAction(enum.Enum):
    PASSTHROUGH = "passthrough"
    """Send the original frame: the viewer sees every frame, some unenhanced."""
    DROP = "drop"
    """Send nothing for that frame: fewer frames, all enhanced."""


class Admission(enum.Enum):
    RUN = "run"
    PASSTHROUGH = "passthrough"
    DROP = "drop"
    PROBE = "probe"
    """Leave as ``on_miss`` says, and meanwhile time the model on this window, off the frame's path."""


@dataclass(frozen=True, slots=True)
class LatencyStats:
    budget_ms: float | None
    admitted: int
    passed_through: int
    dropped: int
    estimate_ms: float
    """Weighted mean of the model calls measured."""
    deviation_ms: float = 0.0
    """Weighted mean deviation from it; admission adds the mean plus twice this to a frame's age."""
    probes: int = 0
    """Frames admitted against the estimate, to measure it again."""


class LatencyBudget:
    """``budget_ms=None`` admits everything: offline work where every frame must be enhanced."""

    def __init__(
        self,
        budget_ms: float | None = None,
        on_miss: MissAction = MissAction.PASSTHROUGH,
        alpha: float = 0.2,
        probe_s: float = 5.0,
        probe_min_s: float = 0.25,
    ) -> None:
        if budget_ms is not None and budget_ms <= 0:
            raise ConfigError(f"latency.budget_ms must be positive or null, got {budget_ms}")
        if not 0.0 < alpha <= 1.0:
            raise ConfigError(f"latency smoothing alpha must be in (0, 1], got {alpha}")
        if not 0.0 < probe_min_s <= probe_s:
            raise ConfigError(
                f"latency probes need 0 < probe_min_s <= probe_s; got {probe_min_s} and {probe_s}"
            )
        self.budget_ms = budget_ms
        self.on_miss = on_miss
        self.alpha = alpha
        self.probe_s = probe_s
        self.probe_min_s = probe_min_s
        self._probe_wait = probe_min_s
        """How long the model must have had no frame before a refused frame probes it."""
        self._last_run: float | None = None
        self._probes = 0
        self._estimate = 0.0
        self._deviation = 0.0
        self._measured = False
        self._admitted = 0
        self._passed = 0
        self._dropped = 0

    def admit(self, arrival: float, now: float) -> Admission:
        """Whether a frame that arrived at ``arrival`` may still run the model at ``now`` (seconds)."""
        age_ms = (now - arrival) * 1000.0
        if self.budget_ms is None or age_ms + self._expected() * 1000.0 <= self.budget_ms:
            self._admitted += 1
            self._last_run = now
            self._probe_wait = self.probe_min_s
            return Admission.RUN
        if self.on_miss is MissAction.DROP:
            self._dropped += 1
        else:
            self._passed += 1
        stale = self._last_run is None or now - self._last_run >= self._probe_wait
        if stale and age_ms <= self.budget_ms:
            self._probes += 1
            self._last_run = now
            self._probe_wait = min(self.probe_s, 2.0 * self._probe_wait)  # if this one confirms the miss
            self._measured = False  # the probe's call replaces the stale estimate outright
            return Admission.PROBE
        return Admission.DROP if self.on_miss is MissAction.DROP else Admission.PASSTHROUGH

    def observe(self, seconds: float) -> None:
        """Feed the measured duration of one model call."""
        if self._measured:
            self._deviation += self.alpha * (abs(seconds - self._estimate) - self._deviation)
            self._estimate += self.alpha * (seconds - self._estimate)
        else:
            self._estimate, self._deviation, self._measured = seconds, 0.0, True

    def _expected(self) -> float:
        return self._estimate + DEVIATIONS * self._deviation

    def stats(self) -> LatencyStats:
        return LatencyStats(
            budget_ms=self.budget_ms,
            admitted=self._admitted,
            passed_through=self._passed,
            dropped=self._dropped,
            estimate_ms=self._estimate * 1000.0,
            deviation_ms=self._deviation * 1000.0,
            probes=self._probes,
        )
