"""The one place where a batch of hyperframes is rearranged into the axis order a model takes.

Batches travel as (B, T, C, H, W) RGB. Keeping the T/C swap, the channel stacking and the colour order
here, and nowhere else, means a model exported as NCTHW, one exported as NTCHW and a channel-stacked 2D
network see the same frames in the same slots; a second hand-written transpose elsewhere is how the
two axes end up silently swapped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, assert_never

import numpy as np

from streamer.backend.base import ChannelOrder, Layout
from streamer.errors import FrameError

if TYPE_CHECKING:  # the graph forms need onnx, which only the GPU image and export install
    from onnx import NodeProto, TensorProto

__all__ = ["from_model_channels", "from_model_nodes", "to_model_layout", "to_model_nodes"]

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


def _bgr(name: str, out: str) -> tuple[list[NodeProto], list[TensorProto]]:
    from onnx import helper, numpy_helper

    index = f"{out}_bgr_index"
    return [helper.make_node("Gather", [name, index], [out], axis=1)], [
        numpy_helper.from_array(np.array([2, 1, 0], np.int64), index)
    ]


def to_model_nodes(
    frames: Sequence[str], layout: Layout, order: ChannelOrder, out: str
) -> tuple[list[NodeProto], list[TensorProto]]:
    """The same rearrangement as :func:`to_model_layout`, as graph nodes (and their constants): the T
    frames ``frames``, each (1, C, H, W) RGB in slot order as they lie in device memory (made so once,
    as each frame goes up), into the window ``out`` in ``layout``'s axis order and ``order``'s channels.
    For models run on frames kept on the device (``streamer.backend.device_frames``)."""
    from onnx import helper, numpy_helper

    t = len(frames)
    if layout is Layout.NCHW and t != 1:
        raise FrameError(f"a per-frame (NCHW) model takes windows of one frame; got T={t}")
    nodes: list[NodeProto] = []
    consts: list[TensorProto] = []
    chw = list(frames)
    if order is ChannelOrder.BGR:
        chw = [f"{out}_{k}_bgr" for k in range(t)]
        for frame, bgr in zip(frames, chw, strict=True):
            made, more = _bgr(frame, bgr)
            nodes += made
            consts += more
    if layout is Layout.NCHW:
        nodes.append(helper.make_node("Identity", [chw[0]], [out]))
    elif layout is Layout.STACKED:
        nodes.append(helper.make_node("Concat", chw, [out], axis=1))
    else:
        axis = 1 if layout is Layout.NTCHW else 2  # (1, T, C, H, W) or (1, C, T, H, W)
        axes = f"{out}_axes"
        consts.append(numpy_helper.from_array(np.array([axis], np.int64), axes))
        slots = [f"{name}_slot" for name in chw]
        nodes += [
            helper.make_node("Unsqueeze", [name, axes], [slot]) for name, slot in zip(chw, slots, strict=True)
        ]
        nodes.append(helper.make_node("Concat", slots, [out], axis=axis))
    return nodes, consts


def from_model_nodes(
    y: str, order: ChannelOrder, out: str, planar: bool = False
) -> tuple[list[NodeProto], list[TensorProto]]:
    """A model's (1, 3, H, W) output ``y`` as the (1, H, W, 3) RGB frame ``out``, as graph nodes; with
    ``planar``, as (1, 3, H, W) RGB."""
    from onnx import helper

    nodes: list[NodeProto] = []
    consts: list[TensorProto] = []
    if order is ChannelOrder.BGR:
        nodes, consts = _bgr(y, f"{out}_rgb")
        y = f"{out}_rgb"
    if planar:
        nodes.append(helper.make_node("Identity", [y], [out]))
    else:
        nodes.append(helper.make_node("Transpose", [y], [out], perm=[0, 2, 3, 1]))
    return nodes, consts
