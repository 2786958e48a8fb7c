"""Seeded sensor-like Gaussian noise, for demos and benchmarks that need a known clean picture."""

from __future__ import annotations

import numpy as np

from streamer.errors import ConfigError
from streamer.frame import Pixels

__all__ = ["GaussianNoise"]


class GaussianNoise:
    """Adds N(0, sigma) per pixel and channel (0..255 units), clipped; the same seed, the same noise."""

    def __init__(self, sigma: float, seed: int = 0) -> None:
        if not 0.0 <= sigma <= 255.0:
            raise ConfigError(f"noise_sigma is in pixel units 0..255, got {sigma}")
        self.sigma = sigma
        self._rng = np.random.default_rng(seed)

    def __call__(self, pixels: Pixels) -> Pixels:
        if self.sigma == 0:
            return pixels
        # In place on one float32 buffer: the random draw alone is already much of a frame's cost.
        noisy = self._rng.standard_normal(pixels.shape, dtype=np.float32)
        noisy *= np.float32(self.sigma)
        noisy += pixels
        np.clip(noisy, 0, 255, out=noisy)
        np.rint(noisy, out=noisy)
        return noisy.astype(np.uint8)
