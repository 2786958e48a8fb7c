"""Small real frames for unit tests of the pure core."""

from __future__ import annotations

from fractions import Fraction
from types import EllipsisType

import numpy as np

from streamer.frame import Frame

TIME_BASE = Fraction(1, 30)


def make_frame(
    index: int,
    *,
    value: int = 0,
    size: tuple[int, int] = (8, 8),
    pts: int | EllipsisType | None = ...,
    stream_id: str = "0",
    discontinuity: bool = False,
    pixels: np.ndarray | None = None,
) -> Frame:
    """Frame ``index`` with PTS = index unless given, uniform ``value`` unless ``pixels`` is given."""
    if pixels is None:
        pixels = np.full((*size, 3), value, dtype=np.uint8)
    return Frame(
        picture=pixels,
        index=index,
        pts=index if pts is ... else pts,
        time_base=TIME_BASE,
        arrival=float(index),
        stream_id=stream_id,
        discontinuity=discontinuity,
    )
