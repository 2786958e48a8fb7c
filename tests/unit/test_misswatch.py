"""The miss watch: one warning per window while a stream passes over 5% of its frames through."""

from __future__ import annotations

import pytest

from streamer.core.misswatch import MissWatch
from streamer.errors import ConfigError


def _feed(watch: MissWatch, start: float, seconds: int, fps: int, missed_every: int | None) -> list[float]:
    warned = []
    for i in range(seconds * fps):
        now = start + i / fps
        if watch.observe(now, missed_every is not None and i % missed_every == 0):
            warned.append(now)
    return warned


def test_a_stream_under_the_limit_is_never_warned_about() -> None:
    watch = MissWatch(0.05, 60.0)
    assert _feed(watch, 0.0, 180, 30, missed_every=25) == []  # 4% passed through
    assert 0.03 < watch.stats().share < 0.05


def test_over_the_limit_warns_once_per_window_and_not_before_a_full_window() -> None:
    watch = MissWatch(0.05, 60.0)
    warned = _feed(watch, 100.0, 150, 30, missed_every=10)  # 10%
    assert len(warned) == 2
    assert warned[0] >= 160.0  # a whole minute observed first
    assert warned[1] - warned[0] >= 60.0
    assert watch.stats().warnings == 2


def test_recovery_empties_the_window_and_a_gap_forgets_old_seconds() -> None:
    watch = MissWatch(0.05, 10.0)
    assert len(_feed(watch, 0.0, 11, 30, missed_every=2)) == 1
    assert _feed(watch, 11.0, 20, 30, missed_every=None) == []
    assert watch.stats().share == 0.0
    watch.observe(1000.0, True)  # after a long gap the old seconds no longer count
    assert watch.share() == 1.0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="limit"):
        MissWatch(1.5)
