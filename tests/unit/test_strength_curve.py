"""What ``model.strength: auto`` gives a model for a stream's noise estimate: its measured curve."""

from __future__ import annotations

import pytest

from export.calibrate_strength import Level, curve_of
from streamer.backend.base import Layout, ModelInfo
from streamer.contract import strength_curve
from streamer.core.windower import OutputPosition
from streamer.errors import ModelError


def test_without_a_curve_auto_gives_the_estimate_itself() -> None:
    info = ModelInfo("m", 1, Layout.NCHW, OutputPosition.LAST, strength=True)
    assert info.auto_strength(7.5) == 7.5


def test_a_curve_is_followed_on_straight_lines_and_flat_past_its_ends() -> None:
    info = ModelInfo(
        "m",
        1,
        Layout.NCHW,
        OutputPosition.LAST,
        strength=True,
        strength_curve=((2.0, 4.0), (10.0, 20.0), (30.0, 40.0)),
    )
    assert info.auto_strength(6.0) == pytest.approx(12.0)
    assert info.auto_strength(20.0) == pytest.approx(30.0)
    assert info.auto_strength(0.5) == 4.0
    assert info.auto_strength(90.0) == 40.0


def test_the_metadata_text_reads_as_points() -> None:
    assert strength_curve(None, "m") == ()
    assert strength_curve("1.5:3,8:16,25:30", "m") == ((1.5, 3.0), (8.0, 16.0), (25.0, 30.0))


@pytest.mark.parametrize("text", ["", "1:2,1:3", "5:2,3:4", "1:300", "-1:2", "1-2", "a:b", "1:2:3"])
def test_a_curve_that_is_not_rising_pairs_in_range_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ModelError, match=r"model\.onnx has streamer\.strength_curve=.*estimate:strength"):
        strength_curve(text, "model.onnx")


def _level(sigma: float, estimate: float, best: float) -> Level:
    return Level(sigma, estimate, {best: 30.0}, best, 29.0)


def test_the_measured_curve_rises_with_the_estimate_and_never_falls() -> None:
    levels = [
        _level(25, 24.0, 30),
        _level(0, 1.2, 4),
        _level(6, 5.0, 12),
        _level(10, 9.0, 9),
        _level(3, 1.2, 6),
    ]
    # from (0, 0), sorted by estimate; a level whose best is under an earlier one's keeps the earlier
    # strength, and two levels with one estimate become one point with the higher strength
    assert curve_of(levels) == ((0.0, 0.0), (1.2, 6.0), (5.0, 12.0), (9.0, 12.0), (24.0, 30.0))
