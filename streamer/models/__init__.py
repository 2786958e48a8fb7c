"""Reference PyTorch models, for export only: the runtime loads their ONNX files and never imports torch."""

from streamer.models.conv3d import Conv3dEnhancer
from streamer.models.convgru import ConvGRUEnhancer, StateSpec
from streamer.models.registry import ARCHITECTURES, MODEL_ATTRIBUTES, architecture_of, build
from streamer.models.streaming import StreamingEnhancer
from streamer.models.temporal_filter import MotionAdaptiveTemporalFilter

__all__ = [
    "ARCHITECTURES",
    "MODEL_ATTRIBUTES",
    "Conv3dEnhancer",
    "ConvGRUEnhancer",
    "MotionAdaptiveTemporalFilter",
    "StateSpec",
    "StreamingEnhancer",
    "architecture_of",
    "build",
]
