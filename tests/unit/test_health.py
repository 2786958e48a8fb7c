"""StreamHealth: a stream's state from when things last happened."""

from __future__ import annotations

import pytest

from streamer.core.health import HealthLimits, StreamHealth, StreamSignals, StreamState
from streamer.errors import ConfigError

LIMITS = HealthLimits(stall_after_s=5.0, sink_blocked_after_s=2.0)


@pytest.mark.parametrize(
    ("signals", "now", "state"),
    [
        (StreamSignals(), 0.0, StreamState.CONNECTING),
        (StreamSignals(opened=True), 10.0, StreamState.CONNECTING),
        (StreamSignals(opened=True, last_frame=9.0), 10.0, StreamState.LIVE),
        (StreamSignals(opened=True, last_frame=4.0), 10.0, StreamState.STALLED),
        (StreamSignals(opened=True, last_frame=9.9, sending_since=9.0), 10.0, StreamState.LIVE),
        (StreamSignals(opened=True, last_frame=9.9, sending_since=7.5), 10.0, StreamState.SINK_BLOCKED),
        (StreamSignals(opened=True, last_frame=1.0, finished=True), 10.0, StreamState.ENDED),
        (StreamSignals(opened=True, finished=True, error="boom"), 10.0, StreamState.FAILED),
        (StreamSignals(error="refused"), 0.0, StreamState.FAILED),
    ],
)
def test_signals_classify_into_one_state(signals: StreamSignals, now: float, state: StreamState) -> None:
    assert StreamHealth(LIMITS).classify(signals, now) is state


def test_update_reports_only_changes() -> None:
    health = StreamHealth(LIMITS)
    live = StreamSignals(opened=True, last_frame=1.0)
    assert health.state is StreamState.CONNECTING
    assert health.update(live, 1.5) is StreamState.LIVE
    assert health.update(live, 2.0) is None
    assert health.update(live, 7.0) is StreamState.STALLED
    assert health.update(StreamSignals(opened=True, last_frame=7.5), 7.6) is StreamState.LIVE
    assert health.state is StreamState.LIVE


def test_ready_states_are_live_and_ended() -> None:
    assert {s for s in StreamState if s.ready} == {StreamState.LIVE, StreamState.ENDED}


def test_limits_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="stall_after_s"):
        HealthLimits(stall_after_s=0.0)
