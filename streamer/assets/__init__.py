"""Model files shipped inside the package, so ``streamer`` runs without downloading anything."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_MODEL", "DEFAULT_MODEL_CARD"]

DEFAULT_MODEL: Path = Path(__file__).resolve().parent / "temporal_filter_t5.onnx"
"""The temporal denoiser (T=5, center, NCTHW); ``python -m export.build_default`` rebuilds it."""

DEFAULT_MODEL_CARD: Path = DEFAULT_MODEL.with_suffix(".json")
"""What the default model is and how it measured when it was built."""
