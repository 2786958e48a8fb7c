"""Builds the model shipped in ``streamer/assets``: ``python -m export.build_default [--out DIR]``.

Writes the ONNX file and a JSON model card whose figures (parity error, CPU frame rate) are measured
on the machine that ran the build, never typed in.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from export.onnx_export import ExportReport, export_onnx
from streamer.assets import DEFAULT_MODEL
from streamer.backend.base import Layout
from streamer.backend.onnx import OnnxBackend
from streamer.core.windower import OutputPosition
from streamer.models import MotionAdaptiveTemporalFilter

__all__ = ["DEFAULT_NAME", "benchmark_cpu", "export_default", "main", "write_card"]

DEFAULT_NAME = DEFAULT_MODEL.stem
_T = 5
_POSITION = OutputPosition.CENTER
_DESCRIPTION = (
    "Motion-adaptive temporal denoiser with fixed weights, like a camera ISP's temporal noise "
    "reduction: each of the T frames is averaged into the target frame with per-pixel weight "
    "g_t * exp(-(d_t/k)^2), g_t a Gaussian in slot distance from the target (sigma_t slots) and d_t the "
    "3x3 box mean of the channel-mean absolute difference to the target. Static areas are averaged over "
    "the window, moving areas keep the target's pixels. Nothing is learned."
)


def export_default(out_dir: Path) -> tuple[ExportReport, MotionAdaptiveTemporalFilter]:
    """Exports the default filter to ``out_dir``; the module comes back for its parameters."""
    module = MotionAdaptiveTemporalFilter(t=_T, position=_POSITION)
    report = export_onnx(
        module,
        out_dir / f"{DEFAULT_NAME}.onnx",
        t=_T,
        layout=Layout.NCTHW,
        output_position=_POSITION,
        value_range=(0.0, 1.0),
        name=DEFAULT_NAME,
    )
    return report, module


def benchmark_cpu(model: Path, width: int = 640, height: int = 360, seconds: float = 3.0) -> dict[str, Any]:
    """Frames per second of ``OnnxBackend.infer`` at batch 1 on the CPU provider, uint8 in to uint8 out."""
    backend = OnnxBackend(model, providers=["CPUExecutionProvider"])
    t = backend.info.t
    batch = np.random.default_rng(0).integers(0, 256, size=(1, t, 3, height, width), dtype=np.uint8)
    for _ in range(3):
        backend.infer(batch)
    runs = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or runs < 10:
        backend.infer(batch)
        runs += 1
    backend.close()
    return {
        "fps": round(runs / elapsed, 1),
        "runs": runs,
        "seconds": round(elapsed, 2),
        "resolution": f"{width}x{height}",
        "batch": 1,
        "measured": "OnnxBackend.infer, uint8 (1, T, 3, H, W) in to uint8 out, after 3 warm-up runs",
        "provider": backend.info.provider,
        "onnxruntime": ort.__version__,
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
    }


def write_card(report: ExportReport, module: MotionAdaptiveTemporalFilter, bench: dict[str, Any]) -> Path:
    """Writes the JSON model card next to the model file."""
    card = {
        "name": report.name,
        "file": report.path.name,
        "description": _DESCRIPTION,
        "t": report.t,
        "layout": report.layout.value,
        "output_position": report.output_position.value,
        "value_range": list(report.value_range),
        "pad_multiple": report.pad_multiple,
        "parameters": module.config(),
        "opset": report.opset,
        "size_bytes": report.size_bytes,
        "parity_max_abs_error": report.parity_max_abs_error,
        "parity_shapes": [list(s) for s in report.parity_shapes],
        "cpu_benchmark": bench,
    }
    path = report.path.with_suffix(".json")
    path.write_text(json.dumps(card, indent=2) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.build_default", description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_MODEL.parent,
        help="folder to write into (default: the package's assets)",
    )
    args = parser.parse_args(argv)
    report, module = export_default(args.out)
    bench = benchmark_cpu(report.path)
    card = write_card(report, module, bench)
    print(f"wrote {report.path} ({report.size_bytes} bytes, parity error {report.parity_max_abs_error:.2g})")
    print(f"wrote {card} (CPU {bench['fps']} fps at {bench['resolution']} batch 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
