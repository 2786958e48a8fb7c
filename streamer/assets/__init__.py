"""Model files shipped inside the package, so ``streamer`` runs without downloading anything."""

from __future__ import annotations

from pathlib import Path

from streamer.errors import ConfigError

__all__ = [
    "ASSETS",
    "AUTO_TIERS",
    "CAMERA_MODEL",
    "DEFAULT_MODEL",
    "DEFAULT_MODEL_CARD",
    "SHIPPED_PREFIX",
    "STREAMING_INT8_MODEL",
    "STREAMING_LITE_MODEL",
    "STREAMING_MODEL",
    "STREAMING_QUARTER_MODEL",
    "STREAMING_SEPARABLE_MODEL",
    "STREAMING_TINY_MODEL",
    "TEMPORAL_FILTER",
    "is_shipped",
    "resolve_shipped",
]

ASSETS: Path = Path(__file__).resolve().parent
"""Where the shipped models and their JSON model cards lie."""

DEFAULT_MODEL: Path = ASSETS / "conv3d_t5.onnx"
"""The trained default: Conv3dEnhancer, T=5, center, NCTHW (``streamer train`` + ``streamer export``)."""

DEFAULT_MODEL_CARD: Path = DEFAULT_MODEL.with_suffix(".json")
"""What the default model is, how it was trained and how it measured when exported."""

CAMERA_MODEL: Path = ASSETS / "conv3d_t1_strength.onnx"
"""conv3d_t1 with a strength input (the noise sigma; ``model.strength: auto`` feeds the stream's noise
estimate), fine-tuned on camera damage (x264 at CRF 23..40 after sensor noise) as well as Gaussian
noise: the camera profile's model (``configs/camera.yaml``), for compressed, noisy feeds."""

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
distilled from conv3d_t5, giving up a little of its quality for the speed."""

STREAMING_SEPARABLE_MODEL: Path = ASSETS / "stream_t5_lite_sep.onnx"
"""stream_t5_lite with its 3x3 mix of the cached maps made separable (depthwise 3x3, then 1x1): fewer
multiply-adds and faster, fine-tuned from it against conv3d_t5; the 360p tier for CPUs where the lite tier
falls behind."""

STREAMING_QUARTER_MODEL: Path = ASSETS / "stream_t5_quarter_sep.onnx"
"""The 720p tier (``stream_t5_quarter_sep.encoder.onnx`` beside it): the whole fusion at a quarter of the
resolution (StreamingEnhancer entry=4), its mix of the cached maps separable, distilled from conv3d_t5;
about a sixth of stream_t5_lite's multiply-adds, and its card says what that costs in quality."""

STREAMING_TINY_MODEL: Path = ASSETS / "stream_t5_tiny.onnx"
"""stream_t5_quarter_sep's shape at half its widths (``stream_t5_tiny.encoder.onnx`` beside it): the
rung below it, for a host whose cores are shared (a loaded machine, several cameras), where enhancing
every frame a little better serves a viewer more than passing some through; its card says what the
widths cost in quality."""

AUTO_TIERS: tuple[Path, ...] = (
    STREAMING_MODEL,
    STREAMING_INT8_MODEL,
    STREAMING_LITE_MODEL,
    STREAMING_SEPARABLE_MODEL,
    STREAMING_QUARTER_MODEL,
    STREAMING_TINY_MODEL,
)
"""What ``model.path: auto`` chooses from, best quality first (``streamer.engine.tiers``)."""

SHIPPED_PREFIX = "shipped:"
"""``model.path: shipped:NAME`` names a model of this folder (``shipped:conv3d_t1``), wherever the
package is installed."""


def resolve_shipped(path: str) -> str:
    """``shipped:NAME`` becomes the shipped model's real path; any other path is returned as it is."""
    if not path.startswith(SHIPPED_PREFIX):
        return path
    name = path[len(SHIPPED_PREFIX) :]
    names = sorted(p.stem for p in ASSETS.glob("*.onnx") if not p.stem.endswith(".encoder"))
    if name not in names:
        raise ConfigError(f"no shipped model {name!r}; the package ships {', '.join(names)}")
    return str(ASSETS / f"{name}.onnx")


def is_shipped(path: Path) -> bool:
    """True for a model file of this folder (the control API lets any stream load those)."""
    return path.suffix == ".onnx" and path.resolve().parent == ASSETS
