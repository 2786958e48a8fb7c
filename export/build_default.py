"""Builds the fixed filter shipped in ``streamer/assets``: ``python -m export.build_default [--out DIR]``.

Writes the ONNX file and a JSON model card whose figures (parity error, CPU frame rate) are measured
on the machine that ran the build, never typed in. The trained models are built with
``streamer train`` and ``streamer export``; this filter has no weights to train.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from export.card import export_with_card
from export.models import MotionAdaptiveTemporalFilter
from export.onnx_export import ExportReport, export_onnx
from streamer.assets import TEMPORAL_FILTER
from streamer.core.windower import OutputPosition

__all__ = ["DEFAULT_NAME", "DESCRIPTION", "export_default", "main"]

DEFAULT_NAME = TEMPORAL_FILTER.stem
_T = 5
_POSITION = OutputPosition.CENTER
DESCRIPTION = (
    "Motion-adaptive temporal denoiser with fixed weights, like a camera ISP's temporal noise "
    "reduction: each of the T frames is averaged into the target frame with per-pixel weight "
    "g_t * exp(-(d_t/k)^2), g_t a Gaussian in slot distance from the target (sigma_t slots) and d_t the "
    "3x3 box mean of the channel-mean absolute difference to the target. Static areas are averaged over "
    "the window, moving areas keep the target's pixels. Nothing is learned."
)


def export_default(out_dir: Path) -> tuple[ExportReport, MotionAdaptiveTemporalFilter]:
    """Exports the default filter to ``out_dir`` (no card); the module comes back for its parameters."""
    module = MotionAdaptiveTemporalFilter(t=_T, position=_POSITION)
    return export_onnx(module, out_dir / f"{DEFAULT_NAME}.onnx", name=DEFAULT_NAME), module


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.build_default", description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=TEMPORAL_FILTER.parent,
        help="folder to write into (default: the package's assets)",
    )
    args = parser.parse_args(argv)
    module = MotionAdaptiveTemporalFilter(t=_T, position=_POSITION)
    report, card = export_with_card(
        module, args.out / f"{DEFAULT_NAME}.onnx", name=DEFAULT_NAME, description=DESCRIPTION
    )
    print(f"wrote {report.path} ({report.size_bytes} bytes, parity error {report.parity_max_abs_error:.2g})")
    print(f"wrote {card}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
