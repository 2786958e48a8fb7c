"""The model contract: what a model file promises the runtime, in one place for both sides.

- :mod:`~streamer.contract.keys`: the metadata keys, the card's fields and a streaming model's tensor
  names, each spelled once;
- :mod:`~streamer.contract.write`: the metadata an exporter (``export``) writes;
- :mod:`~streamer.contract.read`: the one reader the runtime, the Triton repository and the tools use,
  which turns a model's graph and metadata into its description or refuses it naming the rule it breaks.

The graphs the runtime builds around a model name their own tensors under :data:`NAMESPACE` too, apart
from any name a model could use.
"""

from __future__ import annotations

from streamer.backend.base import STRENGTH
from streamer.contract.keys import CARD_BYTES_KEY, CARD_REACH_KEY, FRAME_INPUT, NAMESPACE, TARGET_INPUT, Key
from streamer.contract.read import (
    Session,
    card_bytes_per_pixel,
    card_reach,
    encoder_path,
    read_contract,
    read_streaming_contract,
    strength_curve,
)
from streamer.contract.write import StateLike, metadata_props, state_json

__all__ = [
    "CARD_BYTES_KEY",
    "CARD_REACH_KEY",
    "FRAME_INPUT",
    "NAMESPACE",
    "STRENGTH",
    "TARGET_INPUT",
    "Key",
    "Session",
    "StateLike",
    "card_bytes_per_pixel",
    "card_reach",
    "encoder_path",
    "metadata_props",
    "read_contract",
    "read_streaming_contract",
    "state_json",
    "strength_curve",
]
