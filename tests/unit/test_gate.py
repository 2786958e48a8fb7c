from __future__ import annotations

import numpy as np
import pytest

from streamer.core.gate import GateReason, MotionGate, Region, SceneCutDetector, luma_thumbnail
from streamer.errors import ConfigError
from streamer.frame import Hyperframe
from tests.factories import make_frame

H, W = 72, 128


def scene(index: int, box_x: int | None = None, noise: float = 0.0, light: int = 0) -> Hyperframe:
    """A static textured background; optionally a bright 16x16 box at box_x, noise, a lighting offset."""
    rng = np.random.default_rng(index)
    background = np.tile(np.linspace(40, 200, W, dtype=np.float32), (H, 1))[..., None].repeat(3, axis=2)
    pixels = background + light
    if box_x is not None:
        pixels[20:36, box_x : box_x + 16] = 250
    if noise:
        pixels = pixels + rng.normal(0, noise, pixels.shape)
    frame = make_frame(index, pixels=np.clip(pixels, 0, 255).astype(np.uint8))
    return Hyperframe((frame,), 0)


def gate(**kwargs: object) -> MotionGate:
    defaults: dict[str, object] = {"downscale_width": 32, "refresh_s": None}
    return MotionGate(**{**defaults, **kwargs})  # type: ignore[arg-type]


def test_static_noisy_scene_is_skipped_after_hold() -> None:
    g = gate(hold=2)
    decisions = [g.decide(scene(i, noise=4.0), now=i / 30) for i in range(10)]
    assert decisions[0].reason is GateReason.FIRST
    assert [d.run_model for d in decisions[:3]] == [True, True, False]
    assert all(d.reason is GateReason.STATIC for d in decisions[3:])
    assert g.stats().skipped == 8
    assert g.stats().skip_ratio == pytest.approx(0.8)


def test_moving_object_runs_the_model_at_once() -> None:
    g = gate(hold=1)
    for i in range(4):
        g.decide(scene(i), now=i / 30)
    moving = g.decide(scene(4, box_x=40), now=4 / 30)
    assert moving.run_model
    assert moving.reason is GateReason.MOTION
    assert moving.score > 0.02


def test_slow_drift_accumulates_against_the_reference_until_it_triggers() -> None:
    g = gate(hold=1, pixel_threshold=10.0)
    g.decide(scene(0), now=0.0)
    g.decide(scene(1), now=0.1)
    runs = [g.decide(scene(i, light=i), now=i / 10).run_model for i in range(2, 16)]
    # One level per frame is far below the threshold frame to frame, but not against the reference.
    assert not runs[0]
    assert any(runs)


def test_refresh_bounds_how_long_an_output_is_reused() -> None:
    g = gate(hold=1, refresh_s=1.0)
    reasons = [g.decide(scene(i), now=i * 0.25).reason for i in range(8)]
    assert GateReason.REFRESH in reasons
    assert reasons.count(GateReason.STATIC) >= 3


def test_reset_forgets_the_reference() -> None:
    g = gate(hold=1)
    for i in range(3):
        g.decide(scene(i), now=float(i))
    g.reset()
    assert g.decide(scene(3), now=3.0).reason is GateReason.FIRST


def test_disabled_gate_always_runs() -> None:
    g = MotionGate(enabled=False)
    assert all(g.decide(scene(i), now=float(i)).run_model for i in range(3))


def test_thumbnail_is_downscaled_luma() -> None:
    pixels = np.zeros((1080, 1920, 3), dtype=np.uint8)
    pixels[..., 1] = 255
    thumb = luma_thumbnail(pixels, 160)
    assert thumb.shape == (90, 160)
    assert float(thumb.max()) == pytest.approx(149.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"area_on": 0.01, "area_off": 0.02},
        {"hold": 0},
        {"downscale_width": 0},
        {"refresh_s": 0.0},
        {"tile": 4},
        {"halo": -1},
        {"max_region": 0.0},
        {"tile_area": 0.0},
    ],
)
def test_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        MotionGate(**kwargs)  # type: ignore[arg-type]


def test_scene_cut_is_flagged_and_a_pan_is_not() -> None:
    detector = SceneCutDetector(40.0, downscale_width=32)
    y, x = np.mgrid[0:H, 0 : W + 64].astype(np.float32)
    texture = 128 + 60 * np.sin(x / 9) + 60 * np.cos(y / 7)
    wide = np.repeat(texture[..., None], 3, axis=2).astype(np.uint8)
    pan = [wide[:, x0 : x0 + W] for x0 in range(0, 40, 4)]
    other = 255 - pan[-1]
    flags = [detector.is_cut(np.ascontiguousarray(p)) for p in [*pan, other]]
    assert flags == [False] * len(pan) + [True]
    assert detector.cuts == 1


def test_scene_cut_detection_can_be_off() -> None:
    detector = SceneCutDetector(None)
    assert not detector.is_cut(np.zeros((8, 8, 3), np.uint8))
    assert not detector.is_cut(np.full((8, 8, 3), 255, np.uint8))


def test_tiles_send_only_the_box_around_the_change_and_keep_the_rest() -> None:
    g = gate(downscale_width=64, tile=16, halo=8, max_region=0.9)
    assert g.decide(scene(0, box_x=20), now=0.0).region is None  # the first window: the whole frame
    assert not g.decide(scene(1, box_x=20), now=0.1).run_model  # nothing moved
    moved = g.decide(scene(2, box_x=28), now=0.2)
    assert moved.run_model
    assert moved.reason is GateReason.MOTION
    region = moved.region
    assert region is not None
    # The rows 20..36 and columns 20..44 that changed, plus the halo (8), out to whole tiles of 16:
    assert region.paste == (0, 48, 0, 64)
    assert region.crop == (0, 56, 0, 72)  # the paste box and its halo, inside the frame
    assert region.crop_pixels < H * W / 2
    # The pasted tiles were enhanced from this frame: the same scene again needs nothing.
    assert not g.decide(scene(3, box_x=28), now=0.3).run_model


def test_tiles_fall_back_to_the_whole_frame_for_big_changes_and_refreshes() -> None:
    g = gate(downscale_width=64, tile=16, halo=8, max_region=0.5, refresh_s=1.0)
    g.decide(scene(0), now=0.0)
    lit = g.decide(scene(1, light=40), now=0.1)  # the lights go up: every tile changed
    assert lit.run_model
    assert lit.region is None
    assert not g.decide(scene(2, light=40), now=0.5).run_model
    refresh = g.decide(scene(3, light=40), now=1.2)
    assert refresh.reason is GateReason.REFRESH
    assert refresh.region is None
    edge = g.decide(scene(4, box_x=W - 16, light=40), now=1.3)
    assert edge.region is not None
    assert edge.region.crop[3] == W  # clipped to the frame


def test_a_region_aligned_for_a_strided_model_widens_its_crop_onto_the_grid_and_keeps_its_paste() -> None:
    region = Region(crop=(6, 70, 33, 99), paste=(38, 38 + 32, 65, 65 + 32))
    assert region.aligned(4, 360, 640) == Region((4, 72, 32, 100), region.paste)
    # At the frame's edge the crop ends there, whatever the multiple.
    assert region.aligned(4, 71, 98).crop == (4, 71, 32, 98)
    assert region.aligned(1, 360, 640) == region


def test_the_halo_follows_the_models_reach_unless_one_is_set() -> None:
    g = gate(tile=16)
    assert g.halo == 32  # unknown reach: the default
    g.fit_reach(27)  # conv3d_t5's, as its card records it
    assert g.halo == 28  # rounded up onto the models' grid of 4
    g.fit_reach(39)  # another model taken for the stream (model: auto)
    assert g.halo == 40
    g.fit_reach(None)
    assert g.halo == 32
    fixed = gate(tile=16, halo=8)
    fixed.fit_reach(39)
    assert fixed.halo == 8  # gate.halo set: the config's word stands


def test_the_thumbnails_luma_is_bt601_in_integers_exactly_up_to_white() -> None:
    """(77 R + 150 G + 29 B) >> 8 of each sample, averaged over the four spread samples of a block:
    summed channel by channel it must give numpy's integer matmul's values, white included."""
    rng = np.random.default_rng(4)
    frame = rng.integers(0, 256, (96, 160, 3), dtype=np.uint8)
    frame[:12, :16] = 255
    weights = np.array([77, 150, 29], dtype=np.uint16)
    step, half = 160 // 40, 2
    samples = [frame[dy::step, dx::step][:24, :40] for dy in (0, half) for dx in (0, half)]
    expected = np.mean([((s @ weights) >> 8).astype(np.float32) for s in samples], axis=0)
    thumb = luma_thumbnail(frame, 40)
    assert np.array_equal(thumb, expected)
    assert thumb[:3, :4].min() == 255.0


@pytest.mark.parametrize(("height", "width"), [(16, 7680), (2, 4096), (4320, 2)])
def test_frames_far_wider_than_tall_or_the_reverse_are_gated(height: int, width: int) -> None:
    g = MotionGate(downscale_width=160, refresh_s=None, tile=16)
    still = make_frame(0, pixels=np.full((height, width, 3), 90, np.uint8))
    moved = make_frame(1, pixels=np.full((height, width, 3), 200, np.uint8))
    first = g.decide(Hyperframe((still,), 0), now=0.0)
    second = g.decide(Hyperframe((moved,), 0), now=0.1)
    assert (first.reason, second.run_model) == (GateReason.FIRST, True)
