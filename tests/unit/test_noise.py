"""The noise estimate (``streamer.core.noise``) on frames of known noise."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.core.noise import NoiseEstimator, noise_sigma
from streamer.errors import ConfigError


def scene(h: int = 180, w: int = 320) -> np.ndarray:
    """A clean frame with smooth structure and a few hard edges, as a camera's picture has."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = 110 + 50 * np.sin(x / 17) * np.cos(y / 23) + 0.2 * x
    base[:, w // 2 :] += 30  # an edge, which the estimator must not take for noise
    return np.repeat(base[..., None], 3, axis=2)


def noisy(sigma: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(scene() + rng.normal(0.0, sigma, scene().shape)), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("sigma", [5.0, 10.0, 25.0])
def test_per_channel_gaussian_noise_is_measured_within_a_tenth(sigma: float) -> None:
    assert noise_sigma(noisy(sigma)) == pytest.approx(sigma, rel=0.1)


def test_a_clean_picture_with_edges_measures_almost_nothing() -> None:
    assert noise_sigma(noisy(0.0)) < 1.0


def test_the_running_estimate_is_the_median_of_one_estimate_per_period() -> None:
    estimator = NoiseEstimator(every_s=1.0, window=3)
    assert estimator.sigma is None
    frames = [(noisy(10.0, 1), 0.0), (noisy(40.0, 2), 0.5), (noisy(10.0, 3), 1.0), (noisy(60.0, 4), 2.0)]
    for pixels, now in frames:
        estimator.observe(pixels, now)
    # 0.0, 1.0 and 2.0 were measured (10, 10, 60); 0.5 came too soon: the median shrugs off the 60
    assert estimator.sigma == pytest.approx(10.0, rel=0.1)
    assert estimator.due(0.2)  # media time went back (a restarted source): measure again


def test_bad_settings_and_tiny_frames_are_refused() -> None:
    with pytest.raises(ConfigError, match="every_s > 0"):
        NoiseEstimator(every_s=0.0)
    with pytest.raises(ConfigError, match="at least 3x3"):
        noise_sigma(np.zeros((2, 8, 3), np.uint8))
