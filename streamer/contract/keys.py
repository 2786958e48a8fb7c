"""The contract's vocabulary: the metadata keys an ONNX file describes itself with, the fields of the
JSON card beside it, and the tensor names a streaming model's graphs take. Each is spelled here once,
so a key cannot drift between the side that writes it and the side that reads it."""

from __future__ import annotations

from typing import Final

__all__ = ["CARD_BYTES_KEY", "CARD_REACH_KEY", "FRAME_INPUT", "NAMESPACE", "TARGET_INPUT", "Key"]

NAMESPACE: Final = "streamer."
"""The prefix of every metadata key and of the tensors and graphs the runtime adds to a model."""


class Key:
    """The ONNX metadata keys (``metadata_props``) of the model contract."""

    NAME: Final = "streamer.name"
    """The model's name in logs, ``/streams`` and the tier table."""
    T: Final = "streamer.t"
    """Frames in a window, fixed at export."""
    LAYOUT: Final = "streamer.layout"
    """NTCHW, NCTHW, channel-stacked or per-frame (``streamer.backend.base.Layout``)."""
    OUTPUT_POSITION: Final = "streamer.output_position"
    """Which frame of the window the output is: center or last."""
    VALUE_RANGE: Final = "streamer.value_range"
    """``lo,hi`` of the pixels the model takes and gives (``0,1`` by default)."""
    PAD_MULTIPLE: Final = "streamer.pad_multiple"
    """Frames are padded to a multiple of this on each side."""
    CHANNEL_ORDER: Final = "streamer.channel_order"
    """RGB or BGR."""
    SCALE: Final = "streamer.scale"
    """The output's size over the input's (an upscaler: 2)."""
    STATE: Final = "streamer.state"
    """A recurrent model's state tensors, as a JSON list of ``{input, output, channels, scale}``."""
    STRENGTH_DEFAULT: Final = "streamer.strength_default"
    """The strength a strength model takes before a stream's estimate exists."""
    STRENGTH_CURVE: Final = "streamer.strength_curve"
    """A strength model's measured curve from noise estimate to strength (``auto``)."""
    BLEND: Final = "streamer.blend"
    """Do no harm: ``QP_NONE:QP_FULL,SIGMA_NONE:SIGMA_FULL`` (``streamer.core.blend``)."""
    ENCODER: Final = "streamer.encoder"
    """A streaming model's per-frame encoder graph, a file beside the fusion graph."""
    FEATURES: Final = "streamer.features"
    """A streaming model's cached feature maps, as a JSON list."""
    ARCHITECTURE: Final = "streamer.architecture"
    """The module's construction arguments, as JSON, so ``export.recover`` can rebuild it."""
    INT8: Final = "streamer.int8"
    """How an INT8 model was quantized, as JSON (``export.quantize``)."""
    ENCODER_MODEL: Final = "streamer.encoder_model"
    """On a Triton server: the model serving a streaming model's encoder."""
    FUSION_MODEL: Final = "streamer.fusion_model"
    """On a Triton server: the fusion model an encoder model belongs to."""


CARD_BYTES_KEY: Final = "activation_bytes_per_pixel"
"""The model card's field (``MODEL.json`` beside ``MODEL.onnx``) that memory admission reads."""

CARD_REACH_KEY: Final = "reach_px"
"""The model card's field the tile gate's halo reads (``gate.halo: null``)."""


FRAME_INPUT: Final = "frame"
"""A streaming model's encoder takes one frame under this name."""

TARGET_INPUT: Final = "target"
"""A streaming model's fusion graph takes the window's output frame under this name."""
