"""Turns PyTorch modules into ONNX files the streamer runtime accepts; the only code that imports torch.

Import ``export.onnx_export`` (or ``export.train``) for the tooling itself: this package module stays
free of torch, because ``streamer``'s CLI imports ``export.cli`` just to list the subcommands.
"""

import streamer  # noqa: F401  # before any export module loads onnxruntime: its telemetry setting
