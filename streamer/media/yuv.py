"""Between RGB and 4:2:0 YUV as graph nodes: the conversions around a model, made where it runs.

On a GPU the frames come down from the model; converting them to yuv420p on the host then costs a large share
of the host's time per frame beside libx264's (``streamer bench codecs`` times both). Done in the model's
graph, a frame comes down as its 4:2:0 planes, half the bytes of RGB, ready for the encoder. The nodes do what
swscale does for ``rgb24 -> yuv420p`` (within one level of its output, tested): each pixel's Y; for U and V,
each pair of pixels along a row averaged, then every two rows filtered 1-3-3-1 (its bilinear 2:1 filter around
chroma sited between the rows, which a plain 2x2 mean misses by several levels on a noisy frame). On the CPU
provider they cost several times what swscale does, so ``model.yuv420`` is on only for GPU providers by
default. The way in (:func:`rgb_nodes`) takes a decoder's planes as they are and makes the RGB a model takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from streamer.errors import ConfigError
from streamer.frame import Colour

if TYPE_CHECKING:
    from onnx import NodeProto, TensorProto

__all__ = ["KR_KB", "i420_nodes", "matrices", "rgb_nodes"]

KR_KB: dict[int, tuple[float, float]] = {
    1: (0.2126, 0.0722),  # BT.709
    4: (0.30, 0.11),  # FCC
    5: (0.299, 0.114),  # BT.470BG (BT.601)
    6: (0.299, 0.114),  # SMPTE 170M (BT.601)
    7: (0.212, 0.087),  # SMPTE 240M
    9: (0.2627, 0.0593),  # BT.2020 non-constant luminance
}
"""The red and blue luma weights of each AVColorSpace matrix ``streamer.media.colour`` applies."""


def matrices(colour: Colour) -> tuple[np.ndarray, np.ndarray, float]:
    """For a resolved ``colour``: the (3,) weights of R, G, B in Y, the (2, 3) weights in U and V, and
    Y's offset (16 in tv range, 0 in pc range; U and V are centred on 128 in both)."""
    if colour.matrix not in KR_KB or colour.range not in (1, 2):
        raise ConfigError(
            f"no RGB to YUV matrix for AVColorSpace {colour.matrix} and range {colour.range}; "
            "resolve the stream's colour first (streamer.media.colour.resolve)"
        )
    kr, kb = KR_KB[colour.matrix]
    kg = 1.0 - kr - kb
    tv = colour.limited
    luma, chroma = (219 / 255, 224 / 255) if tv else (1.0, 1.0)
    y = np.array([kr, kg, kb]) * luma
    u = np.array([-kr, -kg, 1.0 - kb]) / (2 * (1.0 - kb)) * chroma
    v = np.array([1.0 - kr, -kg, -kb]) / (2 * (1.0 - kr)) * chroma
    return y, np.stack([u, v]), 16.0 if tv else 0.0


def i420_nodes(
    rgb: str, colour: Colour, y_out: str, uv_out: str
) -> tuple[list[NodeProto], list[TensorProto]]:
    """Nodes from ``rgb``, (N, 3, H, W) uint8 RGB with H and W even, to ``y_out``, (N, 1, H, W) uint8,
    and ``uv_out``, (N, 2, H/2, W/2) uint8 (U then V: the order of their planes in an I420 buffer)."""
    from onnx import TensorProto, helper, numpy_helper

    y, uv, offset = matrices(colour)
    rows = np.array([1.0, 3.0, 3.0, 1.0]) / 8.0
    p = f"{y_out}_"
    consts = [
        numpy_helper.from_array(y.reshape(1, 3, 1, 1).astype(np.float32), f"{p}wy"),
        numpy_helper.from_array(np.array([offset], np.float32), f"{p}by"),
        # the 1-3-3-1 filter down the rows and the matrix in one convolution
        numpy_helper.from_array((uv[:, :, None] * rows).reshape(2, 3, 4, 1).astype(np.float32), f"{p}wuv"),
        numpy_helper.from_array(np.array([128.0, 128.0], np.float32), f"{p}buv"),
        numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 0, 1, 0], np.int64), f"{p}pads"),
        numpy_helper.from_array(np.array(0.0, np.float32), f"{p}lo"),
        numpy_helper.from_array(np.array(255.0, np.float32), f"{p}hi"),
    ]
    nodes = [
        helper.make_node("Cast", [rgb], [f"{p}rgb"], to=TensorProto.FLOAT),
        helper.make_node("Conv", [f"{p}rgb", f"{p}wy", f"{p}by"], [f"{p}y"]),
        helper.make_node("AveragePool", [f"{p}rgb"], [f"{p}pairs"], kernel_shape=[1, 2], strides=[1, 2]),
        helper.make_node("Pad", [f"{p}pairs", f"{p}pads"], [f"{p}edged"], mode="edge"),
        helper.make_node("Conv", [f"{p}edged", f"{p}wuv", f"{p}buv"], [f"{p}uv"], strides=[2, 1]),
    ]
    for made, out in ((f"{p}y", y_out), (f"{p}uv", uv_out)):
        nodes += [
            helper.make_node("Round", [made], [f"{made}_round"]),
            helper.make_node("Clip", [f"{made}_round", f"{p}lo", f"{p}hi"], [f"{made}_clip"]),
            helper.make_node("Cast", [f"{made}_clip"], [out], to=TensorProto.UINT8),
        ]
    return nodes, consts


def rgb_nodes(y: str, uv: str, colour: Colour, out: str) -> tuple[list[NodeProto], list[TensorProto]]:
    """Nodes from 4:2:0 planes in ``colour``, ``y`` (N, 1, H, W) and ``uv`` (N, 2, H/2, W/2) uint8, to
    ``out``, (N, 3, H, W) uint8 RGB, channels first as a model takes it (no transpose to make or undo):
    each chroma sample stands for its 2x2 block, and the matrix is
    inverted exactly (swscale's fixed-point tables read within 3 levels of it, under 1 on average,
    on random planes; tested)."""
    from onnx import TensorProto, helper, numpy_helper

    luma, chroma, offset = matrices(colour)
    to_rgb = np.linalg.inv(np.vstack([luma, chroma]))  # (Y - offset, U - 128, V - 128) -> RGB
    p = f"{out}_"
    consts = [
        numpy_helper.from_array(
            np.array([offset, 128.0, 128.0], np.float32).reshape(1, 3, 1, 1), f"{p}centre"
        ),
        numpy_helper.from_array(to_rgb.reshape(3, 3, 1, 1).astype(np.float32), f"{p}matrix"),
        numpy_helper.from_array(np.array([1.0, 1.0, 2.0, 2.0], np.float32), f"{p}scales"),
        numpy_helper.from_array(np.array(0.0, np.float32), f"{p}lo"),
        numpy_helper.from_array(np.array(255.0, np.float32), f"{p}hi"),
    ]
    nodes = [
        helper.make_node("Cast", [y], [f"{p}y"], to=TensorProto.FLOAT),
        helper.make_node("Cast", [uv], [f"{p}uv"], to=TensorProto.FLOAT),
        helper.make_node("Resize", [f"{p}uv", "", f"{p}scales"], [f"{p}uv_full"], mode="nearest"),
        helper.make_node("Concat", [f"{p}y", f"{p}uv_full"], [f"{p}yuv"], axis=1),
        helper.make_node("Sub", [f"{p}yuv", f"{p}centre"], [f"{p}centred"]),
        helper.make_node("Conv", [f"{p}centred", f"{p}matrix"], [f"{p}rgb"]),
        helper.make_node("Round", [f"{p}rgb"], [f"{p}round"]),
        helper.make_node("Clip", [f"{p}round", f"{p}lo", f"{p}hi"], [f"{p}clip"]),
        helper.make_node("Cast", [f"{p}clip"], [out], to=TensorProto.UINT8),
    ]
    return nodes, consts
