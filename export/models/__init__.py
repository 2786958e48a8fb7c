"""Reference PyTorch models, for export and training only (torch comes with the export extra): the runtime
loads their ONNX files and never imports this package; tests/unit/test_runtime_is_torch_free.py checks."""

from export.models.conv3d import Conv3dEnhancer
from export.models.convgru import ConvGRUEnhancer, StateSpec
from export.models.convlstm import ConvLSTMEnhancer
from export.models.registry import ARCHITECTURES, MODEL_ATTRIBUTES, architecture_of, build
from export.models.streaming import StreamingEnhancer
from export.models.temporal_filter import MotionAdaptiveTemporalFilter

__all__ = [
    "ARCHITECTURES",
    "MODEL_ATTRIBUTES",
    "Conv3dEnhancer",
    "ConvGRUEnhancer",
    "ConvLSTMEnhancer",
    "MotionAdaptiveTemporalFilter",
    "StateSpec",
    "StreamingEnhancer",
    "architecture_of",
    "build",
]
