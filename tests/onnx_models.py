"""Small real ONNX models built with onnx.helper, for contract tests of the runtime."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from onnx import TensorProto, helper


def ema_model(path: Path, decay: float = 0.5) -> Path:
    """A recurrent T=1 model: h' = decay * h + (1 - decay) * frame, output h'. State: 3 channels, scale 1.

    From a zero state, frames of constant value v give v(1 - decay), then v(1 - decay^2), ...: exact
    values to check that the runtime carries the state and resets it.
    """
    frames = helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["B", 1, 3, "H", "W"])
    hidden = helper.make_tensor_value_info("h", TensorProto.FLOAT, ["B", 3, "H", "W"])
    nodes = [
        helper.make_node("Squeeze", ["frames", "axis"], ["frame"]),
        helper.make_node("Mul", ["h", "decay"], ["kept"]),
        helper.make_node("Mul", ["frame", "gain"], ["added"]),
        helper.make_node("Add", ["kept", "added"], ["h_next"]),
        helper.make_node("Identity", ["h_next"], ["enhanced"]),
    ]
    initializers = [
        helper.make_tensor("axis", TensorProto.INT64, [1], [1]),
        helper.make_tensor("decay", TensorProto.FLOAT, [], [decay]),
        helper.make_tensor("gain", TensorProto.FLOAT, [], [1.0 - decay]),
    ]
    outputs = [
        helper.make_tensor_value_info("enhanced", TensorProto.FLOAT, ["B", 3, "H", "W"]),
        helper.make_tensor_value_info("h_next", TensorProto.FLOAT, ["B", 3, "H", "W"]),
    ]
    graph = helper.make_graph(nodes, "ema", [frames, hidden], outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(
        model,
        {
            "streamer.name": "ema",
            "streamer.t": "1",
            "streamer.layout": "NTCHW",
            "streamer.output_position": "last",
            "streamer.value_range": "0,1",
            "streamer.state": json.dumps([{"input": "h", "output": "h_next", "channels": 3, "scale": 1}]),
        },
    )
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
