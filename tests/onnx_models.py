"""Small real ONNX models built with onnx.helper, for contract tests of the runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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


def strength_model(path: Path, default: float | None = None, t: int = 3) -> Path:
    """A window model that takes a strength: the target (centre) frame plus the strength, in 0..255
    levels (frames in 0..1), so the strength each window got reads off its output."""
    frames = helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["B", t, 3, "H", "W"])
    strength = helper.make_tensor_value_info("strength", TensorProto.FLOAT, ["B", 1])
    nodes = [
        helper.make_node("Gather", ["frames", "slot"], ["frame"], axis=1),
        helper.make_node("Div", ["strength", "levels"], ["lift"]),
        helper.make_node("Reshape", ["lift", "per_window"], ["lift4"]),
        helper.make_node("Add", ["frame", "lift4"], ["enhanced"]),
    ]
    initializers = [
        helper.make_tensor("slot", TensorProto.INT64, [], [t // 2]),
        helper.make_tensor("levels", TensorProto.FLOAT, [], [255.0]),
        helper.make_tensor("per_window", TensorProto.INT64, [4], [-1, 1, 1, 1]),
    ]
    out = helper.make_tensor_value_info("enhanced", TensorProto.FLOAT, ["B", 3, "H", "W"])
    graph = helper.make_graph(nodes, "strength", [frames, strength], [out], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    props = {
        "streamer.name": "strength",
        "streamer.t": str(t),
        "streamer.layout": "NTCHW",
        "streamer.output_position": "center",
        "streamer.value_range": "0,1",
    }
    if default is not None:
        props["streamer.strength_default"] = str(default)
    helper.set_model_props(model, props)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def kind_model(
    path: Path,
    *,
    layout: str = "NTCHW",
    t: int = 5,
    slot: int = 2,
    order: str = "RGB",
    value_range: tuple[float, float] = (0.0, 1.0),
    uint8_input: bool = False,
    uint8_output: bool = False,
    scale: int = 1,
    metadata: bool = True,
) -> Path:
    """A model of any layout the runtime takes whose output is exact: the frame at ``slot``, with the
    model's first channel zeroed (red for an RGB model, blue for a BGR one), 10 levels added, scaled up
    ``scale`` times by nearest neighbour (:func:`kind_expected` computes it). Float tensors carry
    ``value_range``; uint8 ones the pixel values. ``metadata=False`` leaves everything for the config
    to declare (streamer.t aside where the shape does not show it)."""
    lo, hi = value_range
    shapes: dict[str, list[int | str]] = {
        "NTCHW": ["B", t, 3, "H", "W"],
        "NCTHW": ["B", 3, t, "H", "W"],
        "N(T*C)HW": ["B", 3 * t, "H", "W"],
        "NCHW": ["B", 3, "H", "W"],
    }
    in_type = TensorProto.UINT8 if uint8_input else TensorProto.FLOAT
    out_type = TensorProto.UINT8 if uint8_output else TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("frames", in_type, shapes[layout])]
    initializers = [
        helper.make_tensor("lo", TensorProto.FLOAT, [], [lo]),
        helper.make_tensor("to_pixels", TensorProto.FLOAT, [], [255.0 / (hi - lo)]),
        helper.make_tensor("to_model", TensorProto.FLOAT, [], [(hi - lo) / 255.0]),
        helper.make_tensor("slot", TensorProto.INT64, [], [slot]),
        helper.make_tensor("start", TensorProto.INT64, [1], [3 * slot]),
        helper.make_tensor("end", TensorProto.INT64, [1], [3 * slot + 3]),
        helper.make_tensor("axis1", TensorProto.INT64, [1], [1]),
        helper.make_tensor("mask", TensorProto.FLOAT, [1, 3, 1, 1], [0.0, 1.0, 1.0]),
        helper.make_tensor("ten", TensorProto.FLOAT, [], [10.0]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("full", TensorProto.FLOAT, [], [255.0]),
        helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, float(scale), float(scale)]),
    ]
    if uint8_input:
        nodes = [helper.make_node("Cast", ["frames"], ["pixels"], to=TensorProto.FLOAT)]
    else:
        nodes = [
            helper.make_node("Sub", ["frames", "lo"], ["shifted"]),
            helper.make_node("Mul", ["shifted", "to_pixels"], ["pixels"]),
        ]
    pick = {
        "NTCHW": helper.make_node("Gather", ["pixels", "slot"], ["picked"], axis=1),
        "NCTHW": helper.make_node("Gather", ["pixels", "slot"], ["picked"], axis=2),
        "N(T*C)HW": helper.make_node("Slice", ["pixels", "start", "end", "axis1"], ["picked"]),
        "NCHW": helper.make_node("Identity", ["pixels"], ["picked"]),
    }
    nodes += [
        pick[layout],
        helper.make_node("Mul", ["picked", "mask"], ["masked"]),
        helper.make_node("Add", ["masked", "ten"], ["brighter"]),
        helper.make_node("Resize", ["brighter", "", "scales"], ["sized"], mode="nearest"),
    ]
    if uint8_output:
        nodes += [
            helper.make_node("Clip", ["sized", "zero", "full"], ["clipped"]),
            helper.make_node("Cast", ["clipped"], ["enhanced"], to=TensorProto.UINT8),
        ]
    else:
        nodes += [
            helper.make_node("Mul", ["sized", "to_model"], ["unscaled"]),
            helper.make_node("Add", ["unscaled", "lo"], ["enhanced"]),
        ]
    outputs = [helper.make_tensor_value_info("enhanced", out_type, ["B", 3, "OH", "OW"])]
    used = {name for node in nodes for name in node.input}
    initializers = [i for i in initializers if i.name in used]
    graph = helper.make_graph(nodes, "kind", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    props = {"streamer.name": f"kind_{layout}", "streamer.t": str(t)}
    if metadata:
        props |= {
            "streamer.layout": layout,
            "streamer.channel_order": order,
            "streamer.value_range": f"{lo:g},{hi:g}",
            "streamer.scale": str(scale),
            "streamer.output_position": "center",
        }
    helper.set_model_props(model, props)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def upscaler_model(path: Path, factor: tuple[float, float], meta: dict[str, str] | None = None) -> Path:
    """A per-frame model with no metadata (unless ``meta``) and dynamic sizes that resizes its frame by
    ``factor`` (H, W), nearest neighbour: what an upscaler exported without the contract looks like."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "h", "w"])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "H", "W"])
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, *factor])
    node = helper.make_node("Resize", ["input", "", "scales"], ["output"], mode="nearest")
    model = helper.make_model(
        helper.make_graph([node], "up", [x], [y], [scales]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    if meta:
        helper.set_model_props(model, meta)
    onnx.save(model, path)
    return path


def kind_expected(frame: np.ndarray, order: str = "RGB", scale: int = 1) -> np.ndarray:
    """What :func:`kind_model` makes of one (H, W, 3) RGB frame, as RGB."""
    out = frame.astype(np.int32)
    out[..., 2 if order == "BGR" else 0] = 0
    out = np.minimum(out + 10, 255).astype(np.uint8)
    return out.repeat(scale, axis=0).repeat(scale, axis=1)
