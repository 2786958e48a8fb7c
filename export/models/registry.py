"""The architectures the tooling can build by name, and the attributes every model module exposes.

Training checkpoints and the exporter store a model as ``(architecture name, config())``; ``build``
turns that back into a module. Each module exposes ``t``, ``output_position``, ``layout``,
``pad_multiple``, ``value_range``, ``state_specs`` (empty for stateless models) and ``config()``, so
the exporter writes the runtime's metadata from the module itself instead of from flags that could
disagree with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from export.models.conv3d import Conv3dEnhancer
from export.models.convgru import ConvGRUEnhancer
from export.models.convlstm import ConvLSTMEnhancer
from export.models.streaming import StreamingEnhancer
from export.models.temporal_filter import MotionAdaptiveTemporalFilter
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

__all__ = ["ARCHITECTURES", "MODEL_ATTRIBUTES", "architecture_of", "build"]

ARCHITECTURES: dict[str, Callable[..., nn.Module]] = {
    "temporal_filter": MotionAdaptiveTemporalFilter,
    "conv3d": Conv3dEnhancer,
    "convgru": ConvGRUEnhancer,
    "convlstm": ConvLSTMEnhancer,
    "streaming": StreamingEnhancer,
}
"""Name -> factory taking the model's ``config()`` keys as keyword arguments."""

MODEL_ATTRIBUTES = ("t", "output_position", "layout", "pad_multiple", "value_range", "state_specs")
"""What a module must carry for the exporter to describe it to the runtime."""


def build(name: str, **kwargs: Any) -> nn.Module:
    """A fresh module of architecture ``name``; ``position`` may be an OutputPosition or its value."""
    factory = ARCHITECTURES.get(name)
    if factory is None:
        raise ConfigError(f"unknown architecture {name!r}; choose one of {sorted(ARCHITECTURES)}")
    if isinstance(kwargs.get("position"), str):
        try:
            kwargs["position"] = OutputPosition(kwargs["position"])
        except ValueError:
            allowed = " | ".join(p.value for p in OutputPosition)
            raise ConfigError(f"position {kwargs['position']!r} is not one of {allowed}") from None
    try:
        return factory(**kwargs)
    except TypeError as err:
        raise ConfigError(f"architecture {name!r} does not take arguments {sorted(kwargs)}: {err}") from err


def architecture_of(module: nn.Module) -> str | None:
    """The registry name of ``module``'s class, or None for a model from outside the registry."""
    for name, factory in ARCHITECTURES.items():
        if type(module) is factory:
            return name
    return None
