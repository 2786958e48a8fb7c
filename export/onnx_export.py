"""Exports a PyTorch module to an ONNX file that keeps the runtime's contract, and proves it does.

The file gets the ``streamer.*`` metadata the runtime reads (see ``streamer.backend.onnx``), passes
``onnx.checker``, and matches PyTorch on random input at two sizes and two batch sizes; a file that
fails any of these is never left looking like a good export.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from streamer.backend.base import Layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError

__all__ = ["PARITY_TOLERANCE", "ExportReport", "export_onnx", "metadata_props"]

PARITY_TOLERANCE = 1e-4
"""Largest fp32 difference allowed between onnxruntime and PyTorch, in units of the value range's span."""

_INPUT = "frames"
_OUTPUT = "enhanced"


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What was written and how closely onnxruntime reproduces PyTorch on it."""

    path: Path
    name: str
    opset: int
    t: int
    layout: Layout
    output_position: OutputPosition
    value_range: tuple[float, float]
    pad_multiple: int
    metadata: dict[str, str]
    parity_max_abs_error: float
    """Worst |onnxruntime - PyTorch| over the parity inputs, divided by the value range's span."""
    parity_shapes: tuple[tuple[int, ...], ...]
    """Input shapes the parity check ran, in the model's layout."""
    size_bytes: int


def metadata_props(
    *,
    name: str,
    t: int,
    layout: Layout,
    output_position: OutputPosition,
    value_range: tuple[float, float],
    pad_multiple: int,
) -> dict[str, str]:
    """The ``streamer.*`` metadata_props the runtime reads, as strings."""
    lo, hi = value_range
    return {
        "streamer.name": name,
        "streamer.t": str(t),
        "streamer.layout": layout.value,
        "streamer.output_position": output_position.value,
        "streamer.value_range": f"{lo:g},{hi:g}",
        "streamer.pad_multiple": str(pad_multiple),
    }


def export_onnx(
    module: nn.Module,
    path: str | os.PathLike[str],
    *,
    t: int,
    layout: Layout,
    output_position: OutputPosition,
    value_range: tuple[float, float] = (0.0, 1.0),
    pad_multiple: int = 1,
    name: str,
    opset: int = 17,
    example_hw: tuple[int, int] = (64, 96),
) -> ExportReport:
    """Writes ``module`` to ``path`` with dynamic B, H and W; raises ModelError unless it checks and matches.

    ``module`` takes a float batch in ``layout`` (C = 3, T = ``t``) in ``value_range`` and returns
    (B, 3, H, W) at the same H and W. It is put in eval mode. Nothing is written when a check fails.
    """
    lo, hi = value_range
    if t < 1 or pad_multiple < 1 or not hi > lo:
        raise ConfigError(
            f"cannot export {name!r} with t={t}, pad_multiple={pad_multiple}, value_range={value_range}; "
            f"t and pad_multiple must be positive and value_range (lo, hi) with lo < hi"
        )
    out = Path(path)
    module = module.eval()
    sizes = _parity_sizes(example_hw, pad_multiple)
    example = _random_input(1, t, sizes[0], layout, value_range, seed=0)
    model = onnx.load_from_string(_torch_export(module, example, opset, name))
    meta = metadata_props(
        name=name,
        t=t,
        layout=layout,
        output_position=output_position,
        value_range=value_range,
        pad_multiple=pad_multiple,
    )
    onnx.helper.set_model_props(model, meta)
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as err:
        raise ModelError(f"the ONNX export of {name!r} fails onnx.checker: {err}") from err

    data = model.SerializeToString()
    shapes, error = _parity(module, data, t, sizes, layout, value_range)
    if not error <= PARITY_TOLERANCE:  # also catches NaN
        raise ModelError(
            f"onnxruntime differs from PyTorch on {name!r} by {error:.3g} (relative to the value range) on "
            f"inputs {shapes}; the limit is {PARITY_TOLERANCE:g}. An op exports with other semantics: "
            f"try another opset or rewrite the op"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return ExportReport(
        path=out,
        name=name,
        opset=opset,
        t=t,
        layout=layout,
        output_position=output_position,
        value_range=(float(lo), float(hi)),
        pad_multiple=pad_multiple,
        metadata=meta,
        parity_max_abs_error=error,
        parity_shapes=shapes,
        size_bytes=len(data),
    )


def _torch_export(module: nn.Module, example: torch.Tensor, opset: int, name: str) -> bytes:
    """The legacy (TorchScript) exporter's output: unlike the dynamo one it needs no onnxscript installed."""
    dynamic = {
        _INPUT: {0: "batch", 3: "height", 4: "width"},
        _OUTPUT: {0: "batch", 2: "height", 3: "width"},
    }
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "model.onnx"
        try:
            with torch.no_grad(), warnings.catch_warnings():
                # The legacy exporter is chosen on purpose; its deprecation notices are not the caller's.
                warnings.filterwarnings(
                    "ignore", message="You are using the legacy", category=DeprecationWarning
                )
                warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
                torch.onnx.export(
                    module,
                    (example,),
                    file,
                    dynamo=False,
                    opset_version=opset,
                    input_names=[_INPUT],
                    output_names=[_OUTPUT],
                    dynamic_axes=dynamic,
                )
        except Exception as err:
            raise ModelError(f"torch could not export {name!r} to ONNX opset {opset}: {err}") from err
        return file.read_bytes()


def _parity_sizes(example_hw: tuple[int, int], multiple: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Two different (H, W), both multiples of the pad multiple as the runtime will feed them."""
    h, w = (-(-v // multiple) * multiple for v in example_hw)
    return (h, w), (h + 2 * multiple, w + 3 * multiple)


def _random_input(
    b: int, t: int, hw: tuple[int, int], layout: Layout, value_range: tuple[float, float], seed: int
) -> torch.Tensor:
    lo, hi = value_range
    shape = (b, t, 3, *hw) if layout is Layout.NTCHW else (b, 3, t, *hw)
    x = np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(np.float32)
    return torch.from_numpy(x)


def _parity(
    module: nn.Module,
    data: bytes,
    t: int,
    sizes: tuple[tuple[int, int], tuple[int, int]],
    layout: Layout,
    value_range: tuple[float, float],
) -> tuple[tuple[tuple[int, ...], ...], float]:
    """Worst onnxruntime-vs-PyTorch difference, relative to the value range, at batch 1 and batch 2."""
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    span = value_range[1] - value_range[0]
    shapes: list[tuple[int, ...]] = []
    worst = 0.0
    for seed, (b, hw) in enumerate(((1, sizes[0]), (2, sizes[1])), start=1):
        x = _random_input(b, t, hw, layout, value_range, seed)
        with torch.no_grad():
            expected = module(x).numpy()
        (got,) = session.run([_OUTPUT], {_INPUT: x.numpy()})
        if expected.shape != (b, 3, *hw):
            raise ModelError(
                f"the module returns shape {expected.shape} for input {tuple(x.shape)}; the runtime needs "
                f"(B, 3, H, W) = {(b, 3, *hw)}, the target frame at the input's size"
            )
        if got.shape != expected.shape:
            raise ModelError(
                f"onnxruntime returns shape {got.shape} where PyTorch returns {expected.shape} for input "
                f"{tuple(x.shape)}; a size is baked into the export: avoid Python ints from tensor shapes"
            )
        shapes.append(tuple(x.shape))
        worst = max(worst, float(np.max(np.abs(got - expected))) / span)
    return tuple(shapes), worst
