"""``streamer bench speed``'s arithmetic: per-round ratios and issue 13's targets."""

from __future__ import annotations

from streamer.bench.speed import speed_rows, targets


def test_ratios_are_the_median_of_each_rounds_ratio_and_only_recurrent_models_have_a_target() -> None:
    fps = {"lstm": [10.0, 20.0, 12.0], "t1": [30.0, 30.0, 30.0], "t5": [10.0, 10.0, 12.0]}
    rows = speed_rows(fps, {"lstm": True, "t1": False, "t5": False}, "t5")
    lstm = rows[0]
    # Rounds of 1.0x, 2.0x and 1.0x: the slow spell of the third round hit both alike.
    assert (lstm.median_fps, lstm.ratio, lstm.ratio_min, lstm.ratio_max) == (12.0, 1.0, 1.0, 2.0)
    assert rows[2].ratio == 1.0
    (target,) = targets(rows, "t5")
    assert target.name.startswith("lstm at least t5's fps")
    assert target.passed
    slower = speed_rows({"lstm": [9.0], "t5": [10.0]}, {"lstm": True, "t5": False}, "t5")
    assert not targets(slower, "t5")[0].passed
