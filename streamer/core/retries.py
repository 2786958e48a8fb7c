"""How a retry loop waits and speaks: delays doubling with jitter, and when it says it is still failing
(on the first failure, after 2, 4, 8... failures, and never less often than once every ``every_s``
seconds, so a dead camera neither floods the log nor goes quiet while it is retried)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from streamer.errors import ConfigError

__all__ = ["RETRY_REPORT_EVERY_S", "RetryReport", "backoff_delays", "check_backoff"]

RETRY_REPORT_EVERY_S = 300.0
"""The longest a failing retry loop stays silent."""


class RetryReport:
    """Whether a retry loop's failure is one to log."""

    def __init__(self, every_s: float = RETRY_REPORT_EVERY_S) -> None:
        self.every_s = every_s
        self._said_at: float | None = None

    def due(self, failures: int, now: float) -> bool:
        """Whether to log the ``failures``-th failure in a row, seen at ``now`` (monotonic seconds)."""
        doubling = failures & (failures - 1) == 0
        if doubling or self._said_at is None or now - self._said_at >= self.every_s:
            self._said_at = now
            return True
        return False


def backoff_delays(initial: float, maximum: float, jitter: float, rng: random.Random) -> Iterator[float]:
    """Seconds to wait before each retry: doubling from ``initial`` up to ``maximum``, each +/- ``jitter``.

    Jitter spreads the retries of many clients that lost the same server at the same moment.
    """
    delay = initial
    while True:
        yield max(0.0, delay * (1.0 + jitter * rng.uniform(-1.0, 1.0)))
        delay = min(delay * 2.0, maximum)


def check_backoff(initial: float, maximum: float, jitter: float, max_attempts: int | None, what: str) -> None:
    if initial <= 0 or maximum < initial:
        raise ConfigError(
            f"{what}: backoff_initial_s must be positive and backoff_max_s at least as large, got "
            f"{initial} and {maximum}"
        )
    if not 0.0 <= jitter < 1.0:
        raise ConfigError(f"{what}: jitter is a fraction of the delay in [0, 1), got {jitter}")
    if max_attempts is not None and max_attempts < 1:
        raise ConfigError(f"{what}: max_attempts must be at least 1, or None to retry forever")
