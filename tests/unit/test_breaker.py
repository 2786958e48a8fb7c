"""The circuit breaker of a remote model: opens after a run of failures, refuses calls for its
cooldown, lets one trial through, closes on its success, opens again on its failure."""

from __future__ import annotations

import pytest

from streamer.core.breaker import BreakerState, CircuitBreaker
from streamer.errors import ConfigError


def test_it_opens_after_the_failures_in_a_row_and_refuses_calls_for_the_cooldown() -> None:
    breaker = CircuitBreaker(failures=3, cooldown_s=1.0)
    for now in (0.0, 0.1):
        assert breaker.allow(now)
        breaker.failure(now)
    assert breaker.state is BreakerState.CLOSED
    breaker.failure(0.2)
    assert breaker.state is BreakerState.OPEN
    assert breaker.opened == 1
    assert not breaker.allow(0.5)
    assert not breaker.allow(1.19)


def test_a_success_between_failures_starts_the_count_again() -> None:
    breaker = CircuitBreaker(failures=2, cooldown_s=1.0)
    breaker.failure(0.0)
    breaker.success()
    breaker.failure(0.1)
    assert breaker.state is BreakerState.CLOSED


def test_after_the_cooldown_one_trial_goes_out_and_its_success_closes_the_breaker() -> None:
    breaker = CircuitBreaker(failures=1, cooldown_s=1.0)
    breaker.failure(0.0)
    assert breaker.allow(1.0)  # the trial
    assert breaker.state is BreakerState.TRIAL
    assert not breaker.allow(1.0)  # others wait for its answer
    breaker.success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.allow(1.01)


def test_a_failed_trial_opens_it_for_another_cooldown_and_counts_one_outage() -> None:
    breaker = CircuitBreaker(failures=3, cooldown_s=0.5)
    for now in (0.0, 0.0, 0.0):
        breaker.failure(now)
    assert breaker.allow(0.5)
    breaker.failure(0.6)  # one failed trial is enough to open again
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow(1.0)
    assert breaker.allow(1.1)
    assert breaker.opened == 1


@pytest.mark.parametrize(("failures", "cooldown"), [(0, 1.0), (3, 0.0), (3, -1.0)])
def test_bad_settings_are_refused(failures: int, cooldown: float) -> None:
    with pytest.raises(ConfigError, match="circuit breaker"):
        CircuitBreaker(failures, cooldown)
