"""The keep-alive's decisions for a live output whose camera goes silent; times are given, nothing waits."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.core.card import no_signal_card
from streamer.core.keepalive import Filler, KeepAlive
from streamer.errors import ConfigError

PERIOD = 0.04  # 25 fps


def streaming(alive: KeepAlive, until: float) -> None:
    """A camera delivering a frame every period up to ``until``, each sent at once."""
    for k in range(round(until / PERIOD) + 1):
        alive.received(k * PERIOD)
        alive.sent(k * PERIOD)


def test_nothing_is_due_before_the_first_frame_has_gone_out() -> None:
    alive = KeepAlive(PERIOD)
    alive.received(0.0)
    assert alive.due_in(5.0) is None
    assert alive.fill(5.0) is None


def test_a_silent_source_gets_the_last_frame_every_period_then_the_card() -> None:
    alive = KeepAlive(PERIOD, card_after_s=0.18)
    streaming(alive, 1.0)
    assert alive.due_in(1.0) == pytest.approx(1.5 * PERIOD)
    assert alive.fill(1.05) is None  # 1.25 periods of silence: jitter, not a gap
    fills = [alive.fill(1.0 + 1.5 * PERIOD + k * PERIOD) for k in range(8)]
    assert fills == [Filler.REPEAT] * 5 + [Filler.CARD] * 3  # the card from 0.18 s into the gap
    assert alive.in_gap
    stats = alive.stats()
    assert (stats.gaps, stats.repeats, stats.cards) == (1, 5, 3)


def test_a_slow_model_with_a_live_source_is_no_gap() -> None:
    alive = KeepAlive(PERIOD)
    streaming(alive, 1.0)
    for k in range(1, 10):  # frames keep arriving; the output waits on the model
        alive.received(1.0 + k * PERIOD)
        assert alive.fill(1.0 + k * PERIOD) is None
    assert alive.stats().gaps == 0


def test_the_gap_ends_with_the_next_real_frame_and_frames_held_through_a_long_one_are_stale() -> None:
    alive = KeepAlive(PERIOD, stale_s=1.0)
    streaming(alive, 1.0)
    assert alive.fill(1.1) is Filler.REPEAT
    assert not alive.stale(arrival=1.02, now=1.2)  # a hiccup: late by a few frames, still sent
    assert alive.stale(arrival=1.02, now=9.0)  # held through a long gap: the output moved past it
    assert not alive.stale(arrival=8.9, now=9.0)  # the camera's first frame after the gap
    alive.received(8.9)
    alive.sent(9.0)
    assert not alive.in_gap
    assert not alive.stale(arrival=1.02, now=9.1)  # no gap: nothing is stale
    assert alive.fill(9.01) is None
    assert alive.stats().stale == 1


def test_fillers_keep_the_period_and_a_late_wake_up_does_not_send_a_burst() -> None:
    alive = KeepAlive(PERIOD, card_after_s=None)
    streaming(alive, 1.0)
    assert alive.fill(1.06) is Filler.REPEAT
    assert alive.due_in(1.07) == pytest.approx(PERIOD - 0.01)
    assert alive.fill(1.11) is Filler.REPEAT  # a little late: the next is still due at 1.14
    assert alive.due_in(1.11) == pytest.approx(0.03)
    assert alive.fill(2.0) is Filler.REPEAT  # far behind (the loop was blocked): one frame, not 21
    assert alive.fill(2.0) is None
    assert alive.due_in(2.0) == pytest.approx(PERIOD)
    assert alive.stats().cards == 0  # card_after_s None: the last frame for as long as it lasts


@pytest.mark.parametrize(
    ("period", "card", "start"), [(0.0, 1.0, 1.5), (PERIOD, -1.0, 1.5), (PERIOD, 1.0, 0.5)]
)
def test_bad_settings_are_refused(period: float, card: float, start: float) -> None:
    with pytest.raises(ConfigError):
        KeepAlive(period, card, start)


@pytest.mark.parametrize(("width", "height"), [(640, 360), (1920, 1080), (64, 48), (8, 6)])
def test_the_card_fits_any_frame_size(width: int, height: int) -> None:
    card = no_signal_card(width, height)
    assert card.shape == (height, width, 3)
    assert card.dtype == np.uint8
    assert not card.flags.writeable
    if width >= 64:
        assert 0 < float((card == 200).mean()) < 0.2  # the text is drawn, on a mostly dark card
