"""What an exported model promises the runtime, read from the module and the caller, checked as a whole.

A module describes itself with attributes (as ``export.models`` modules do): ``t``, ``layout``,
``output_position``, ``value_range``, ``pad_multiple``, ``state_specs`` and, where they differ from the
defaults, ``channel_order`` (RGB), ``uint8_input`` (False) and ``scale_factor`` (1). Keyword arguments (the
CLI's flags) stand in for the attributes a module lacks and must agree with those it has. Every
problem is found before any is reported, so one error lists them all, one line each.

The input a module is fed is built in one place, ``model_input``: (B, T, 3, H, W) RGB pixels go
through the runtime's own ``streamer.contract.layout.to_model_layout``, so the exporter feeds each layout the
way the runtime will.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from streamer.backend.base import ChannelOrder, Layout
from streamer.contract import StateLike, state_json
from streamer.contract.layout import to_model_layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

__all__ = [
    "INPUT",
    "OUTPUT",
    "Contract",
    "describe",
    "model_input",
    "random_pixels",
    "state_shape",
]

INPUT = "frames"
OUTPUT = "enhanced"
_RGB = ChannelOrder.RGB


@dataclass(frozen=True, slots=True)
class Contract:
    """Everything the runtime needs to know of a model, validated."""

    name: str
    t: int
    layout: Layout
    position: OutputPosition
    value_range: tuple[float, float]
    """The float range pixels 0..255 map to, in a float input and a float output."""
    pad_multiple: int
    states: tuple[StateLike, ...]
    channel_order: ChannelOrder = ChannelOrder.RGB
    uint8_input: bool = False
    scale: int = 1
    uint8_output: bool = False
    """Not declared but seen: the module returns uint8 pixels (``export_onnx`` runs it to find out)."""
    strength: bool = False
    """The module takes a strength after its states: (B, 1) float32, the noise sigma in 0..255 levels
    (the runtime's ``model.strength``), exported as the input ``strength``."""
    strength_default: float = 25.0
    """What the runtime gives a window without a strength of its own (``streamer.strength_default``)."""

    @property
    def span(self) -> float:
        """What a difference in the output is measured against: 255 levels, or the value range's span."""
        return 255.0 if self.uint8_output else self.value_range[1] - self.value_range[0]

    @property
    def target(self) -> int:
        """The window slot whose frame the model enhances."""
        return self.position.slot(self.t)


def strength_tensor(b: int, seed: int) -> torch.Tensor:
    """(B, 1) noise sigmas in 0..50 levels, as the runtime feeds a model that takes a strength."""
    rng = np.random.default_rng(seed + 2000)
    return torch.from_numpy(rng.uniform(0.0, 50.0, size=(b, 1)).astype(np.float32))


_FLAGS = {
    "t": "--t",
    "layout": "--layout",
    "output_position": "--position",
    "value_range": "--value-range",
    "pad_multiple": "--pad-multiple",
    "channel_order": "--channel-order",
    "uint8_input": "--uint8-input",
    "scale": "--scale",
    "states": "--state",
    "strength": "--strength",
    "strength_default": "--strength-default",
}
"""Each contract key's flag on ``streamer export``."""
_ATTRIBUTES = {
    **{key: key for key in _FLAGS},
    "scale": "scale_factor",
    "states": "state_specs",
    "strength": "takes_strength",
}
"""Contract key -> the module attribute that declares it (``scale_factor``, as ``nn.Upsample`` names it:
a plain ``scale`` is what many modules, ``ConvGRUEnhancer`` among them, call an internal stride)."""


def _how(key: str) -> str:
    flag = _FLAGS.get(key)
    cli = f" (CLI: {flag})" if flag else ""
    return f"pass {key}={cli} or set the module's {_ATTRIBUTES[key]}"


def describe(module: nn.Module, name: str, given: dict[str, Any]) -> Contract:
    """The module's contract from its attributes and the caller's ``given`` arguments (None: not given).

    Raises one ConfigError naming every missing, invalid or contradicting value, one line each.
    """
    problems: list[str] = []
    raw: dict[str, Any] = {}
    for key, attr in _ATTRIBUTES.items():
        own = getattr(module, attr) if hasattr(module, attr) else None
        arg = given.get(key)
        if arg is not None and own is not None and _norm(arg) != _norm(own):
            problems.append(
                f"{key}={_norm(arg)!r} was given but the module's {attr} is {_norm(own)!r}; "
                "drop the argument or change the module"
            )
        raw[key] = arg if arg is not None else own
    for key in ("layout", "t", "output_position"):
        # A per-frame model has T = 1 and so one slot, center and last alike: only its layout is needed.
        implied = key != "layout" and raw["layout"] in (Layout.NCHW, Layout.NCHW.value)
        if raw[key] is None and not (implied or (key == "output_position" and raw["t"] == 1)):
            problems.append(
                f"the module has no attribute {_ATTRIBUTES[key]!r} and none was given; {_how(key)}"
            )
    layout = _choice(raw["layout"], Layout, "layout", problems, Layout.NTCHW)
    t = _positive_int(raw["t"], "t", problems)
    if layout is Layout.NCHW and t != 1:
        problems.append(f"t={t} with layout NCHW: a per-frame model takes one frame; drop t or set it to 1")
    center = OutputPosition.CENTER
    position = _choice(raw["output_position"], OutputPosition, "output_position", problems, center)
    uint8 = raw["uint8_input"] is True
    if raw["uint8_input"] not in (None, True, False):
        problems.append(f"uint8_input={raw['uint8_input']!r} must be True or False; {_how('uint8_input')}")
    value_range = _range(raw["value_range"], problems)
    states: tuple[StateLike, ...] = tuple(raw["states"] or ())
    for spec in states:
        if spec.channels < 1 or spec.scale < 1 or spec.input in (INPUT, OUTPUT):
            problems.append(
                f"state {state_json(spec)} needs channels and scale >= 1 and names other than {INPUT!r} and "
                f"{OUTPUT!r}; {_how('states')}"
            )
    strength = raw["strength"] is True
    if raw["strength"] not in (None, True, False):
        problems.append(f"strength={raw['strength']!r} must be True or False; {_how('strength')}")
    strength_default = 25.0 if raw["strength_default"] is None else raw["strength_default"]
    if not isinstance(strength_default, int | float) or not 0.0 <= float(strength_default) <= 255.0:
        problems.append(
            f"strength_default={strength_default!r} must be a noise sigma in 0..255; "
            f"{_how('strength_default')}"
        )
        strength_default = 25.0
    contract = Contract(
        name=name,
        t=t,
        layout=layout,
        position=position,
        value_range=value_range,
        pad_multiple=_positive_int(raw["pad_multiple"], "pad_multiple", problems),
        states=states,
        channel_order=_choice(raw["channel_order"], ChannelOrder, "channel_order", problems, _RGB),
        uint8_input=uint8,
        scale=_positive_int(raw["scale"], "scale", problems),
        strength=strength,
        strength_default=float(strength_default),
    )
    if len(problems) == 1:
        raise ConfigError(f"cannot export {name!r}: {problems[0]}")
    if problems:
        lines = "\n".join(f"  {p}" for p in problems)
        raise ConfigError(f"cannot export {name!r}: {len(problems)} problems, one per line:\n{lines}")
    return contract


_E = TypeVar("_E", Layout, OutputPosition, ChannelOrder)


def _choice(value: Any, kind: type[_E], key: str, problems: list[str], default: _E) -> _E:
    """``value`` as a member of ``kind`` (given as one or by its value); ``default`` when absent, or
    in place of an invalid value, whose problem is recorded."""
    if value is None:
        return default
    try:
        return kind(value.value if isinstance(value, Layout | OutputPosition | ChannelOrder) else value)
    except ValueError:
        allowed = " | ".join(str(v.value) for v in kind)
        problems.append(f"{key}={value!r} is not one of {allowed}; {_how(key)}")
        return default


def _positive_int(value: Any, key: str, problems: list[str]) -> int:
    """``value`` where it is an integer >= 1; 1 when absent, or in place of an invalid value (recorded)."""
    if value is None:
        return 1
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1:
        return int(value)  # numpy integers too
    problems.append(f"{key}={value!r} must be a positive integer; {_how(key)}")
    return 1


def _range(value: Any, problems: list[str]) -> tuple[float, float]:
    """(lo, hi) floats with lo < hi; (0, 1) when absent, or in place of an invalid value (recorded)."""
    if value is None:
        return (0.0, 1.0)
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        lo, hi = 0.0, 0.0
    if not hi > lo:  # also catches NaN
        problems.append(
            f"value_range={_norm(value)!r} must be (lo, hi) with lo < hi, e.g. (0, 1), (-1, 1) or (0, 255); "
            f"{_how('value_range')}"
        )
        return (0.0, 1.0)
    return (lo, hi)


def _norm(value: Any) -> Any:
    if isinstance(value, Layout | OutputPosition | ChannelOrder):
        return value.value
    if isinstance(value, tuple | list) and value and not isinstance(value[0], int | float | str):
        return [state_json(v) for v in value]
    if isinstance(value, tuple | list):
        try:
            return [float(v) for v in value]
        except (TypeError, ValueError):
            return list(value)
    return value


def random_pixels(shape: tuple[int, ...], seed: int) -> npt.NDArray[np.float32]:
    """Uniform pixel values in 0..255, float: ``model_input`` rounds them for a uint8 input."""
    return np.random.default_rng(seed).uniform(0.0, 255.0, size=shape).astype(np.float32)


def model_input(pixels: npt.NDArray[Any], contract: Contract) -> torch.Tensor:
    """(B, T, 3, H, W) RGB pixel values 0..255 as the module takes them: in its layout and channel
    order, as uint8 or as float32 in its value range."""
    arranged = to_model_layout(pixels, contract.layout, contract.channel_order)
    if contract.uint8_input:
        return torch.from_numpy(np.ascontiguousarray(np.rint(arranged).clip(0, 255).astype(np.uint8)))
    lo, hi = contract.value_range
    scaled = arranged.astype(np.float32) * np.float32((hi - lo) / 255.0) + np.float32(lo)
    return torch.from_numpy(np.ascontiguousarray(scaled))


def state_shape(spec: StateLike, b: int, hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """As the runtime allocates it: (B, channels, ceil(H / scale), ceil(W / scale)) of the padded size."""
    h, w = hw
    return (b, spec.channels, -(-h // spec.scale), -(-w // spec.scale))
