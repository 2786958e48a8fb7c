"""Camera damage for training (``export.camera``): seeded, in the order a camera does it, measurable."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from export.camera import NO_DAMAGE, CameraDamage, CameraModel, damage
from streamer.core.noise import noise_sigma
from streamer.errors import ConfigError


def clip(n: int = 6, h: int = 64, w: int = 96) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    frames = [np.rint(120 + 40 * np.sin((x + 3 * i) / 9) * np.cos(y / 11)) for i in range(n)]
    return np.repeat(np.stack(frames)[..., None], 3, axis=3).astype(np.uint8)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b) ** 2))
    return 10 * np.log10(255**2 / mse)


def test_draws_are_seeded_and_span_what_cameras_do() -> None:
    model = CameraModel()
    draws = [model.draw(np.random.default_rng(seed)) for seed in range(300)]
    assert draws == [model.draw(np.random.default_rng(seed)) for seed in range(300)]
    assert 0.05 < sum(d == NO_DAMAGE for d in draws) / len(draws) < 0.15
    crfs = [d.crf for d in draws if d.crf is not None]
    assert min(crfs) <= 25
    assert max(crfs) >= 38
    assert any(d.scale < 1 for d in draws)
    assert any(d.spread > 0 for d in draws)


def test_noiseless_draws_are_encoded_without_sensor_noise_and_zero_keeps_the_old_draws() -> None:
    model = CameraModel(noiseless=0.5)
    draws = [model.draw(np.random.default_rng(seed)) for seed in range(300)]
    damaged = [d for d in draws if d != NO_DAMAGE]
    quiet = [d for d in damaged if d.read_sigma == 0 and d.shot == 0]
    assert 0.35 < len(quiet) / len(damaged) < 0.65
    assert all(d.crf is not None and d.spread == 0 for d in quiet)
    # The share is drawn after everything else: a draw it leaves noisy is the draw made without it.
    before = [CameraModel().draw(np.random.default_rng(seed)) for seed in range(300)]
    assert all(d == b for d, b in zip(draws, before, strict=True) if d not in quiet)
    assert all(b.read_sigma > 0 for b in before if b != NO_DAMAGE)


def test_no_damage_leaves_the_clip_as_it_is() -> None:
    frames = clip()
    np.testing.assert_array_equal(damage(frames, NO_DAMAGE, np.random.default_rng(0)), frames)


@pytest.mark.parametrize("spread", [0.0, 1.0])
def test_the_noise_drawn_is_the_noise_measured_spread_or_not(spread: float) -> None:
    how = dataclasses.replace(NO_DAMAGE, read_sigma=12.0, spread=spread)
    noisy = damage(clip(1, 256, 256), how, np.random.default_rng(1))
    measured = noise_sigma(noisy[0])
    if spread == 0:
        assert measured == pytest.approx(12.0, rel=0.1)  # white: the estimator sees all of it
    else:
        assert measured < 12.0 * 0.7  # spread over neighbours: smoother, as demosaiced noise is


def test_compression_quantises_more_at_a_higher_crf_and_keeps_every_frame() -> None:
    frames = clip()
    noisy = dataclasses.replace(NO_DAMAGE, read_sigma=8.0, gop=25, bframes=2)
    rng = np.random.default_rng(2)
    low, high = (damage(frames, dataclasses.replace(noisy, crf=c), rng) for c in (23, 40))
    assert low.shape == high.shape == frames.shape
    assert psnr(low, frames) > psnr(high, frames)


def test_a_clip_the_encoder_cannot_take_is_refused_naming_the_fix() -> None:
    how = CameraDamage(0.0, 1.0, 5.0, 0.0, 0.0, 30, 25, 0)
    with pytest.raises(ConfigError, match="even sides"):
        damage(clip(2, 63, 96), how, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="uint8 RGB clip"):
        damage(clip()[..., 0], how, np.random.default_rng(0))
