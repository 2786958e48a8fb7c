"""Scales frames up for a super-resolution model's stream: its output is larger than its input, and a
frame that leaves unenhanced (a gate skip, the latency budget) must match the size the sink was
opened for. swscale does it in C, outside the interpreter lock."""

from __future__ import annotations

import numpy as np

from streamer.errors import FrameError
from streamer.frame import Pixels
from streamer.media.planes import convert, rgb_frame

__all__ = ["upscale"]


def upscale(pixels: Pixels, factor: int) -> Pixels:
    """(H, W, 3) uint8 RGB -> (H * factor, W * factor, 3), bicubic."""
    if factor < 1 or pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.dtype != np.uint8:
        raise FrameError(
            f"upscale takes (H, W, 3) uint8 RGB frames and a factor >= 1; got {pixels.shape} "
            f"{pixels.dtype} and {factor}"
        )
    if factor == 1:
        return pixels
    h, w = pixels.shape[:2]
    scaled = convert(rgb_frame(pixels), width=w * factor, height=h * factor, interpolation="BICUBIC")
    out: Pixels = np.ascontiguousarray(scaled.to_ndarray(), dtype=np.uint8)
    return out
