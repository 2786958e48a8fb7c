"""Model files shipped inside the package, so ``streamer`` runs without downloading anything."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ASSETS",
    "AUTO_TIERS",
    "DEFAULT_MODEL",
    "DEFAULT_MODEL_CARD",
    "STREAMING_INT8_MODEL",
    "STREAMING_LITE_MODEL",
    "STREAMING_MODEL",
    "TEMPORAL_FILTER",
]

ASSETS: Path = Path(__file__).resolve().parent
"""Where the shipped models and their JSON model cards lie."""

DEFAULT_MODEL: Path = ASSETS / "conv3d_t5.onnx"
"""The trained default: Conv3dEnhancer, T=5, center, NCTHW (``streamer train`` + ``streamer export``)."""

DEFAULT_MODEL_CARD: Path = DEFAULT_MODEL.with_suffix(".json")
"""What the default model is, how it was trained and how it measured when exported."""

TEMPORAL_FILTER: Path = ASSETS / "temporal_filter_t5.onnx"
"""A fixed-weight motion-adaptive temporal denoiser (T=5, center): tiny and fast, nothing learned."""

STREAMING_MODEL: Path = ASSETS / "stream_t5.onnx"
"""conv3d_t5 in streaming form (StreamingEnhancer.from_conv3d, the same function): T=5, center; each frame
encoded once (``stream_t5.encoder.onnx`` beside it), uint8 in and out."""

STREAMING_INT8_MODEL: Path = ASSETS / "stream_t5.int8.onnx"
"""Its INT8 pair (``stream_t5.int8.encoder.onnx`` beside it): the convolutions INT8 costs least, within 50 dB
of fp32 on the calibration windows."""

STREAMING_LITE_MODEL: Path = ASSETS / "stream_t5_lite.onnx"
"""The cheaper live tier (``stream_t5_lite.encoder.onnx`` beside it): half stream_t5's multiply-adds,
distilled from conv3d_t5; 0.16 dB below it at sigma 25 on the held-out clip."""

AUTO_TIERS: tuple[Path, ...] = (STREAMING_MODEL, STREAMING_INT8_MODEL, STREAMING_LITE_MODEL)
"""What ``model.path: auto`` chooses from, best quality first (``streamer.tiers``)."""
