"""Reference PyTorch models, for export only: the runtime loads their ONNX files and never imports torch."""

from streamer.models.temporal_filter import MotionAdaptiveTemporalFilter

__all__ = ["MotionAdaptiveTemporalFilter"]
