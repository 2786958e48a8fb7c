"""A float model's normalisation folded into its graph: uint8 pixels in, uint8 pixels out.

The runtime feeds a float model a float32 window it builds on the host (a T-frame window at 1080p is
124 MB per output frame) and rounds its float output back to levels there. A model whose graph casts
and scales its uint8 input, and scales, clips, rounds and casts its output, takes the window as the
frames' own bytes and returns the frame's: a quarter of the transfer and none of the host's float work,
which on a GPU's host path is most of a frame's time (`streamer bench gpu` compares the two). The
runtime reads uint8 tensors as such a contract, so a folded file needs nothing else declared. Graph
surgery with onnx alone.

And ``fold_constants``: the parts of a graph that depend only on its weights, computed once before a
conversion to float16 (whose CPU kernels onnxruntime lacks for some of them, so it would run them on
every call instead).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from streamer.errors import ModelError

__all__ = ["fold_constants", "fold_uint8_io"]


def fold_uint8_io(model: onnx.ModelProto, value_range: tuple[float, float]) -> onnx.ModelProto:
    """``model`` (float32 first input and output, pixels 0..255 mapped to ``value_range``) taking the
    uint8 window and returning the uint8 frame; its other inputs and outputs (recurrent state) as they
    were. The model is changed in place and returned."""
    graph = model.graph
    given, made = graph.input[0], graph.output[0]
    for tensor, role in ((given, "input"), (made, "output")):
        if tensor.type.tensor_type.elem_type != TensorProto.FLOAT:
            raise ModelError(
                f"cannot fold uint8 in and out into {graph.name or 'the model'}: its first {role} "
                f"{tensor.name!r} is not float32; it takes or gives uint8 already"
            )
    lo, hi = value_range
    consts = {
        "u8_scale_in": (hi - lo) / 255.0,
        "u8_offset": lo,
        "u8_scale_out": 255.0 / (hi - lo),
        "u8_min": 0.0,
        "u8_max": 255.0,
    }
    graph.initializer.extend(numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items())
    source, target = f"{given.name}_uint8", f"{made.name}_uint8"
    head = [
        helper.make_node("Cast", [source], ["u8_cast"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["u8_cast", "u8_scale_in"], ["u8_scaled"]),
        helper.make_node("Add", ["u8_scaled", "u8_offset"], [given.name]),
    ]
    tail = [
        helper.make_node("Sub", [made.name, "u8_offset"], ["u8_shifted"]),
        helper.make_node("Mul", ["u8_shifted", "u8_scale_out"], ["u8_levels"]),
        helper.make_node("Clip", ["u8_levels", "u8_min", "u8_max"], ["u8_clipped"]),
        helper.make_node("Round", ["u8_clipped"], ["u8_rounded"]),
        helper.make_node("Cast", ["u8_rounded"], [target], to=TensorProto.UINT8),
    ]
    nodes = [*head, *graph.node, *tail]
    del graph.node[:]
    graph.node.extend(nodes)
    inlet, outlet = onnx.ValueInfoProto(), onnx.ValueInfoProto()
    inlet.CopyFrom(given)
    outlet.CopyFrom(made)
    inlet.name, outlet.name = source, target
    inlet.type.tensor_type.elem_type = outlet.type.tensor_type.elem_type = TensorProto.UINT8
    graph.input.remove(given)
    graph.input.insert(0, inlet)
    graph.output.remove(made)
    graph.output.insert(0, outlet)
    return model


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every node whose inputs are all weights replaced by its result (a conv3d's
    composed entry kernel, its centred bias), by onnxruntime's basic optimisations (constant folding,
    and fusions into standard operators, for any provider); the metadata kept. float16 conversion comes
    after: onnxruntime has no float16 CPU kernel for Einsum, ReduceSum or Mul, so in a converted file it
    cannot fold them at load and a GPU runs them on every call."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "folded.onnx"
        options.optimized_model_filepath = str(path)
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        folded = onnx.load(str(path))
    del folded.metadata_props[:]
    folded.metadata_props.extend(model.metadata_props)
    return folded
