"""``streamer model inspect FILE.onnx``: what the runtime will do with a model, before a stream runs it.

A user's own export is where layouts, colour orders and value ranges go wrong silently; this prints
the contract as the runtime reads it (and where each part came from: the model's metadata, the
flags, or its input's shape), and how fast it runs here.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamer.app import build_backend
from streamer.backend.base import ChannelOrder, Layout, ModelInfo
from streamer.backend.onnx import OnnxBackend
from streamer.config import ModelConfig, load_config
from streamer.contract import NAMESPACE
from streamer.engine.tiers import model_fps
from streamer.errors import ConfigError

__all__ = ["ModelReport", "inspect_model", "register"]

_SHAPES = {
    Layout.NTCHW: "(B, T, C, H, W)",
    Layout.NCTHW: "(B, C, T, H, W)",
    Layout.STACKED: "(B, T*C, H, W), frames stacked on channels",
    Layout.NCHW: "(B, C, H, W), one frame",
}


@dataclass(frozen=True, slots=True)
class ModelReport:
    path: str
    info: ModelInfo
    sources: dict[str, str]
    """For layout, channel order, value range and scale: "flag", "metadata" or "default/shape"."""
    fps: float | None
    size: tuple[int, int]
    workers: int

    def lines(self) -> list[str]:
        info = self.info
        lookahead = info.t - 1 - info.output_position.slot(info.t)
        if info.streaming:
            kind = f"streaming model: each frame encoded once into {len(info.features)} feature map(s)"
        elif info.state:
            kind = f"recurrent model: {len(info.state)} state tensor(s) carried per stream"
        else:
            kind = "window model"
        rows = [
            ("model", f"{info.name} ({self.path})"),
            ("kind", kind),
            (
                "window",
                f"T={info.t}, output {info.output_position.value} (waits for {lookahead} later frames)",
            ),
        ]
        if info.streaming:
            rows.append(("frames in", "uint8 (N, H, W, 3) RGB to the encoder; fusion returns uint8 frames"))
            rows += [
                ("feature", f"{spec.name}: {spec.channels} channels at 1/{spec.scale} size")
                for spec in info.features
            ]
        else:
            lo, hi = info.value_range
            value = f"float32, 0..255 as {lo:g}..{hi:g}"
            rows += [
                ("layout", f"{info.layout.value} {_SHAPES[info.layout]} [{self.sources['layout']}]"),
                ("channels", f"{info.channel_order.value} [{self.sources['channel_order']}]"),
                (
                    "input",
                    ("uint8, pixel values" if info.uint8_input else value)
                    + f" [{self.sources['value_range']}]",
                ),
                ("output", "uint8, pixel values" if info.uint8_output else value),
                (
                    "scale",
                    f"{info.scale}x the input's width and height [{self.sources['scale']}]",
                ),
            ]
            rows += [
                ("state", f"{s.input} -> {s.output}: {s.channels} channels at 1/{s.scale} size")
                for s in info.state
            ]
        rows += [
            ("pad multiple", str(info.pad_multiple)),
            ("provider", info.provider),
            (
                "memory",
                f"{info.activation_bytes_per_pixel} bytes per pixel at peak (model card)"
                if info.activation_bytes_per_pixel is not None
                else "not measured (no card): admission assumes its default",
            ),
        ]
        w, h = self.size
        if self.fps is not None:
            rows.append(
                (
                    "speed",
                    f"{self.fps:.1f} output frames/s at {w}x{h}, batch 1, {self.workers} call(s) at once",
                )
            )
        return [f"{name:<13}{value}" for name, value in rows]

    def as_dict(self) -> dict[str, Any]:
        info = self.info
        return {
            "path": self.path,
            "name": info.name,
            "t": info.t,
            "output_position": info.output_position.value,
            "streaming": info.streaming,
            "layout": info.layout.value,
            "channel_order": info.channel_order.value,
            "value_range": list(info.value_range),
            "uint8_input": info.uint8_input,
            "uint8_output": info.uint8_output,
            "scale": info.scale,
            "pad_multiple": info.pad_multiple,
            "state": [s.input for s in info.state],
            "features": [f.name for f in info.features],
            "provider": info.provider,
            "activation_bytes_per_pixel": info.activation_bytes_per_pixel,
            "sources": self.sources,
            "fps": self.fps,
            "size": list(self.size),
        }


def inspect_model(model: ModelConfig, size: tuple[int, int], probe_seconds: float) -> ModelReport:
    """Loads ``model`` as a stream would; times it for ``probe_seconds`` at ``size`` (0: not at all)."""
    backend = build_backend(model)
    meta = backend.metadata if isinstance(backend, OnnxBackend) else {}
    given = {
        "layout": model.layout,
        "channel_order": model.channel_order,
        "value_range": model.value_range,
        "scale": model.scale,
    }
    inferred = backend.inferred if isinstance(backend, OnnxBackend) else frozenset()
    sources = {
        key: "flag"
        if value is not None
        else "metadata"
        if f"{NAMESPACE}{key}" in meta
        else "inferred from a probe"
        if key in inferred
        else "default/shape"
        for key, value in given.items()
    }
    try:
        fps = model_fps(backend, *size, seconds=probe_seconds) if probe_seconds > 0 else None
        return ModelReport(str(model.path), backend.info, sources, fps, size, backend.workers)
    finally:
        backend.close()


def register(commands: Any) -> None:
    """Adds ``streamer model inspect`` to the CLI."""
    model = commands.add_parser("model", help="look at an ONNX model as the runtime reads it")
    actions = model.add_subparsers(dest="action", required=True, metavar="ACTION")
    inspect = actions.add_parser(
        "inspect",
        help="print what the runtime will do with a model: layout, T, colour order, range, scale, speed",
        description="Loads the model as a stream would and prints its contract: kind (window, recurrent, "
        "streaming), T and output position, layout, colour order, input and output types and value "
        "ranges, output scale, state tensors, padding, provider, memory per pixel, and its speed on this "
        "machine. Each of layout, colour order, value range and scale says where it came from: a flag "
        "here (as model.* in a config), the model's metadata, or the default / the input's shape. A model "
        "the runtime cannot run fails with the reason, as `streamer run` would.",
    )
    inspect.add_argument("path", type=Path, metavar="FILE.onnx", help="the model file")
    inspect.add_argument(
        "--layout", choices=[m.value for m in Layout], help="as model.layout: how the model takes frames"
    )
    inspect.add_argument(
        "--channel-order", choices=[m.value for m in ChannelOrder], help="as model.channel_order"
    )
    inspect.add_argument(
        "--value-range", metavar="LO,HI", help="as model.value_range, e.g. --value-range=-1,1 or 0,255"
    )
    inspect.add_argument("--scale", type=int, help="as model.scale: output size over input size")
    inspect.add_argument("--size", default="640x360", metavar="WxH", help="frame size the speed is timed at")
    inspect.add_argument(
        "--seconds", type=float, default=2.0, help="how long to time the model (2; 0: do not time it)"
    )
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.set_defaults(func=_cmd_inspect)


def _cmd_inspect(args: argparse.Namespace) -> int:
    if not 0 <= args.seconds <= 600:
        raise ConfigError(f"--seconds must be in [0, 600]; got {args.seconds}")
    try:
        w, h = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise ConfigError(f"--size must be WxH, e.g. 640x360; got {args.size!r}") from None
    if not (16 <= w <= 7680 and 16 <= h <= 4320):
        raise ConfigError(f"--size must be within 16x16..7680x4320; got {args.size!r}")
    value_range = None
    if args.value_range is not None:
        try:
            lo, hi = (float(v) for v in args.value_range.split(","))
        except ValueError:
            raise ConfigError(f"--value-range must be LO,HI, e.g. -1,1; got {args.value_range!r}") from None
        value_range = (lo, hi)
    settings = {
        "model.path": str(args.path),
        "model.layout": args.layout,
        "model.channel_order": args.channel_order,
        "model.value_range": value_range,
        "model.scale": args.scale,
    }
    config = load_config(None, {key: value for key, value in settings.items() if value is not None})
    report = inspect_model(config.model, (w, h), args.seconds)
    print(json.dumps(report.as_dict(), indent=2) if args.json else "\n".join(report.lines()))
    return 0
