"""Builds the runtime's objects from a validated :class:`~streamer.config.Config` (sources, sinks,
backends, the core's stages, the servers' limits) and a ready pipeline from them: the one wiring place,
so the config's schema imports nothing of the runtime."""

from __future__ import annotations

import asyncio
import functools
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
    GateConfig,
    HttpConfig,
    IceServerConfig,
    KeepAliveConfig,
    LatencyConfig,
    ModelConfig,
    RtspSinkConfig,
    RtspSourceConfig,
    RuntimeConfig,
    SinkConfig,
    SourceConfig,
    StreamConfig,
    WebRtcConfig,
    WhepSinkConfig,
    WhipSourceConfig,
    WindowConfig,
    webrtc_name,
)
from streamer.core.blend import FULL, Blend
from streamer.core.gate import MotionGate, SceneCutDetector
from streamer.core.keepalive import KeepAlive
from streamer.core.latency import LatencyBudget
from streamer.core.windower import OutputPosition, Windower
from streamer.engine.pipeline import OpenHook, Outcome, OutputHook, Pipeline, ResizeHook
from streamer.engine.scheduler import InferenceScheduler
from streamer.engine.telemetry import StageObserver, ignore
from streamer.engine.tiers import AUTO, TierChoice, TierSelector
from streamer.errors import ConfigError
from streamer.frame import Frame, StreamInfo
from streamer.media.hwcodec import NVENC, X264, nvdec_unavailable, nvenc_unavailable
from streamer.serving.httpserve import HttpLimits
from streamer.sinks.base import Sink
from streamer.sinks.file import FileSink
from streamer.sinks.null import NullSink
from streamer.sinks.rtsp import RtspSink
from streamer.sinks.tee import TeeSink, sinks_of
from streamer.sources.base import Source
from streamer.sources.file import FileSource
from streamer.sources.rtsp import RtspSource
from streamer.sources.synthetic import SyntheticSource
from streamer.webrtc.ice import IceServer
from streamer.webrtc.server import WebRtcServer
from streamer.webrtc.sink import WhepSink
from streamer.webrtc.source import WhipSource

__all__ = [
    "build_backend",
    "build_blend",
    "build_cuts",
    "build_gate",
    "build_http_limits",
    "build_ice_server",
    "build_keepalive",
    "build_latency",
    "build_pipeline",
    "build_server",
    "build_sink",
    "build_source",
    "build_stream",
    "build_windower",
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
        ice_servers=tuple(build_ice_server(s) for s in w.ice_servers),
        advertise_ice_servers=w.advertise_ice_servers,
        cors_origins=w.cors_origins,
        connect_timeout_s=w.connect_timeout_s,
        publisher_stale_s=w.publisher_stale_s,
        max_sessions=w.max_sessions,
        max_players=w.max_players,
        limits=build_http_limits(w),
        shared_h264=w.shared_h264,
        player_bitrate=w.player_bitrate,
    )


def build_ice_server(config: IceServerConfig) -> IceServer:
    """A STUN or TURN server for the WebRTC server, its credential revealed."""
    return IceServer(tuple(config.urls), config.username, config.secret())


def build_http_limits(config: HttpConfig | WebRtcConfig) -> HttpLimits:
    """What one connection may take of an HTTP server: the operations endpoint's or the WebRTC server's."""
    return HttpLimits(
        header_timeout_s=config.header_timeout_s,
        body_timeout_s=config.body_timeout_s,
        idle_timeout_s=config.idle_timeout_s,
        max_request_line=config.max_request_line,
        max_header_bytes=config.max_header_bytes,
        max_headers=config.max_headers,
        max_connections=config.max_connections,
        max_connections_per_client=config.max_connections_per_client,
    )


def build_windower(config: WindowConfig, t: int, position: OutputPosition) -> Windower:
    """The stream's windows, of the model's ``t`` frames and output ``position`` where the config leaves
    them to the model."""
    return Windower(
        t=config.t if config.t is not None else t,
        stride=config.stride,
        position=config.position if config.position is not None else position,
        edge=config.edge,
        max_gap=config.max_gap_s,
    )


def build_cuts(config: WindowConfig) -> SceneCutDetector:
    """The editing cuts that end a run of windows."""
    return SceneCutDetector(config.scene_cut)


def build_gate(config: GateConfig) -> MotionGate:
    return MotionGate(
        enabled=config.enabled,
        downscale_width=config.downscale_width,
        pixel_threshold=config.pixel_threshold,
        area_on=config.area_on,
        area_off=config.area_off,
        hold=config.hold,
        refresh_s=config.refresh_s,
        tile=config.tile,
        halo=config.halo,
        max_region=config.max_region,
        tile_area=config.tile_area,
    )


def build_latency(config: LatencyConfig) -> LatencyBudget:
    return LatencyBudget(config.budget_ms, config.on_miss)


def build_keepalive(config: KeepAliveConfig, fps: float) -> KeepAlive:
    """A live output's keep-alive at the source's frame rate (30 where it has none)."""
    return KeepAlive(1.0 / fps if fps > 0 else 1.0 / 30, config.card_after_s)


def build_blend(model: ModelConfig) -> Blend | None:
    """The stream's blend; None: the model's own."""
    if model.blend == "auto":
        return None
    return FULL if model.blend == "off" else Blend.parse(model.blend, "model.blend")


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
            reader=config.reader,
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
"""``model.workers`` where unset, on the CPU provider: a call's threads wait for each other at every op,
so a core lent to a codec stalls all of them, while two calls of one thread each go on at their own
pace beside decode and encode (``streamer bench live --workers 1,2`` compares the two)."""


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
    selector: TierSelector, model: ModelConfig, info: StreamInfo, stream_id: str, streams: int = 1
) -> TierChoice:
    """``model: auto`` for a stream whose source has opened: at once from the calibrated cards where the
    selector was calibrated for these settings (counting ``streams`` on these cores, this one included),
    else by probes in a worker thread; logs the choice with every tier's figure (a warning when no tier
    keeps up even without ``model.headroom``'s margin)."""
    fps = float(info.fps) if info.fps > 0 else 30.0
    key = model.session_key()  # the same for every auto stream with these settings
    choice = selector.start(key, info.width, info.height, fps, model.headroom, streams)
    if choice is None:
        choice = await asyncio.to_thread(
            selector.choose,
            lambda path: build_backend(model.with_file(path)),
            key,
            info.width,
            info.height,
            fps,
            model.headroom,
        )
    (log.info if choice.keeps_up or choice.holds else log.warning)(
        "stream %s: %s", stream_id, choice.describe()
    )
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
        build_windower(stream.window, model.t, model.output_position),
        build_gate(stream.gate),
        build_latency(stream.latency),
        on_skip=stream.gate.on_skip,
        max_batch=runtime.batch_for(model.provider),
        queue_size=runtime.queue_size,
        ring_capacity=runtime.ring_capacity,
        on_output=_relaying(sink, on_output),
        scene_cuts=build_cuts(stream.window),
        scheduler=scheduler,
        observe=observe,
        on_open=on_open,
        on_resize=on_resize,
        tile=stream.model.tile,
        tile_overlap=stream.model.tile_overlap,
        keepalive=functools.partial(build_keepalive, stream.keepalive) if stream.keepalive.enabled else None,
        warm_up=stream.model.warm_up,
        strength=stream.model.strength,
        blend=build_blend(stream.model),
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
