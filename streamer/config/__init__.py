"""Configuration: pydantic models, loaded from YAML and overridden by ``key.path=value`` pairs.

Only the CLI calls :func:`load_config`; library code takes the validated objects, and ``streamer.app``
builds the runtime's objects from them. Every model forbids unknown keys, so a typo fails loudly instead
of silently running on a default. The schema imports nothing of the runtime's libraries: the network
checks it shares with the runtime live here (:mod:`streamer.config.net`), the codecs' names in the leaf
:mod:`streamer.media.codecs`, the model settings' enums beside the backend port they configure.
"""

from __future__ import annotations

from streamer.config.load import load_config, parse_override, stream_config
from streamer.config.model import GpuWait, ModelConfig, Strength, TensorRtConfig, TritonModelConfig
from streamer.config.servers import PLACEHOLDER_TOKEN, HttpConfig, IceServerConfig, WebRtcConfig
from streamer.config.sinks import FileSinkConfig, NullSinkConfig, RtspSinkConfig, WhepSinkConfig
from streamer.config.sources import (
    FileSourceConfig,
    RtspSourceConfig,
    SyntheticSourceConfig,
    WhipSourceConfig,
)
from streamer.config.stages import (
    GPU_MAX_BATCH,
    GateConfig,
    KeepAliveConfig,
    LatencyConfig,
    RuntimeConfig,
    WindowConfig,
)
from streamer.config.streams import (
    DEFAULT_STREAM_ID,
    MAX_SINKS,
    Config,
    SinkConfig,
    SourceConfig,
    StreamConfig,
    webrtc_name,
)

__all__ = [
    "DEFAULT_STREAM_ID",
    "GPU_MAX_BATCH",
    "MAX_SINKS",
    "PLACEHOLDER_TOKEN",
    "Config",
    "FileSinkConfig",
    "FileSourceConfig",
    "GateConfig",
    "GpuWait",
    "HttpConfig",
    "IceServerConfig",
    "KeepAliveConfig",
    "LatencyConfig",
    "ModelConfig",
    "NullSinkConfig",
    "RtspSinkConfig",
    "RtspSourceConfig",
    "RuntimeConfig",
    "SinkConfig",
    "SourceConfig",
    "StreamConfig",
    "Strength",
    "SyntheticSourceConfig",
    "TensorRtConfig",
    "TritonModelConfig",
    "WebRtcConfig",
    "WhepSinkConfig",
    "WhipSourceConfig",
    "WindowConfig",
    "load_config",
    "parse_override",
    "stream_config",
    "webrtc_name",
]
