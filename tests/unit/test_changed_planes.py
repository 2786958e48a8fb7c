"""streamer.media.planes.changed_planes: a model's change to a frame's RGB carried onto its planes."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.media.planes import SWSCALE, changed_planes, planes_rgb, rgb_planes

SIZES = ((16, 16), (144, 176), (240, 322))


def decoded(seed: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 256, (height, width), dtype=np.uint8)
    u, v = rng.integers(0, 256, (2, height // 2, width // 2), dtype=np.uint8)
    return y, u, v


def by_both(
    planes: tuple[np.ndarray, ...], matrix: int, colour_range: int, before: np.ndarray, after: np.ndarray
) -> list[np.ndarray]:
    """The reference: both pictures converted and the difference of their planes added."""
    made, were = rgb_planes(after, matrix, colour_range), rgb_planes(before, matrix, colour_range)
    return [
        np.clip(plane.astype(np.int16) + new - old, 0, 255).astype(np.uint8)
        for plane, new, old in zip(planes, made, were, strict=True)
    ]


@pytest.mark.parametrize("colour_range", [1, 2])
@pytest.mark.parametrize("matrix", sorted(SWSCALE))
def test_a_model_that_changes_nothing_gives_back_the_planes_exactly(matrix: int, colour_range: int) -> None:
    for seed, (height, width) in enumerate(SIZES):
        planes = decoded(seed, height, width)
        rgb = planes_rgb(*planes, matrix, colour_range)
        for out, plane in zip(
            changed_planes(planes, matrix, colour_range, rgb, rgb.copy()), planes, strict=True
        ):
            np.testing.assert_array_equal(out, plane)


@pytest.mark.parametrize("colour_range", [1, 2])
def test_a_change_converted_once_is_within_two_levels_of_both_pictures_converted(colour_range: int) -> None:
    rng = np.random.default_rng(7)
    for seed, (height, width) in enumerate(SIZES):
        planes = decoded(seed, height, width)
        before = planes_rgb(*planes, 1, colour_range)
        after = np.clip(before + rng.integers(-40, 41, before.shape), 0, 255).astype(np.uint8)
        once = changed_planes(planes, 1, colour_range, before, after)
        both = by_both(planes, 1, colour_range, before, after)
        for mine, reference in zip(once, both, strict=True):
            difference = np.abs(mine.astype(np.int16) - reference)
            assert difference.max() <= 2
            assert difference.mean() < 0.6


def test_a_change_of_more_than_127_levels_is_carried_whole_not_wrapped() -> None:
    planes = decoded(3, 144, 176)
    before = planes_rgb(*planes, 6, 1)
    white = np.full_like(before, 255)
    black = np.zeros_like(before)
    for after in (white, black):
        for mine, reference in zip(
            changed_planes(planes, 6, 1, before, after), by_both(planes, 6, 1, before, after), strict=True
        ):
            np.testing.assert_array_equal(mine, reference)
    brighter = changed_planes(planes, 6, 1, before, white, weight=0.75)
    assert brighter[0].mean() > planes[0].mean() + 0.5 * (235 - planes[0].mean())


def test_a_share_of_the_change_moves_each_plane_that_share_of_the_way() -> None:
    planes = decoded(4, 144, 176)
    before = planes_rgb(*planes, 1, 1)
    after = np.clip(before.astype(np.int16) + 40, 0, 255).astype(np.uint8)
    whole = changed_planes(planes, 1, 1, before, after)[0].astype(np.float32) - planes[0]
    half = changed_planes(planes, 1, 1, before, after, weight=0.5)[0].astype(np.float32) - planes[0]
    inside = (planes[0] > 40) & (planes[0] < 200)  # away from the clipping at either end
    assert np.abs(half[inside] - whole[inside] / 2).max() <= 1.0
