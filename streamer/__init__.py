"""streamer: a real-time video enhancer for live camera feeds.

Frames come from a source (RTSP, WHIP, a file, a synthetic pattern), go through a temporal ONNX model in
windows of T frames, and leave through sinks (RTSP, WHEP, a file) within a latency budget. The names
below are the public API; each is imported on first use, so ``import streamer`` stays light and a
module of the pure core can be imported without the media and model libraries.

    from streamer import load_config, build_pipeline
    pipeline = build_pipeline(load_config(None, {"source.kind": "file", "source.path": "in.mp4"}))
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

# onnxruntime's Linux wheels report usage (the process, each session, model and provider) to Microsoft
# and keep a device identifier and an offline cache under ~/.cache, unless ORT_DISABLE_TELEMETRY is 1
# when onnxruntime loads. A sidecar beside camera streams sends nothing its operator did not ask for; an
# operator's own setting of the variable stands.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

if TYPE_CHECKING:
    __version__: str
    from streamer.app import build_backend, build_pipeline
    from streamer.backend.onnx import OnnxBackend
    from streamer.config import Config, load_config
    from streamer.engine.pipeline import Pipeline, PipelineReport
    from streamer.errors import StreamerError
    from streamer.frame import Frame, Hyperframe, StreamInfo
    from streamer.serving.service import Service

__all__ = [
    "Config",
    "Frame",
    "Hyperframe",
    "OnnxBackend",
    "Pipeline",
    "PipelineReport",
    "Service",
    "StreamInfo",
    "StreamerError",
    "__version__",
    "build_backend",
    "build_pipeline",
    "load_config",
]

_HOME = {
    "Config": ".config",
    "load_config": ".config",
    "build_backend": ".app",
    "build_pipeline": ".app",
    "OnnxBackend": ".backend.onnx",
    "StreamerError": ".errors",
    "Frame": ".frame",
    "Hyperframe": ".frame",
    "StreamInfo": ".frame",
    "Pipeline": ".engine.pipeline",
    "PipelineReport": ".engine.pipeline",
    "Service": ".serving.service",
}
"""Where each public name is defined, relative to this package."""


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read on first use: importlib.metadata loads threading, which the core avoids
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("streamer")
        except PackageNotFoundError:  # a source tree on sys.path, not installed
            return "0+unknown"
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'streamer' has no attribute {name!r}")
    return getattr(importlib.import_module(home, __name__), name)
