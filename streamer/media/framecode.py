"""A frame counter drawn into the pixels, so a frame can be recognised after a lossy round trip.

Tests and the latency benchmark stamp each frame's number into its top-left corner before it is
encoded, sent and enhanced, and read it back on the far side: order, loss and end-to-end latency are
then measured on what really came out, not on timestamps a server may rewrite.

The code is a grid of 8 x 4 cells of 16 x 16 pixels (128 x 64 pixels), each black or white: a fixed
guard pattern (4 cells), the value (24 bits, most significant first) and a 4-bit check (the XOR of the
value's six nibbles). Cells cover whole H.264 macroblocks and 4:2:0 chroma blocks, and are read from
their 8 x 8 center, so block coding at moderate bitrates, chroma subsampling and a denoiser that smooths
edges do not flip them. A frame without a code, or a damaged one, reads as None rather than as a
wrong number.
"""

from __future__ import annotations

import av
import numpy as np

from streamer.errors import FrameError
from streamer.frame import Pixels

__all__ = ["BITS", "CELL", "COLUMNS", "MAX_VALUE", "ROWS", "read", "read_frame", "stamp"]

CELL = 16
"""Side of one cell in pixels: one H.264 macroblock."""
COLUMNS, ROWS = 8, 4
BITS = 24
MAX_VALUE = (1 << BITS) - 1
_GUARD = (1, 0, 1, 0)
_CHECK_BITS = 4
_MARGIN = CELL // 4
"""Pixels skipped at each side of a cell when reading, where ringing and smoothing land."""
_WHITE, _BLACK = 170, 85
"""Guard cells must read brighter / darker than these, else the frame carries no code."""


def _check(value: int) -> int:
    nibbles = 0
    for shift in range(0, BITS, 4):
        nibbles ^= (value >> shift) & 0xF
    return nibbles


def _bits(value: int) -> list[int]:
    data = [(value >> (BITS - 1 - i)) & 1 for i in range(BITS)]
    check = [(_check(value) >> (_CHECK_BITS - 1 - i)) & 1 for i in range(_CHECK_BITS)]
    return [*_GUARD, *data, *check]


def _fits(pixels: Pixels) -> bool:
    return pixels.ndim in (2, 3) and pixels.shape[0] >= ROWS * CELL and pixels.shape[1] >= COLUMNS * CELL


def stamp(pixels: Pixels, value: int) -> Pixels:
    """A copy of ``pixels`` (H, W, 3 uint8) with ``value`` drawn in its top-left 128 x 64 pixels."""
    if not 0 <= value <= MAX_VALUE:
        raise FrameError(f"frame code {value} does not fit in {BITS} bits; stamp values 0..{MAX_VALUE}")
    if not _fits(pixels) or pixels.shape[2] != 3 or pixels.dtype != np.uint8:
        raise FrameError(
            f"cannot stamp a frame code into pixels of shape {pixels.shape} {pixels.dtype}: it needs "
            f"(H, W, 3) uint8 of at least {COLUMNS * CELL}x{ROWS * CELL}"
        )
    out = pixels.copy()
    for i, bit in enumerate(_bits(value)):
        row, col = divmod(i, COLUMNS)
        out[row * CELL : (row + 1) * CELL, col * CELL : (col + 1) * CELL] = 255 if bit else 0
    return out


def read(pixels: Pixels) -> int | None:
    """The value :func:`stamp` drew, or None when the guard or the check does not match; ``pixels``
    are (H, W, 3) RGB or (H, W) luma."""
    if not _fits(pixels):
        return None
    corner = pixels[: ROWS * CELL, : COLUMNS * CELL].astype(np.float32)
    luma = corner.mean(axis=2) if corner.ndim == 3 else corner
    cells = luma.reshape(ROWS, CELL, COLUMNS, CELL)[:, _MARGIN:-_MARGIN, :, _MARGIN:-_MARGIN]
    levels = cells.mean(axis=(1, 3)).reshape(-1)
    for level, bit in zip(levels[: len(_GUARD)], _GUARD, strict=True):
        if (bit and level <= _WHITE) or (not bit and level >= _BLACK):
            return None
    bits = [int(level > 127.5) for level in levels[len(_GUARD) :]]
    value = int("".join(map(str, bits[:BITS])), 2)
    check = int("".join(map(str, bits[BITS:])), 2)
    return value if check == _check(value) else None


def read_frame(frame: av.VideoFrame) -> int | None:
    """:func:`read` on a decoded frame: a 4:2:0 frame's code read from its luma plane where it lies,
    so that a reader spends no colour conversion of the whole picture (any other format is converted)."""
    if frame.format.name not in ("yuv420p", "yuvj420p", "nv12"):
        return read(np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8))
    plane = frame.planes[0]
    rows = min(plane.height, ROWS * CELL)
    luma = np.frombuffer(memoryview(plane), np.uint8)[: rows * plane.line_size]
    return read(luma.reshape(rows, plane.line_size)[:, : plane.width])
