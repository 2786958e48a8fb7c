"""The benchmark's metrics on clips whose scores are known exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamer.errors import FrameError
from streamer.measure.metrics import flicker_index, psnr, ssim, temporal_variation


def _clip(frames: int = 4, h: int = 24, w: int = 32, seed: int = 0) -> np.ndarray:
    """Textured frames in 60..190, so small offsets never clip."""
    return np.random.default_rng(seed).integers(60, 190, size=(frames, h, w, 3), dtype=np.uint8)


def test_psnr_of_identical_frames_is_infinite_and_ssim_is_one() -> None:
    clean = _clip()
    assert psnr(clean, clean.copy()) == math.inf
    assert ssim(clean, clean.copy()) == pytest.approx(1.0)


def test_psnr_of_a_constant_offset_is_20_log10_of_peak_over_offset() -> None:
    clean = _clip()
    assert psnr(clean + np.uint8(5), clean) == pytest.approx(20 * math.log10(255 / 5))


def test_psnr_is_the_mean_over_frames_not_over_the_pooled_error() -> None:
    clean = _clip(frames=2)
    out = clean.copy()
    out[0] += np.uint8(1)
    out[1] += np.uint8(10)
    expected = (20 * math.log10(255 / 1) + 20 * math.log10(255 / 10)) / 2
    assert psnr(out, clean) == pytest.approx(expected)


def test_ssim_falls_with_noise() -> None:
    clean = _clip()
    noisy = np.clip(clean + np.random.default_rng(1).normal(0, 25, clean.shape), 0, 255).astype(np.uint8)
    assert ssim(noisy, clean) < 0.9 * ssim(clean, clean)


def test_flicker_of_the_clean_clip_itself_is_zero() -> None:
    clean = _clip()
    assert flicker_index(clean.copy(), clean) == 0.0


def test_temporal_variation_is_the_mean_absolute_frame_difference() -> None:
    clip = np.zeros((4, 8, 8, 3), dtype=np.uint8)
    clip[1::2] = 10
    assert temporal_variation(clip) == pytest.approx(10.0)


def test_flicker_is_positive_for_an_output_that_shimmers_and_negative_for_a_frozen_one() -> None:
    clean = np.zeros((5, 8, 8, 3), dtype=np.uint8)
    clean[:] = np.arange(5, dtype=np.uint8)[:, None, None, None] * 2
    shimmering = clean.copy()
    shimmering[1::2] += np.uint8(6)
    frozen = np.repeat(clean[:1], 5, axis=0)
    assert flicker_index(shimmering, clean) > 0
    assert flicker_index(frozen, clean) == pytest.approx(-2.0)


def test_metrics_refuse_clips_of_different_shapes() -> None:
    with pytest.raises(FrameError, match="differ in shape"):
        psnr(_clip(h=24), _clip(h=16))


def test_metrics_refuse_non_uint8_rgb() -> None:
    with pytest.raises(FrameError, match=r"\(N>=1, H, W, 3\) uint8"):
        ssim(_clip().astype(np.float32), _clip())


def test_flicker_needs_two_frames() -> None:
    with pytest.raises(FrameError, match="at least 2 frames"):
        temporal_variation(_clip(frames=1))
