"""TierController: down fast when the share falls, up slowly when it holds, never flapping."""

from __future__ import annotations

import pytest

from streamer.core.tiering import NeighbourLoad, TierController


class Stream:
    """Feeds a controller a 30 fps stream second by second at a given enhanced share."""

    def __init__(self, controller: TierController) -> None:
        self.controller = controller
        self.now = 0.0
        self.enhanced = 0
        self.missed = 0

    def run(self, seconds: int, share: float, fits: bool = True) -> list[tuple[float, int]]:
        moves = []
        for _ in range(seconds):
            self.now += 1.0
            done = round(30 * share)
            self.enhanced += done
            self.missed += 30 - done
            self.controller.observe(self.now, self.enhanced, self.missed)
            move = self.controller.decide(self.now, fits)
            if move is not None:
                moves.append((self.now, move.to))
        return moves


def test_a_stream_that_keeps_up_stays_until_it_has_held_long_enough_and_the_tier_fits() -> None:
    stream = Stream(TierController(tiers=3, start=2, now=0.0))
    assert stream.run(29, 1.0) == []
    assert stream.run(20, 1.0, fits=False) == []  # room, but the better tier's cost does not fit
    assert stream.run(1, 1.0) == [(50.0, 1)]


def test_a_falling_share_moves_down_within_the_window_and_not_past_the_cheapest() -> None:
    stream = Stream(TierController(tiers=3, start=0, now=0.0))
    assert stream.run(10, 1.0) == []
    assert stream.run(6, 0.5) == [(11.0, 1)]  # the first second at half: 90% over the last 5 s
    assert stream.run(6, 0.5) == [(17.0, 2)]  # a window of frames on the new tier first
    assert stream.run(30, 0.5) == []  # the cheapest: nowhere lower to go


def test_a_tier_that_cannot_hold_is_tried_again_only_after_ever_longer_waits() -> None:
    stream = Stream(TierController(tiers=2, start=1, now=0.0))
    assert stream.run(36, 1.0) == [(36.0, 0)]  # a full window at t=6, then 30 s held
    assert stream.run(6, 0.6) == [(42.0, 1)]  # could not hold: next time, twice as long
    assert stream.run(67, 1.0) == [(108.0, 0)]  # held 60 s
    assert stream.run(6, 0.6) == [(114.0, 1)]
    assert stream.run(200, 1.0)[0] == (240.0, 0)  # held 120 s


def test_a_start_tier_that_cannot_hold_waits_as_a_tier_moved_up_to_would() -> None:
    stream = Stream(TierController(tiers=2, start=0, now=0.0))
    assert stream.run(6, 0.6) == [(6.0, 1)]  # the tier the cards chose could not hold
    assert stream.run(70, 1.0) == [(72.0, 0)]  # held twice the settling time, from a window on
    late = Stream(TierController(tiers=2, start=0, now=0.0))
    assert late.run(40, 1.0) == []
    assert late.run(1, 0.6) == [(41.0, 1)]  # held past the settling time first
    assert late.run(36, 1.0) == [(77.0, 0)]  # so the usual wait


def test_a_move_down_asked_from_outside_goes_straight_to_the_tier_and_never_up() -> None:
    controller = TierController(tiers=4, start=0, now=0.0)
    assert controller.down_to(0, 1.0, "the same") is None
    move = controller.down_to(2, 1.0, "3 streams now share these cores")
    assert move is not None
    assert (move.to, move.reason, controller.current) == (2, "3 streams now share these cores", 2)
    assert controller.down_to(1, 2.0, "fewer") is None
    with pytest.raises(ValueError, match="tier 4"):
        controller.down_to(4, 3.0, "past the cheapest")
    stream = Stream(controller)
    stream.now = 2.0
    assert stream.run(40, 1.0) == [(38.0, 1)]  # up again as after any move down: a window, then 30 s


def test_moves_are_one_tier_at_a_time_and_say_why() -> None:
    controller = TierController(tiers=4, start=0, now=0.0)
    stream = Stream(controller)
    assert stream.run(6, 0.2) == [(6.0, 1)]
    controller.observe(7.0, stream.enhanced, stream.missed + 30)
    controller.observe(12.0, stream.enhanced, stream.missed + 180)
    move = controller.decide(12.0, True)
    assert move is not None
    assert (move.to, move.reason) == (2, "enhanced 0% over the last 5 s")
    assert move.down(1)


def test_a_start_outside_the_tiers_is_refused() -> None:
    with pytest.raises(ValueError, match="start tier 3"):
        TierController(tiers=3, start=3, now=0.0)


def test_a_stream_missing_on_the_cheapest_tier_is_starved_once_per_window_and_never_above_it() -> None:
    above = TierController(tiers=3, start=1, now=0.0)
    for second in range(1, 7):
        above.observe(float(second), 24 * second, 6 * second)
    assert above.share(6.0) == pytest.approx(0.8)
    assert above.starved(6.0, 0.95) is None  # a tier below is left: it moves down instead
    stream = Stream(TierController(tiers=3, start=2, now=0.0))
    stream.run(6, 1.0)
    assert stream.controller.starved(stream.now, 0.95) is None  # it keeps up
    stream.run(6, 0.8)
    assert stream.controller.starved(stream.now, 0.75) is None  # above the floor asked for
    assert stream.controller.starved(stream.now, 0.95) == pytest.approx(0.8)
    assert stream.controller.starved(stream.now, 0.95) is None  # a new window first
    stream.run(4, 0.8)
    assert stream.controller.starved(stream.now, 0.95) is None
    stream.run(2, 0.8)
    assert stream.controller.starved(stream.now, 0.95) == pytest.approx(0.8)


def test_the_cores_other_processes_keep_busy_over_the_window() -> None:
    load = NeighbourLoad(window_s=10.0)
    assert load.cores() is None  # nothing seen yet
    for second in range(21):  # the host busy 1.7 cores a second, this process 0.7 of them
        load.observe(float(second), host_s=1.7 * second, process_s=0.7 * second)
    assert load.cores() == pytest.approx(1.0)
    for second in range(21, 41):  # the neighbour left: the host is this process alone
        load.observe(float(second), host_s=1.7 * 20 + 0.7 * (second - 20), process_s=0.7 * second)
    assert load.cores() == pytest.approx(0.0)  # only the last window counts
    assert load.observe(41.0, host_s=None, process_s=0.7 * 41) is None  # no host figure: not known
    assert load.cores() is None
