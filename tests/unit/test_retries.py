"""RetryReport: a failing retry loop logs at doublings, and never goes quiet for longer than its cap."""

from __future__ import annotations

from streamer.core.retries import RetryReport


def test_failures_are_said_at_each_doubling_then_at_least_every_cap() -> None:
    report = RetryReport(every_s=300.0)
    said = [n for n in range(1, 9) if report.due(n, now=n * 30.0)]
    assert said == [1, 2, 4, 8]
    # Failures 9.. come every 30 s: the next doubling (16) is 240 s away, within the cap.
    assert [n for n in range(9, 17) if report.due(n, now=n * 30.0)] == [16]
    # Then 300 s apart at most, though the next doubling (32) is 480 s away.
    assert [n for n in range(17, 50) if report.due(n, now=n * 30.0)] == [26, 32, 42]
