"""When a retry loop says it is still failing: on the first failure, after 2, 4, 8... failures, and
never less often than once every ``every_s`` seconds, so a dead camera neither floods the log nor goes
quiet while it is retried."""

from __future__ import annotations

__all__ = ["RETRY_REPORT_EVERY_S", "RetryReport"]

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
