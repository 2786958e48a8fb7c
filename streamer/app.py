"""Builds a ready pipeline from a validated :class:`~streamer.config.Config`: the one wiring place."""

from __future__ import annotations

from fractions import Fraction

from streamer.assets import DEFAULT_MODEL
from streamer.backend.base import Backend
from streamer.backend.onnx import OnnxBackend
from streamer.channel import DropPolicy
from streamer.config import (
    Config,
    FileSinkConfig,
    FileSourceConfig,
    RtspSinkConfig,
    RtspSourceConfig,
    SinkConfig,
    SourceConfig,
    WhepSinkConfig,
    WhipSourceConfig,
)
from streamer.errors import ConfigError
from streamer.pipeline import OutputHook, Pipeline
from streamer.sinks.base import Sink
from streamer.sinks.file import FileSink
from streamer.sinks.null import NullSink
from streamer.sinks.rtsp import RtspSink
from streamer.sources.base import Source
from streamer.sources.file import FileSource
from streamer.sources.rtsp import RtspSource
from streamer.sources.synthetic import SyntheticSource
from streamer.webrtc.server import WebRtcServer
from streamer.webrtc.sink import WhepSink
from streamer.webrtc.source import WhipSource

__all__ = ["build_backend", "build_pipeline", "build_server", "build_sink", "build_source"]


def build_server(config: Config) -> WebRtcServer | None:
    """The WHIP/WHEP server, when the source or the sink speaks WebRTC."""
    if not config.uses_webrtc:
        return None
    w = config.webrtc
    return WebRtcServer(
        w.host,
        w.port,
        w.token,
        w.ice_addresses,
        w.max_body_bytes,
        stun_servers=tuple(w.stun_servers),
        connect_timeout_s=w.connect_timeout_s,
    )


def _need(server: WebRtcServer | None, what: str) -> WebRtcServer:
    if server is None:
        raise ConfigError(f"{what} needs the WebRTC server; build it with build_server(config)")
    return server


def build_source(config: SourceConfig, queue_size: int, server: WebRtcServer | None = None) -> Source:
    if isinstance(config, FileSourceConfig):
        return FileSource(
            config.path,
            capacity=queue_size,
            policy=DropPolicy.BLOCK,
            max_frames=config.max_frames,
            noise_sigma=config.noise_sigma,
            seed=config.seed,
        )
    if isinstance(config, RtspSourceConfig):
        return RtspSource(
            config.url,
            transport=config.transport,
            open_timeout_s=config.open_timeout_s,
            read_timeout_s=config.read_timeout_s,
            stall_timeout_s=config.stall_timeout_s,
            capacity=queue_size,
            **config.backoff(),
        )
    if isinstance(config, WhipSourceConfig):
        return WhipSource(
            _need(server, "source.kind whip"),
            config.stream,
            open_timeout_s=config.open_timeout_s,
            end_on_unpublish=config.end_on_unpublish,
            capacity=queue_size,
            fps=Fraction(config.fps),
            relay_original=config.relay_original,
        )
    return SyntheticSource(
        width=config.width,
        height=config.height,
        fps=config.fps,
        frames=config.frames,
        pattern=config.pattern,
        noise_sigma=config.noise_sigma,
        seed=config.seed,
        realtime=config.realtime,
        capacity=queue_size,
    )


def build_sink(config: SinkConfig, server: WebRtcServer | None = None) -> Sink:
    if isinstance(config, FileSinkConfig):
        return FileSink(
            config.path,
            codec=config.codec,
            preset=config.preset,
            crf=config.crf,
            bitrate=config.bitrate,
            gop=config.gop,
        )
    if isinstance(config, RtspSinkConfig):
        return RtspSink(
            config.url,
            bitrate=config.bitrate,
            gop=config.gop,
            preset=config.preset,
            tune=config.tune,
            transport=config.transport,
            timeout_s=config.timeout_s,
            **config.backoff(),
        )
    if isinstance(config, WhepSinkConfig):
        return WhepSink(_need(server, "sink.kind whep"), config.stream)
    return NullSink()


def build_backend(config: Config) -> Backend:
    path = config.model.path if config.model.path is not None else DEFAULT_MODEL
    model = config.model
    return OnnxBackend(path, providers=model.providers, threads=model.threads, spin=model.spin)


def build_pipeline(
    config: Config, on_output: OutputHook | None = None, server: WebRtcServer | None = None
) -> Pipeline:
    """Raises ModelError/ModelMismatchError before any source is opened, so bad setups fail fast."""
    backend = build_backend(config)
    model = backend.info
    try:
        return Pipeline(
            build_source(config.source, config.runtime.queue_size, server),
            build_sink(config.sink, server),
            backend,
            config.window.build(model.t, model.output_position),
            config.gate.build(),
            config.latency.build(),
            on_skip=config.gate.on_skip,
            max_batch=config.runtime.max_batch,
            queue_size=config.runtime.queue_size,
            ring_capacity=config.runtime.ring_capacity,
            on_output=on_output,
            scene_cuts=config.window.build_cuts(),
        )
    except BaseException:
        backend.close()
        raise
