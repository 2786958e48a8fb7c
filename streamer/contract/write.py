"""The contract written: the ``streamer.*`` metadata an exporter puts in a model file, as strings."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from streamer.backend.base import ChannelOrder, Layout
from streamer.contract.keys import Key
from streamer.core.windower import OutputPosition

__all__ = ["StateLike", "metadata_props", "state_json"]


class StateLike(Protocol):
    """What a recurrent model's ``state_specs`` entries carry (``export.models.StateSpec`` does)."""

    @property
    def input(self) -> str: ...
    @property
    def output(self) -> str: ...
    @property
    def channels(self) -> int: ...
    @property
    def scale(self) -> int: ...


def state_json(spec: StateLike) -> dict[str, str | int]:
    return {"input": spec.input, "output": spec.output, "channels": spec.channels, "scale": spec.scale}


def metadata_props(
    *,
    name: str,
    t: int,
    layout: Layout,
    output_position: OutputPosition,
    value_range: tuple[float, float],
    pad_multiple: int,
    states: Sequence[StateLike] = (),
    channel_order: ChannelOrder = ChannelOrder.RGB,
    uint8_input: bool = False,
    uint8_output: bool = False,
    scale: int = 1,
    strength_default: float | None = None,
) -> dict[str, str]:
    """The ``streamer.*`` metadata_props the runtime reads, as strings. The channel order and scale are
    left out at their defaults, so files of the common kind stay as they were, and the value range
    where no tensor is float (uint8 in and out: the pixels themselves)."""
    meta = {
        Key.NAME: name,
        Key.T: str(t),
        Key.LAYOUT: layout.value,
        Key.OUTPUT_POSITION: output_position.value,
    }
    if not (uint8_input and uint8_output):
        lo, hi = value_range
        meta[Key.VALUE_RANGE] = f"{lo:g},{hi:g}"
    meta[Key.PAD_MULTIPLE] = str(pad_multiple)
    if channel_order is not ChannelOrder.RGB:
        meta[Key.CHANNEL_ORDER] = channel_order.value
    if scale != 1:
        meta[Key.SCALE] = str(scale)
    if states:
        meta[Key.STATE] = json.dumps([state_json(s) for s in states])
    if strength_default is not None:
        meta[Key.STRENGTH_DEFAULT] = f"{strength_default:g}"
    return meta
