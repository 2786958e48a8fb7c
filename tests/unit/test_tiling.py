"""Tiles for frames larger than one model call: kept parts cover the frame once, crops overlap and sit
on the model's grid."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.core.tiling import plan_tiles
from streamer.errors import ConfigError


@pytest.mark.parametrize(
    ("height", "width", "size", "overlap", "multiple"),
    [(2160, 3840, 1024, 32, 4), (360, 640, 256, 32, 4), (100, 130, 64, 8, 1), (97, 203, 80, 16, 4)],
)
def test_pastes_cover_the_frame_once_and_crops_widen_them_by_the_overlap_on_the_grid(
    height: int, width: int, size: int, overlap: int, multiple: int
) -> None:
    covered = np.zeros((height, width), np.int32)
    for tile in plan_tiles(height, width, size, overlap, multiple):
        ct, cb, cl, cr = tile.crop
        pt, pb, pl, pr = tile.paste
        covered[pt:pb, pl:pr] += 1
        assert ct % multiple == 0
        assert cl % multiple == 0
        assert ct <= max(0, pt - overlap)
        assert cl <= max(0, pl - overlap)
        assert cb >= min(height, pb + overlap)
        assert cr >= min(width, pr + overlap)
        assert cb - ct <= size + multiple - 1
        assert cr - cl <= size + multiple - 1
    assert (covered == 1).all()


def test_a_frame_that_fits_is_one_tile() -> None:
    (tile,) = plan_tiles(360, 640, 640, 32, 4)
    assert tile.crop == tile.paste == (0, 360, 0, 640)


def test_tiles_too_small_for_their_overlap_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"raise model\.tile above 68"):
        plan_tiles(2160, 3840, 64, 32, 4)


def test_a_tile_setting_that_keeps_no_pixel_is_refused_at_config_load() -> None:
    from streamer.config import load_config

    with pytest.raises(ConfigError, match=r"model\.tile \(64\) must exceed twice model\.tile_overlap \(32\)"):
        load_config(None, {"model.tile": 64})
    assert load_config(None, {"model.tile": 96, "model.tile_overlap": 40}).model.tile == 96


def test_crops_end_on_the_grid_too_when_the_overlap_is_off_it() -> None:
    # A streaming model's cached maps are cut at crop / 4: both ends must sit on the grid (or the edge).
    for tile in plan_tiles(358, 650, 160, 30, 4):
        ct, cb, cl, cr = tile.crop
        assert ct % 4 == 0
        assert cl % 4 == 0
        assert cb % 4 == 0 or cb == 358
        assert cr % 4 == 0 or cr == 650
