"""The one place where a batch of hyperframes is rearranged into the axis order a model takes.

Batches travel as (B, T, C, H, W). Keeping the T/C swap here, and nowhere else, means a model exported
as NCTHW and one exported as NTCHW see the same frames in the same slots; a second hand-written
transpose elsewhere is how the two axes end up silently swapped.
"""

from __future__ import annotations

from typing import Any, TypeVar, assert_never

import numpy as np

from streamer.backend.base import Layout
from streamer.errors import FrameError

__all__ = ["to_model_layout"]

_S = TypeVar("_S", bound=np.generic)


def to_model_layout(batch: np.ndarray[Any, np.dtype[_S]], layout: Layout) -> np.ndarray[Any, np.dtype[_S]]:
    """A view of a (B, T, C, H, W) batch in ``layout``'s axis order; it copies nothing.

    The view of an NCTHW batch is not C-contiguous, so the caller's dtype conversion doubles as the
    copy that makes it contiguous.
    """
    if batch.ndim != 5:
        raise FrameError(
            f"a hyperframe batch has shape (B, T, C, H, W); got {batch.ndim} axes, shape {batch.shape}"
        )
    if layout is Layout.NTCHW:
        return batch
    if layout is Layout.NCTHW:
        return batch.transpose(0, 2, 1, 3, 4)
    assert_never(layout)
