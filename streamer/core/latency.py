"""Latency budget: decides, as a window reaches the model, whether it can still make its deadline.

The estimate of a model call is an exponentially weighted mean of the calls measured so far plus twice
their weighted mean deviation (as TCP sizes its retransmission timeout from round-trip times): calls
on a busy machine often run well over their mean, and a budget judged by the mean alone is missed by
the frames behind them. The budget runs from a frame's arrival to its output written, so the time after
a call (waiting behind earlier frames, encoding, sending) is estimated the same way and counted too. A
frame whose age plus those estimates exceeds the budget leaves unenhanced (or is dropped) instead of
waiting,
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

__all__ = ["Admission", "CallCost", "LatencyBudget", "LatencyStats", "MissAction"]

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
    late: int = 0
    """Frames admitted here whose call would then have ended past their deadline when the model was
    free for them, so they left unenhanced (counted in passed_through or dropped, not admitted)."""
    tail_ms: float = 0.0
    """Weighted mean, plus two mean deviations, of the time from a frame leaving the model's stage to
    its output written."""


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
        self._call = _Smoothed(alpha)
        self._admitted = 0
        self._passed = 0
        self._dropped = 0
        self._late = 0
        self._tail = _Smoothed(alpha)

    def admit(self, arrival: float, now: float) -> Admission:
        """Whether a frame that arrived at ``arrival`` may still run the model at ``now`` (seconds)."""
        age_ms = (now - arrival) * 1000.0
        expected_ms = (self._call.expected() + self._tail.expected()) * 1000.0
        if self.budget_ms is None or age_ms + expected_ms <= self.budget_ms:
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
            self._call.restart()  # the probe's call replaces the stale estimate outright
            return Admission.PROBE
        return Admission.DROP if self.on_miss is MissAction.DROP else Admission.PASSTHROUGH

    def late(self) -> None:
        """A frame this budget admitted was refused where its call was formed: its deadline would pass
        before the call ended (the model busy with other streams' calls meanwhile)."""
        self._admitted -= 1
        self._late += 1
        if self.on_miss is MissAction.DROP:
            self._dropped += 1
        else:
            self._passed += 1

    def deadline(self, arrival: float) -> float | None:
        """When a call for a frame that arrived at ``arrival`` must have ended, leaving the time after a
        call its due; None without a budget."""
        if self.budget_ms is None:
            return None
        return arrival + self.budget_ms / 1000.0 - self._tail.expected()

    def observe_tail(self, seconds: float) -> None:
        """Feed the time one frame took from leaving the model's stage to its output written."""
        self._tail.observe(seconds)

    def observe(self, seconds: float) -> None:
        """Feed the measured duration of one model call."""
        self._call.observe(seconds)

    def model_changed(self) -> None:
        """The stream's model changed (``model: auto`` moved it): the old model's call time says nothing
        of the new one's, so the next frame is admitted and its call measures the new model."""
        self._call = _Smoothed(self.alpha)

    def stats(self) -> LatencyStats:
        return LatencyStats(
            budget_ms=self.budget_ms,
            admitted=self._admitted,
            passed_through=self._passed,
            dropped=self._dropped,
            estimate_ms=self._call.mean * 1000.0,
            deviation_ms=self._call.deviation * 1000.0,
            probes=self._probes,
            late=self._late,
            tail_ms=self._tail.expected() * 1000.0,
        )


class CallCost:
    """Seconds a model call of ``n`` windows takes, learned from the calls made: ``a + b n``.

    Where a batch's deadline is checked, the call's length depends on how many windows it holds, and
    that dependence is the hardware's: on a CPU a call of n windows costs about n calls of one, on a
    GPU little more than one. So the estimate is an exponentially weighted least-squares line through
    (windows, seconds) of recent calls, with ``a`` and ``b`` kept non-negative, plus ``DEVIATIONS``
    weighted mean deviations of the calls from it (as ``LatencyBudget`` keeps). Where the recent calls
    all held about the same number of windows the line is not known; the estimate is then the bound
    that holds for any such line: the calls' mean for fewer windows, scaled up in proportion for more.
    """

    SPREAD = 0.25
    """Variance of the recent calls' window counts below which their line is taken as unknown."""

    def __init__(self, alpha: float = 0.2) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ConfigError(f"a call cost's smoothing alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self._n = 0.0
        self._t = 0.0
        self._nn = 0.0
        self._nt = 0.0
        self._deviation = 0.0
        self._measured = False

    @property
    def measured(self) -> bool:
        return self._measured

    def observe(self, windows: int, seconds: float) -> None:
        """Feed one call: how many windows it held and how long it took."""
        if not self._measured:
            self._n, self._t, self._measured = float(windows), seconds, True
            self._nn, self._nt = self._n * self._n, self._n * seconds
            return
        a = self.alpha
        self._deviation += a * (abs(seconds - self._line(windows)) - self._deviation)
        self._n += a * (windows - self._n)
        self._t += a * (seconds - self._t)
        self._nn += a * (windows * windows - self._nn)
        self._nt += a * (windows * seconds - self._nt)

    def expected(self, windows: int) -> float:
        """Seconds a call of ``windows`` should be allowed: the line plus the margin; 0 before any call."""
        if not self._measured:
            return 0.0
        return self._line(windows) + DEVIATIONS * self._deviation

    def _line(self, windows: int) -> float:
        spread = self._nn - self._n * self._n
        if spread < self.SPREAD:
            return self._t * max(1.0, windows / self._n)
        slope = max(0.0, (self._nt - self._n * self._t) / spread)
        return max(0.0, self._t - slope * self._n) + slope * windows


class _Smoothed:
    """A duration's exponentially weighted mean and mean deviation; expected: the mean plus
    ``DEVIATIONS`` deviations."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.mean = 0.0
        self.deviation = 0.0
        self._measured = False

    def observe(self, seconds: float) -> None:
        if self._measured:
            self.deviation += self.alpha * (abs(seconds - self.mean) - self.deviation)
            self.mean += self.alpha * (seconds - self.mean)
        else:
            self.mean, self.deviation, self._measured = seconds, 0.0, True

    def restart(self) -> None:
        """The next duration replaces the estimate outright."""
        self._measured = False

    def expected(self) -> float:
        return self.mean + DEVIATIONS * self.deviation
