"""A circuit breaker for a remote model: after a run of failures, stop calling it for a while.

A model server that is down answers every call after a connect timeout; calling it for each window
would spend the latency budget on timeouts and hammer the server as it restarts. The breaker opens
after ``failures`` failures in a row: calls are refused at once (the frames pass through) until
``cooldown_s`` has passed, then one trial call is let through; its success closes the breaker, its
failure opens it for another cooldown. Pure: the caller passes the time and reports each outcome.
"""

from __future__ import annotations

import enum
import threading

from streamer.errors import ConfigError

__all__ = ["BreakerState", "CircuitBreaker"]


class BreakerState(enum.Enum):
    CLOSED = "closed"
    """Calls go through."""
    OPEN = "open"
    """Calls are refused until the cooldown ends."""
    TRIAL = "trial"
    """One call is out to find whether the server is back; others are refused meanwhile."""


class CircuitBreaker:
    """Thread-safe: the backend's workers call ``allow`` and report from their own threads."""

    def __init__(self, failures: int = 3, cooldown_s: float = 1.0) -> None:
        if failures < 1 or cooldown_s <= 0:
            raise ConfigError(
                f"a circuit breaker needs failures >= 1 and cooldown_s > 0; got failures={failures}, "
                f"cooldown_s={cooldown_s}"
            )
        self.failures = failures
        self.cooldown_s = cooldown_s
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._in_a_row = 0
        self._opened_at = 0.0
        self.opened = 0
        """Times it has opened from closed: each an outage (or a run of failures) seen."""

    @property
    def state(self) -> BreakerState:
        return self._state

    def allow(self, now: float) -> bool:
        """Whether a call may go out now; when the cooldown is over the first caller gets the trial."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return True
            if self._state is BreakerState.OPEN and now - self._opened_at >= self.cooldown_s:
                self._state = BreakerState.TRIAL
                return True
            return False

    def success(self) -> None:
        with self._lock:
            self._state = BreakerState.CLOSED
            self._in_a_row = 0

    def failure(self, now: float) -> None:
        with self._lock:
            self._in_a_row += 1
            if self._state is BreakerState.TRIAL or self._in_a_row >= self.failures:
                if self._state is BreakerState.CLOSED:
                    self.opened += 1
                self._state = BreakerState.OPEN
                self._opened_at = now
