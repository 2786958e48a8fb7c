"""Builds a ready pipeline from a validated :class:`~streamer.config.Config`: the one wiring place."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from fractions import Fraction

from streamer.backend.base import Backend, on_cpu
from streamer.backend.onnx import OnnxBackend, resolve_providers
from streamer.config import (
    Config,
    FileSinkConfig,
    FileSourceConfig,
    ModelConfig,
    RtspSinkConfig,
    RtspSourceConfig,
    RuntimeConfig,
    SinkConfig,
    SourceConfig,
    StreamConfig,
    WhepSinkConfig,
    WhipSourceConfig,
    webrtc_name,
)
from streamer.engine.pipeline import OpenHook, Outcome, OutputHook, Pipeline, ResizeHook
from streamer.engine.scheduler import InferenceScheduler
from streamer.engine.telemetry import StageObserver, ignore
from streamer.engine.tiers import AUTO, TierChoice, TierSelector
from streamer.errors import ConfigError
from streamer.frame import Frame, StreamInfo
from streamer.media.hwcodec import NVENC, X264, nvdec_unavailable, nvenc_unavailable
from streamer.sinks.base import Sink
from streamer.sinks.file import FileSink
from streamer.sinks.null import NullSink
from streamer.sinks.rtsp import RtspSink
from streamer.sinks.tee import TeeSink, sinks_of
from streamer.sources.base import Source
from streamer.sources.file import FileSource
from streamer.sources.rtsp import RtspSource
from streamer.sources.synthetic import SyntheticSource
from streamer.webrtc.server import WebRtcServer
from streamer.webrtc.sink import WhepSink
from streamer.webrtc.source import WhipSource

__all__ = [
    "build_backend",
    "build_pipeline",
    "build_server",
    "build_sink",
    "build_source",
    "build_stream",
    "choose_tier",
    "probe_engines",
]

log = logging.getLogger(__name__)


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
        ice_servers=tuple(s.server() for s in w.ice_servers),
        advertise_ice_servers=w.advertise_ice_servers,
        cors_origins=w.cors_origins,
        connect_timeout_s=w.connect_timeout_s,
        publisher_stale_s=w.publisher_stale_s,
        max_sessions=w.max_sessions,
        max_players=w.max_players,
        limits=w.limits(),
    )


def _need(server: WebRtcServer | None, what: str) -> WebRtcServer:
    if server is None:
        raise ConfigError(f"{what} needs the WebRTC server; build it with build_server(config)")
    return server


def build_source(
    config: SourceConfig,
    queue_size: int,
    server: WebRtcServer | None = None,
    stream_id: str = "0",
    *,
    keep_audio: bool = False,
) -> Source:
    """``keep_audio``: a file, RTSP or WHIP source also hands its audio to the sink (which must write it, or
    the pipeline declines it); set where the sink writes audio (a file, RTSP or WHEP sink with
    ``audio: keep``)."""
    if isinstance(config, FileSourceConfig):
        return FileSource(
            config.path,
            stream_id,
            capacity=queue_size,
            max_frames=config.max_frames,
            noise_sigma=config.noise_sigma,
            seed=config.seed,
            keep_audio=keep_audio,
            realtime=config.realtime,
            loop=config.loop,
            decode=config.decode,
        )
    if isinstance(config, RtspSourceConfig):
        return RtspSource(
            config.url,
            stream_id,
            transport=config.transport,
            open_timeout_s=config.open_timeout_s,
            read_timeout_s=config.read_timeout_s,
            stall_timeout_s=config.stall_timeout_s,
            capacity=queue_size,
            keep_audio=keep_audio,
            decode=config.decode,
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
            keep_audio=keep_audio,
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
        stream_id=stream_id,
        capacity=queue_size,
    )


def probe_engines(stream: StreamConfig) -> None:
    """The NVDEC and NVENC probes the stream's settings need (each once a process), so that a worker
    thread, not the event loop, waits for a GPU's first use when a stream is added at run time."""
    if getattr(stream.source, "decode", "cpu") != "cpu":
        nvdec_unavailable()
    outputs = [stream.sink] if stream.sinks is None else stream.sinks
    if any(getattr(sink, "codec", X264) in ("auto", NVENC) for sink in outputs):
        nvenc_unavailable()


def build_outputs(stream: StreamConfig, queue_size: int, server: WebRtcServer | None = None) -> Sink:
    """The stream's sink, or a tee of its ``sinks`` (each output named by its kind and place). WHEP
    outputs relay the original frames too, unless the source is a WHIP one, which relays its own."""
    relay = stream.source.kind != "whip"
    if stream.sinks is None:
        return build_sink(stream.sink, server, relay_original=relay)
    names = [f"{i}:{sink.kind}" for i, sink in enumerate(stream.sinks)]
    sinks = [build_sink(sink, server, relay_original=relay) for sink in stream.sinks]
    live = next((s for s in sinks if isinstance(s, RtspSink)), None)
    for config, sink in zip(stream.sinks, sinks, strict=True):
        if isinstance(config, FileSinkConfig) and config.encode == "live" and isinstance(sink, FileSink):
            assert live is not None  # the config's validation says so
            sink.follow(live.encoding())
    return TeeSink(sinks, names, capacity=queue_size)


def _relaying(sink: Sink, on_output: OutputHook | None) -> OutputHook | None:
    """``on_output``, and first each source frame to the WHEP outputs that play the original."""
    relays = [s for s in _wheps(sink) if s.relays_original]
    if not relays:
        return on_output

    def relay(source: Frame, sent: Frame, outcome: Outcome) -> None:
        for whep in relays:
            whep.publish_original(source)
        if on_output is not None:
            on_output(source, sent, outcome)

    return relay


def build_sink(config: SinkConfig, server: WebRtcServer | None = None, relay_original: bool = False) -> Sink:
    if isinstance(config, FileSinkConfig):
        return FileSink(
            config.path,
            codec=config.codec,
            preset=config.preset,
            crf=config.crf,
            bitrate=config.bitrate,
            gop=config.gop,
            fragment_s=config.fragment_s,
            max_bytes=None if config.max_mb is None else config.max_mb * 1_000_000,
            min_free_bytes=config.min_free_mb * 1_000_000,
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
            threads=config.threads,
            codec=config.codec,
            keep_audio=config.audio == "keep",
            **config.backoff(),
        )
    if isinstance(config, WhepSinkConfig):
        return WhepSink(
            _need(server, "sink.kind whep"),
            config.stream,
            keep_audio=config.audio == "keep",
            relay_original=relay_original and config.original,
        )
    return NullSink()


CPU_WORKERS = 2
"""``model.workers`` where unset, on the CPU provider: beside decode and encode on 2 cores, two calls of
one thread each enhanced 80% of a live 360p30 stream (stream_t5_lite) where one call of two threads
enhanced 63% (``streamer bench live --workers 1,2``): a call's threads wait for each other at every op,
so a core lent to a codec stalls all of them, while two calls go on at their own pace."""


TRITON_WORKERS = 2
"""``model.workers`` where unset, for a model on a Triton server: one call on the wire while the next
is prepared, and windows of two streams in flight for the server's dynamic batcher."""


def build_backend(model: ModelConfig) -> Backend:
    if model.triton is not None:
        from streamer.backend.triton import TritonBackend

        remote = model.triton
        return TritonBackend(
            remote.url,
            remote.model,
            transport=remote.transport,
            deadline_ms=remote.deadline_ms,
            failures=remote.failures,
            cooldown_s=remote.cooldown_s,
            access_token=remote.access_token(),
            workers=model.workers or TRITON_WORKERS,
            declared=model.declared(),
        )
    path = model.file()
    threads = model.threads
    cores = os.cpu_count() or 1
    if threads is not None and threads > cores:
        log.warning("model.threads %d is more than this machine's %d cores; using %d", threads, cores, cores)
        threads = cores
    workers = model.workers
    if workers is None:
        first = resolve_providers(model.providers)[0]
        workers = min(CPU_WORKERS, cores) if on_cpu(first) and threads is None else 1
    if threads is None and workers > 1:
        threads = max(1, cores // workers)  # the cores split between the calls that run at once
    return OnnxBackend(
        path,
        providers=model.providers,
        threads=threads,
        spin=model.spin,
        workers=workers,
        declared=model.declared(),
        device_frames=model.device_frames,
        yuv420=model.yuv420,
        gpu_wait=model.gpu_wait,
        provider_options={"TensorrtExecutionProvider": model.tensorrt.provider_options()},
    )


async def choose_tier(
    selector: TierSelector, model: ModelConfig, info: StreamInfo, stream_id: str
) -> TierChoice:
    """``model: auto`` for a stream whose source has opened: probes in a worker thread, logs the choice
    with every tier's figure (a warning when no tier keeps up)."""
    fps = float(info.fps) if info.fps > 0 else 30.0
    choice = await asyncio.to_thread(
        selector.choose,
        lambda path: build_backend(model.with_file(path)),
        model.session_key(),  # the same for every auto stream with these settings
        info.width,
        info.height,
        fps,
        model.headroom,
    )
    (log.info if choice.keeps_up else log.warning)("stream %s: %s", stream_id, choice.describe())
    return choice


def build_stream(
    stream: StreamConfig,
    runtime: RuntimeConfig,
    backend: Backend,
    *,
    scheduler: InferenceScheduler | None = None,
    server: WebRtcServer | None = None,
    on_output: OutputHook | None = None,
    observe: StageObserver = ignore,
    on_open: OpenHook | None = None,
    on_resize: ResizeHook | None = None,
) -> Pipeline:
    """One stream's pipeline on a backend (and scheduler) it may share with other streams."""
    model = backend.info
    keep_audio = any(
        isinstance(sink, FileSinkConfig | RtspSinkConfig | WhepSinkConfig) and sink.audio == "keep"
        for sink in stream.outputs()
    )
    sink = build_outputs(stream, runtime.queue_size, server)
    pipeline = Pipeline(
        build_source(stream.source, runtime.queue_size, server, stream.id, keep_audio=keep_audio),
        sink,
        backend,
        stream.window.build(model.t, model.output_position),
        stream.gate.build(),
        stream.latency.build(),
        on_skip=stream.gate.on_skip,
        max_batch=runtime.batch_for(model.provider),
        queue_size=runtime.queue_size,
        ring_capacity=runtime.ring_capacity,
        on_output=_relaying(sink, on_output),
        scene_cuts=stream.window.build_cuts(),
        scheduler=scheduler,
        observe=observe,
        on_open=on_open,
        on_resize=on_resize,
        tile=stream.model.tile,
        tile_overlap=stream.model.tile_overlap,
        keepalive=stream.keepalive.build if stream.keepalive.enabled else None,
        warm_up=stream.model.warm_up,
        strength=stream.model.strength,
        blend=stream.model.build_blend(),
    )
    for whep in _wheps(sink):
        whep.server.declare_figures(whep.stream_id, _figures_of(stream, pipeline))
    return pipeline


def _wheps(sink: Sink) -> list[WhepSink]:
    return [s for s in sinks_of(sink) if isinstance(s, WhepSink)]


def _figures_of(stream: StreamConfig, pipeline: Pipeline) -> Callable[[], dict[str, object]]:
    """The viewer's live line: the stream's name, the model running and its live figures, and what it
    waits for before its first frame (a WHIP publisher, a camera, a file or pattern)."""
    whip = webrtc_name(stream.source, "whip")
    kind = stream.source.kind
    waiting = f"a publisher on /whip/{whip}" if whip else "the camera" if kind == "rtsp" else "the source"

    def figures() -> dict[str, object]:
        snap = pipeline.snapshot(time.monotonic())
        live = {"model": snap.model, "provider": snap.provider, **snap.live}
        return {"stream": stream.id, "waiting_for": waiting, **live}

    return figures


def build_pipeline(
    config: Config, on_output: OutputHook | None = None, server: WebRtcServer | None = None
) -> Pipeline:
    """The single stream of ``config``, with a backend of its own; raises ModelError/ModelMismatchError
    before any source is opened, so bad setups fail fast."""
    streams = config.stream_configs()
    if len(streams) != 1:
        raise ConfigError(
            f"build_pipeline builds one stream and the config has {len(streams)}; run them with a "
            "Service (streamer/serving/service.py)"
        )
    stream = streams[0]
    backend = build_backend(stream.model)
    on_open = None
    if stream.model.path == AUTO:
        selector = TierSelector()

        async def on_open(info: StreamInfo) -> tuple[InferenceScheduler, bool] | None:
            choice = await choose_tier(selector, stream.model, info, stream.id)
            if choice.path == stream.model.file():
                return None
            chosen = await asyncio.to_thread(build_backend, stream.model.with_file(choice.path))
            backend.close()  # the stand-in: nothing has run on it
            return InferenceScheduler(chosen, config.runtime.batch_for(chosen.info.provider)), True

    try:
        return build_stream(
            stream, config.runtime, backend, server=server, on_output=on_output, on_open=on_open
        )
    except BaseException:
        backend.close()
        raise
