"""Luma, read one way everywhere the runtime looks at brightness (the motion gate, scene cuts, the noise
estimate): BT.601's weights on RGB, and a decoder's Y plane as it is, stretched from tv range (16..235)
to 0..255 so both read on one scale. Colour conversions for encoders follow each stream's own matrix
(``streamer.media.colour``); these readings only compare frames with frames of the same stream."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["WEIGHTS", "WEIGHTS_256", "full_scale", "luma_float", "luma_int"]

WEIGHTS = (0.299, 0.587, 0.114)
"""BT.601's luma weights of R, G and B."""

WEIGHTS_256 = (77, 150, 29)
"""The same scaled by 256 (they sum to 256): Y = (77 R + 150 G + 29 B) >> 8."""

_WEIGHTS = np.array(WEIGHTS, dtype=np.float32)


def luma_int(sample: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint16]:
    """Y of (..., 3) RGB samples in whole levels, channel by channel: numpy's integer matmul
    (``sample @ weights``) has no fast kernel. The sum is at most 255 * 256, so uint16 holds it."""
    r, g, b = (sample[..., k].astype(np.uint16) for k in range(3))
    r *= WEIGHTS_256[0]
    g *= WEIGHTS_256[1]
    b *= WEIGHTS_256[2]
    r += g
    r += b
    r >>= 8
    return r


def luma_float(rgb: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Y of (..., 3) RGB values, float."""
    out: npt.NDArray[np.float32] = rgb @ _WEIGHTS
    return out


def full_scale(y: npt.NDArray[np.float32], limited: bool) -> npt.NDArray[np.float32]:
    """A Y plane's values (float, changed in place) on the 0..255 scale luma from RGB reads: tv range
    stretched, full range as it is."""
    if limited:
        y -= 16.0
        y *= 255.0 / 219.0
    return y
