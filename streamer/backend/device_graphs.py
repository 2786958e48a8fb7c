"""The graphs of frames kept on the device (``streamer.backend.device_frames``), made with the onnx package.

Two graphs: the *upload* graph (:func:`upload_graph`) makes each frame that goes up, as its (1, H, W, 3)
RGB bytes or as a decoder's 4:2:0 planes, the (1, 3, H, W) uint8 RGB every window graph takes (a
transpose, or the conversion from planes); the *window* graph (:func:`window_graph`) is the model with
its window made on the device: T such frames per window go in, arranged as the model wants
(``streamer.contract.layout.to_model_nodes``, the layout's graph form) and scaled, and each window's
uint8 frame comes out, as RGB or as 4:2:0 planes. A window graph of several windows concatenates each
slot's frames along the batch axis first and gives each window its own outputs (and a recurrent model's
state its own inputs and outputs); a graph's inputs are fixed, so there is one per batch size
(:func:`batch_size`). The names of the graphs' inputs and outputs are made here, so what binds them
binds what the graph declares.

The onnx package (in the CUDA image; the CPU image, which has no use for this path, leaves it out) is
imported only here, and only when a graph is made.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from streamer.backend.base import STRENGTH, ModelInfo
from streamer.contract import NAMESPACE
from streamer.contract.layout import from_model_nodes, to_model_nodes
from streamer.errors import ConfigError, ModelError
from streamer.frame import Colour
from streamer.media.yuv import i420_nodes, rgb_nodes

if TYPE_CHECKING:
    import onnx

__all__ = [
    "HOST_RGB",
    "UP_RGB",
    "UP_UV",
    "UP_Y",
    "batch_size",
    "frame_input",
    "frame_output",
    "graph_tools_missing",
    "read_model",
    "state_name",
    "upload_graph",
    "window_graph",
    "yuv_outputs",
]

_PIXELS = NAMESPACE + "pixels"
_Y = NAMESPACE + "y"
_UV = NAMESPACE + "uv"
_FRAME = NAMESPACE + "frame_{}"
_ROW_FRAME = NAMESPACE + "window_{}.frame_{}"
_SLOT = NAMESPACE + "slot"
_UPLOAD_OPSET = 17
HOST_RGB = NAMESPACE + "host_rgb"
"""The upload graph's input of a frame that goes up as RGB: (1, H, W, 3) uint8."""
UP_Y, UP_UV = NAMESPACE + "up.y", NAMESPACE + "up.uv"
"""The upload graph's inputs of a frame that goes up as 4:2:0 planes: (1, 1, H, W) Y and (1, 2, H/2,
W/2) U and V, uint8."""
UP_RGB = NAMESPACE + "up.rgb"
"""The upload graph's output: the (1, 3, H, W) uint8 RGB frame every window graph takes."""


def graph_tools_missing() -> bool:
    """Whether the onnx package, which makes the window graph, is absent (the CPU image)."""
    return importlib.util.find_spec("onnx") is None


def frame_input(slot: int, row: int, batch: int) -> str:
    """The window graph's input for the frame in ``slot`` of the window in ``row`` of a batch."""
    return _FRAME.format(slot) if batch == 1 else _ROW_FRAME.format(row, slot)


def frame_output(row: int, batch: int) -> str:
    """The window graph's output for the window in ``row`` of a batch."""
    return _PIXELS if batch == 1 else f"{_PIXELS}_{row}"


def yuv_outputs(row: int, batch: int) -> tuple[str, str]:
    """A 4:2:0 window graph's outputs for the window in ``row``: its Y plane and its U and V planes."""
    suffix = "" if batch == 1 else f"_{row}"
    return f"{_Y}{suffix}", f"{_UV}{suffix}"


def state_name(name: str, row: int, batch: int) -> str:
    """A recurrent state's input or output for the window in ``row``: its own name in a graph of one."""
    return name if batch == 1 else f"{name}.row_{row}"


def _per_row(tensors: Any, name: str, names: Sequence[str]) -> None:
    """Replaces the graph input or output ``name`` (batch first) with one of batch 1 per row."""
    from onnx import helper

    whole = next(t for t in tensors if t.name == name)
    dims = [d.dim_param or d.dim_value for d in whole.type.tensor_type.shape.dim]
    kind = whole.type.tensor_type.elem_type
    tensors.remove(whole)
    tensors.extend(helper.make_tensor_value_info(n, kind, [1, *dims[1:]]) for n in names)


def batch_size(rows: int) -> int:
    """The size of the graph that runs ``rows`` windows: the power of two at or above it."""
    return 1 << (rows - 1).bit_length()


def window_graph(
    model: onnx.ModelProto,
    info: ModelInfo,
    batch: int = 1,
    yuv: Colour | None = None,
) -> onnx.ModelProto:
    """``model`` taking ``batch`` windows as T frames each (:func:`frame_input`), each (1, 3, H, W)
    uint8 RGB as :func:`upload_graph` makes it, and giving each window's (1, H*scale, W*scale, 3)
    uint8 RGB frame (:func:`frame_output`), each its own output so that each comes down into a buffer
    of its own; normalisation folded in where the model takes floats. A recurrent model's state inputs
    and outputs are per window too (:func:`state_name`). With ``yuv``, each window's frame comes out as
    4:2:0 planes in that matrix and range instead (:func:`yuv_outputs`: (1, 1, H', W') and (1, 2,
    H'/2, W'/2) uint8; H' and W' must be even). Changed in place and returned."""
    from onnx import TensorProto, helper

    from streamer.backend.fold import fold_uint8_io

    if batch < 1:
        raise ConfigError(f"a window graph takes at least one window; got a batch of {batch}")

    graph = model.graph
    if info.uint8_input != info.uint8_output:
        raise ModelError(
            f"model {info.name} takes {'uint8' if info.uint8_input else 'float'} and gives "
            f"{'uint8' if info.uint8_output else 'float'}: frames kept on the device need both alike"
        )
    if not info.uint8_input:
        fold_uint8_io(model, info.value_range)
    # The frames input: the first one that is neither the strength nor a recurrent state (those stay
    # inputs as they are, and the state's outputs outputs).
    kept = {STRENGTH, *(s.input for s in info.state)}
    window = next(i for i in graph.input if i.name not in kept)
    made = graph.output[0]
    inputs = [frame_input(k, b, batch) for b in range(batch) for k in range(info.t)]
    rows: list[onnx.NodeProto] = []
    slots = [_FRAME.format(k) for k in range(info.t)]
    if batch > 1:  # each slot's frames, one per window, stacked along the batch axis
        slots = [f"{_SLOT}_{k}" for k in range(info.t)]
        rows = [
            helper.make_node("Concat", [frame_input(k, b, batch) for b in range(batch)], [slot], axis=0)
            for k, slot in enumerate(slots)
        ]
    head, head_consts = to_model_nodes(slots, info.layout, info.channel_order, window.name)
    tail, tail_consts = from_model_nodes(made.name, info.channel_order, _PIXELS, planar=yuv is not None)
    if yuv is None:
        outputs = [frame_output(b, batch) for b in range(batch)]
        made_as = {_PIXELS: outputs}
        shapes: list[list[str | int]] = [[1, "OH", "OW", 3]] * batch
    else:
        nodes, consts = i420_nodes(_PIXELS, yuv, _Y, _UV)
        tail += nodes
        tail_consts += consts
        rows_out = [yuv_outputs(b, batch) for b in range(batch)]
        made_as = {_Y: [y for y, _ in rows_out], _UV: [uv for _, uv in rows_out]}
        outputs = [name for pair in rows_out for name in pair]
        shapes = [[1, 1, "OH", "OW"], [1, 2, "OH2", "OW2"]] * batch
    if batch > 1:  # one output per window, and a recurrent model's state in and out per window
        _split_rows(model, info, batch, made_as, rows, (tail, tail_consts))
    given = [helper.make_tensor_value_info(name, TensorProto.UINT8, [1, 3, "H", "W"]) for name in inputs]
    nodes = [*rows, *head, *graph.node, *tail]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend([*head_consts, *tail_consts])
    graph.input.remove(window)
    for k, value in enumerate(given):  # the frames first, then the strength where there is one
        graph.input.insert(k, value)
    graph.output.remove(made)
    for k, (name, shape) in enumerate(zip(outputs, shapes, strict=True)):
        graph.output.insert(k, helper.make_tensor_value_info(name, TensorProto.UINT8, shape))
    return model


def _split_rows(
    model: onnx.ModelProto,
    info: ModelInfo,
    batch: int,
    made_as: Mapping[str, Sequence[str]],
    rows: list[onnx.NodeProto],
    after: tuple[list[onnx.NodeProto], list[onnx.TensorProto]],
) -> None:
    """The nodes of a window graph of ``batch`` windows that give each window its own outputs (each
    of ``made_as``' batched outputs split into its parts) and a recurrent model's state its own inputs
    and outputs: appended to ``rows`` (run before the model) and to the nodes and constants ``after``
    it, the graph's inputs and outputs replaced to match."""
    from onnx import helper, numpy_helper

    graph = model.graph
    tail, tail_consts = after
    ones = numpy_helper.from_array(np.ones(batch, np.int64), f"{_PIXELS}_rows")
    for whole, parts in made_as.items():
        tail.append(helper.make_node("Split", [whole, ones.name], parts, axis=0))
    tail_consts.append(ones)
    for spec in info.state:
        names = [state_name(spec.input, b, batch) for b in range(batch)]
        rows.append(helper.make_node("Concat", names, [spec.input], axis=0))
        _per_row(graph.input, spec.input, names)
        names = [state_name(spec.output, b, batch) for b in range(batch)]
        tail.append(helper.make_node("Split", [spec.output, ones.name], names, axis=0))
        _per_row(graph.output, spec.output, names)


def upload_graph(planes: Colour | None = None) -> onnx.ModelProto:
    """The graph that makes an uploaded frame what every window graph takes, (1, 3, H, W) uint8 RGB:
    from a (1, H, W, 3) RGB frame a transpose; from 4:2:0 planes in ``planes``' matrix and range,
    (1, 1, H, W) Y and (1, 2, H/2, W/2) U and V, the conversion (``streamer.media.yuv.rgb_nodes``)."""
    from onnx import TensorProto, helper

    if planes is None:
        nodes = [helper.make_node("Transpose", [HOST_RGB], [UP_RGB], perm=[0, 3, 1, 2])]
        consts: list[onnx.TensorProto] = []
        given = [helper.make_tensor_value_info(HOST_RGB, TensorProto.UINT8, [1, "H", "W", 3])]
    else:
        nodes, consts = rgb_nodes(UP_Y, UP_UV, planes, UP_RGB)
        given = [
            helper.make_tensor_value_info(UP_Y, TensorProto.UINT8, [1, 1, "H", "W"]),
            helper.make_tensor_value_info(UP_UV, TensorProto.UINT8, [1, 2, "H2", "W2"]),
        ]
    made = helper.make_tensor_value_info(UP_RGB, TensorProto.UINT8, [1, 3, "H", "W"])
    graph = helper.make_graph(nodes, NAMESPACE + "upload", given, [made], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _UPLOAD_OPSET)])
    model.ir_version = 8  # opset 17's, which every onnxruntime this runs on reads
    return model


def read_model(path: Path) -> onnx.ModelProto:
    """The model file at ``path``, read to make its window graphs."""
    import onnx

    try:
        return onnx.load(str(path))
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read {str(path)!r} to keep its frames on the device: {err}") from err
