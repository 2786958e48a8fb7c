"""The JSON model card written next to an exported file, and the CPU speed measured for it.

A card says what the model is (description, architecture, its config, its parameter count), what it
costs (multiply-accumulates per 640x360 frame), how far its pixels reach (``export.reach``), how
closely the file matches PyTorch (the export's parity figures) and how fast onnxruntime runs it on
this machine's CPU, with the machine described. ``export_with_card`` is ``export.onnx_export`` plus
the card; ``export.streaming_export`` writes its cards with the same pieces.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from torch import nn

from export.contract import INPUT, Contract, random_pixels
from export.objective import count_macs
from export.onnx_export import ExportReport, export_onnx
from export.parity import module_inputs, parity_sizes
from export.reach import module_reach
from streamer.backend.base import Layout
from streamer.contract import CARD_REACH_KEY, STRENGTH, Key
from streamer.contract.layout import to_model_layout
from streamer.errors import ConfigError

__all__ = [
    "bench_summary",
    "benchmark_cpu",
    "card_header",
    "cpu_description",
    "export_with_card",
    "record_reach",
    "write_card",
]

_BENCH_SIZES = ((640, 360), (1280, 720))


@dataclass(frozen=True, slots=True)
class _State:
    input: str
    output: str
    channels: int
    scale: int


def benchmark_cpu(
    path: str | os.PathLike[str], sizes: Sequence[tuple[int, int]] = _BENCH_SIZES, seconds: float = 3.0
) -> dict[str, Any]:
    """Frames per second of onnxruntime on the CPU at batch 1, per (width, height), with machine info.

    Random frames in the model's layout and input type (states zero), ``session.run`` only, after 3
    warm-up runs; the spinning of idle intra-op threads is off, as in ``streamer.backend.onnx``.
    """
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    states = json.loads(meta.get(Key.STATE, "[]"))
    t = int(meta.get(Key.T, "1"))
    multiple = int(meta.get(Key.PAD_MULTIPLE, "1"))
    layout = Layout(meta.get(Key.LAYOUT, Layout.NTCHW.value))
    uint8 = session.get_inputs()[0].type == "tensor(uint8)"
    result: dict[str, Any] = {}
    if not sizes:
        raise ConfigError("benchmark_cpu needs at least one (width, height)")
    for width, height in sizes:
        hp, wp = -(-height // multiple) * multiple, -(-width // multiple) * multiple
        pixels = to_model_layout(random_pixels((1, t, 3, hp, wp), seed=0), layout)
        frames = pixels.astype(np.uint8) if uint8 else pixels / np.float32(255)
        feeds = {INPUT: np.ascontiguousarray(frames)}
        for s in states:
            feeds[s["input"]] = np.zeros(
                (1, s["channels"], -(-hp // s["scale"]), -(-wp // s["scale"])), np.float32
            )
        if any(i.name == STRENGTH for i in session.get_inputs()):
            feeds[STRENGTH] = np.full((1, 1), 25.0, np.float32)
        for _ in range(3):
            session.run(None, feeds)
        runs = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds or runs < 5:
            session.run(None, feeds)
            runs += 1
        result[f"{width}x{height}"] = {
            "fps": round(runs / elapsed, 1),
            "runs": runs,
            "seconds": round(elapsed, 2),
        }
    return bench_summary(
        result,
        sizes,
        "onnxruntime InferenceSession.run, batch 1 in the model's layout and input type (padded), states "
        "zero, CPUExecutionProvider with default intra-op threads, after 3 warm-up runs",
    )


def bench_summary(result: dict[str, Any], sizes: Sequence[tuple[int, int]], measured: str) -> dict[str, Any]:
    """A card's ``cpu_benchmark``: the per-size figures, the first size's fps, how and where measured."""
    first = f"{sizes[0][0]}x{sizes[0][1]}"
    result["fps"], result["resolution"], result["batch"] = result[first]["fps"], first, 1
    result["measured"] = measured
    result["machine"] = cpu_description()
    return result


def cpu_description() -> dict[str, Any]:
    """The machine a CPU figure was measured on: model name, ISA flags, cores, onnxruntime."""
    from streamer.measure.machine import cpu_isa, cpu_name

    return {
        "onnxruntime": ort.__version__,
        "cpu_count": os.cpu_count(),
        "processor": cpu_name(),
        "isa": list(cpu_isa()),
        "platform": platform.platform(),
    }


def write_card(
    report: ExportReport, card: dict[str, Any], path: str | os.PathLike[str] | None = None
) -> Path:
    """Writes the JSON model card (default: next to the model file); ``card`` adds or overrides fields."""
    body: dict[str, Any] = {
        "name": report.name,
        "file": report.path.name,
        "t": report.t,
        "layout": report.layout.value,
        "output_position": report.output_position.value,
        "value_range": list(report.value_range),
        "pad_multiple": report.pad_multiple,
        "channel_order": report.channel_order.value,
        "uint8_input": report.uint8_input,
        "uint8_output": report.uint8_output,
        "scale_factor": report.scale,
        "state": list(report.states),
        "opset": report.opset,
        "size_bytes": report.size_bytes,
        "parity_max_abs_error": report.parity_max_abs_error,
        "parity_shapes": [list(s) for s in report.parity_shapes],
        "parity_real_max_abs_error": report.parity_real_max_abs_error,
        "parity_real_frames": report.parity_real_frames,
    }
    if report.parity_sequence_max_abs_error is not None:
        body["parity_sequence"] = {
            "max_abs_error": report.parity_sequence_max_abs_error,
            "steps": report.parity_sequence_steps,
            "frames": "random, the second parity size, batch 1, from zero states, each side carrying its own",
        }
    if report.fp16_path is not None:
        body["fp16"] = {
            "file": report.fp16_path.name,
            "size_bytes": report.fp16_size_bytes,
            "max_abs_error": report.fp16_max_abs_error,
        }
    if report.uint8_io_max_levels is not None:
        # the file's own tensors: the value range is the module's, folded inside
        body["uint8_io"] = {"max_levels_from_float": report.uint8_io_max_levels}
    body.update(card)
    target = report.path.with_suffix(".json") if path is None else Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(body, indent=2) + "\n")
    return target


def card_header(module: nn.Module, description: str) -> dict[str, Any]:
    """What every model card says of the module: description, architecture, its config, its size."""
    from export.models.registry import architecture_of  # keeps this module model-agnostic

    config = getattr(module, "config", None)
    return {
        "description": description,
        "architecture": architecture_of(module) or f"{type(module).__module__}.{type(module).__qualname__}",
        "parameters": config() if callable(config) else None,
        "parameter_count": sum(p.numel() for p in module.parameters()),
    }


def record_reach(body: dict[str, Any], reach: int | None) -> None:
    """The card's ``reach_px`` (``export.reach``): what the tile gate's halo covers (``gate.halo: null``)."""
    if reach is not None:
        body[CARD_REACH_KEY] = reach


def export_with_card(
    module: nn.Module,
    path: str | os.PathLike[str],
    *,
    name: str,
    description: str,
    card_path: str | os.PathLike[str] | None = None,
    card: dict[str, Any] | None = None,
    bench: bool = True,
    **export_args: Any,
) -> tuple[ExportReport, Path]:
    """``export_onnx`` and then the model card: architecture, size, cost, parity and measured CPU speed."""
    report = export_onnx(module, path, name=name, **export_args)
    states = tuple(
        _State(str(s["input"]), str(s["output"]), int(s["channels"]), int(s["scale"])) for s in report.states
    )
    contract = Contract(
        name=name,
        t=report.t,
        layout=report.layout,
        position=report.output_position,
        value_range=report.value_range,
        pad_multiple=report.pad_multiple,
        states=states,
        channel_order=report.channel_order,
        uint8_input=report.uint8_input,
        scale=report.scale,
        uint8_output=report.uint8_output,
        strength=report.strength_default is not None,
        strength_default=25.0 if report.strength_default is None else report.strength_default,
    )
    hw = parity_sizes((360, 640), report.pad_multiple)[0]
    body = card_header(module, description)
    if not contract.states and not contract.strength and contract.scale == 1:
        record_reach(body, module_reach(module, contract.layout, contract.t))
    body["macs_per_frame_640x360"] = count_macs(
        module, module_inputs(contract, 1, hw, seed=0, random_state=False)
    )
    if bench:
        body["cpu_benchmark"] = benchmark_cpu(report.path)
    body.update(card or {})
    return report, write_card(report, body, card_path)
