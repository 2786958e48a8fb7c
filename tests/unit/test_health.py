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
        (StreamSignals(waiting=True), 0.0, StreamState.WAITING),
        # a WHIP stream whose publisher left long ago waits; it does not stall
        (StreamSignals(opened=True, last_frame=1.0, waiting=True), 60.0, StreamState.WAITING),
        (StreamSignals(opened=True, waiting=True, error="boom"), 10.0, StreamState.FAILED),
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
    assert health.update(StreamSignals(opened=True, last_frame=7.5), 7.6) is None  # not yet back for good
    assert health.state is StreamState.LIVE
    assert health.update(StreamSignals(opened=True, last_frame=12.5), 12.7) is StreamState.LIVE


def test_a_source_that_keeps_stalling_is_reported_stalled_once_per_episode() -> None:
    health = StreamHealth(LIMITS)
    reported = []
    # A frame every 6 s, each one late by more than stall_after_s: stalled/live on every frame.
    for k in range(10):
        frame = 6.0 * k
        for now in (frame + 0.1, frame + 5.5):
            reported.append(health.update(StreamSignals(opened=True, last_frame=frame), now))
    assert [s for s in reported if s is not None] == [StreamState.LIVE, StreamState.STALLED]
    # Frames flow again for longer than stall_after_s: the episode ends, said once.
    back = [health.update(StreamSignals(opened=True, last_frame=t - 0.1), t) for t in (60.0, 62.0, 65.5)]
    assert back == [None, None, StreamState.LIVE]
    assert health.update(StreamSignals(opened=True, last_frame=65.5), 71.0) is StreamState.STALLED
    failed = health.update(StreamSignals(opened=True, last_frame=65.5, error="boom"), 72.0)
    assert failed is StreamState.FAILED  # anything but live ends the episode at once


def test_ready_states_are_live_waiting_and_ended() -> None:
    assert {s for s in StreamState if s.ready} == {StreamState.LIVE, StreamState.WAITING, StreamState.ENDED}


def test_limits_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="stall_after_s"):
        HealthLimits(stall_after_s=0.0)
