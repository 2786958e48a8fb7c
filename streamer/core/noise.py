"""How noisy a stream is: a running estimate of its noise sigma, in 0..255 levels.

Operators ask "does this camera need enhancing, and how hard?"; a model with a strength input needs
the same number. Immerkaer's estimator (J. Immerkaer, "Fast Noise Variance Estimation", CVIU 64(2),
1996) convolves luma with the Laplacian difference mask [[1,-2,1],[-2,4,-2],[1,-2,1]], which cancels
smooth structure and keeps the noise: white Gaussian noise of sigma s gives a response of standard
deviation 6 s (the mask's weights squared sum to 36), so a mean absolute response of 6 s sqrt(2 / pi),
and ``sigma = sqrt(pi / 2) / 6 * mean(|response|)``.
Edges respond too, so the strongest-gradient tenth of the pixels is left out (the paper's refinement),
and each estimate takes a centred crop of at most :data:`CROP` pixels a side of full-resolution luma
(downscaling would average the noise away). One estimate per ``every_s`` of media time, the median of
the last ``window`` reported, so a moment of motion or a scene change does not swing it. The figure is
given in the units of ``source.noise_sigma`` and the quality bench: the sigma of Gaussian noise drawn
independently in R, G and B that would give this much luma noise (luma's is 0.67 of it).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from streamer.core.luma import WEIGHTS, full_scale, luma_float
from streamer.errors import ConfigError
from streamer.frame import Picture, Yuv420

__all__ = ["CROP", "NoiseEstimator", "noise_sigma"]

CROP = 256
"""Side of the centred crop each estimate reads: an estimate costs the same small numpy time whatever
the frame's size."""
_EDGE_SHARE = 0.1
"""The share of pixels with the strongest gradient left out: edges, not noise."""
_LUMA_GAIN = float(np.sqrt(np.sum(np.square(WEIGHTS))))
"""How much of independent per-channel noise's sigma survives in luma."""


def noise_sigma(picture: Picture) -> float:
    """One frame's noise sigma estimate, as per-channel Gaussian noise (0..255 levels); 4:2:0 planes
    are read from their Y plane (tv range stretched to 0..255), not converted."""
    image = picture.y if isinstance(picture, Yuv420) else picture
    h, w = image.shape[:2]
    if h < 3 or w < 3:
        raise ConfigError(f"a noise estimate needs a frame of at least 3x3 pixels, got {w}x{h}")
    top, left = max(0, (h - CROP) // 2), max(0, (w - CROP) // 2)
    crop = image[top : top + CROP, left : left + CROP].astype(np.float32)
    luma = full_scale(crop, picture.colour.limited) if isinstance(picture, Yuv420) else luma_float(crop)
    c = luma[1:-1, 1:-1]
    n, s = luma[:-2, 1:-1], luma[2:, 1:-1]
    west, east = luma[1:-1, :-2], luma[1:-1, 2:]
    corners = luma[:-2, :-2] + luma[:-2, 2:] + luma[2:, :-2] + luma[2:, 2:]
    response = np.abs(corners - 2 * (n + s + west + east) + 4 * c)
    gradient = np.abs(east - west) + np.abs(s - n)
    keep = gradient <= np.quantile(gradient, 1.0 - _EDGE_SHARE)
    return float(math.sqrt(math.pi / 2) / 6 * response[keep].mean() / _LUMA_GAIN)


class NoiseEstimator:
    """The running estimate for one stream; pure, fed frames by the pipeline."""

    def __init__(self, every_s: float = 1.0, window: int = 15) -> None:
        if every_s <= 0 or window < 1:
            raise ConfigError(
                f"a noise estimator needs every_s > 0 and window >= 1; got every_s={every_s}, window={window}"
            )
        self.every_s = every_s
        self._estimates: deque[float] = deque(maxlen=window)
        self._last: float | None = None

    def due(self, now: float) -> bool:
        """Whether the frame at media time ``now`` (seconds) should be measured."""
        return self._last is None or now - self._last >= self.every_s or now < self._last

    def observe(self, picture: Picture, now: float) -> None:
        """Measures ``picture`` if an estimate is due at ``now``."""
        if not self.due(now):
            return
        self._last = now
        self._estimates.append(noise_sigma(picture))

    @property
    def sigma(self) -> float | None:
        """The median of the recent estimates; None before the first."""
        if not self._estimates:
            return None
        return float(np.median(self._estimates))
