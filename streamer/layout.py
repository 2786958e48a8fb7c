"""The one place where a batch of hyperframes is rearranged into the axis order a model takes.

Batches travel as (B, T, C, H, W) RGB. Keeping the T/C swap, the channel stacking and the colour order
here, and nowhere else, means a model exported as NCTHW, one exported as NTCHW and a channel-stacked 2D
network see the same frames in the same slots; a second hand-written transpose elsewhere is how the
two axes end up silently swapped.
"""

from __future__ import annotations

from typing import Any, TypeVar, assert_never

import numpy as np

from streamer.backend.base import ChannelOrder, Layout
from streamer.errors import FrameError

__all__ = ["from_model_channels", "to_model_layout"]

_S = TypeVar("_S", bound=np.generic)


def to_model_layout(
    batch: np.ndarray[Any, np.dtype[_S]], layout: Layout, order: ChannelOrder = ChannelOrder.RGB
) -> np.ndarray[Any, np.dtype[_S]]:
    """A view of a (B, T, C, H, W) RGB batch in ``layout``'s axis order and ``order``'s channels; it
    copies nothing but a stacked BGR batch (a reversed channel axis cannot be merged with T in a view).

    The view of an NCTHW or BGR batch is not C-contiguous, so the caller's dtype conversion (or an
    explicit contiguous copy) is the one copy.
    """
    if batch.ndim != 5:
        raise FrameError(
            f"a hyperframe batch has shape (B, T, C, H, W); got {batch.ndim} axes, shape {batch.shape}"
        )
    if order is ChannelOrder.BGR:
        batch = batch[:, :, ::-1]
    b, t, c, h, w = batch.shape
    if layout is Layout.NTCHW:
        return batch
    if layout is Layout.NCTHW:
        return batch.transpose(0, 2, 1, 3, 4)
    if layout is Layout.STACKED:
        return batch.reshape(b, t * c, h, w)
    if layout is Layout.NCHW:
        if t != 1:
            raise FrameError(f"a per-frame (NCHW) model takes windows of one frame; got T={t}")
        return batch[:, 0]
    assert_never(layout)


def from_model_channels(
    out: np.ndarray[Any, np.dtype[_S]], order: ChannelOrder
) -> np.ndarray[Any, np.dtype[_S]]:
    """A model's (B, 3, H, W) output as RGB: a view."""
    return out[:, ::-1] if order is ChannelOrder.BGR else out
