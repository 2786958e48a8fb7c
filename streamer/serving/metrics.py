"""Prometheus metrics of a running service (prometheus-client), in a registry of its own.

Durations are histograms fed as they happen (stage times per stream, model-call times and batch sizes
per model). Everything the pipelines already count (frames, outcomes, gate decisions, reconnects,
queue depths, states) is read from them at scrape time by a collector, so nothing is counted twice.
Every metric is listed, with its labels, in :data:`METRICS` and in docs/operations.md.
"""

from __future__ import annotations

import importlib.metadata
import platform
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

import av
import onnxruntime as ort
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from streamer.core.health import StreamState
from streamer.engine.pipeline import Pipeline
from streamer.engine.retier import Retier
from streamer.engine.scheduler import CallObserver, InferenceScheduler
from streamer.engine.telemetry import Stage, StageObserver

__all__ = ["METRICS", "ServiceMetrics", "ServiceView", "StreamView"]

METRICS = {
    "streamer_stage_seconds": "histogram {stream, stage}: seconds per frame in each stage "
    "(decode, window_wait, gate, inference, encode, end_to_end)",
    "streamer_model_call_seconds": "histogram {model}: seconds per backend call",
    "streamer_batch_size": "histogram {model}: windows per backend call",
    "streamer_frames_in_total": "counter {stream}: frames read from the source",
    "streamer_frames_out_total": "counter {stream}: frames written to the sink",
    "streamer_frames_dropped_total": "counter {stream, reason}: frames that never left (source: the live "
    "hand-off was full; budget: latency.on_miss drop; sink: the RTSP sink was reconnecting; undecodable: "
    "the decoder could not make them from damaged or missing data)",
    "streamer_frames_passed_through_total": "counter {stream, reason}: frames written unenhanced "
    "(budget, gate, stride, unavailable: a model server that could not answer, a device out of memory; "
    "shed: model auto found no room for the stream beside the streams it enhances)",
    "streamer_frames_enhanced_total": "counter {stream}: frames written as the model enhanced them; with "
    "reused and passed through, the frames written",
    "streamer_frames_reused_total": "counter {stream}: frames of a skipped window that reused the last "
    "enhanced output",
    "streamer_frames_encoded_total": "counter {stream}: frames a streaming model encoded into cached "
    "features (once per frame of a run; 0 for other models)",
    "streamer_feature_cache_resets_total": "counter {stream}: runs that emptied a streaming model's feature "
    "cache (a reconnect, timestamp jump, scene cut or size change)",
    "streamer_budget_miss_warnings_total": "counter {stream}: warnings that over 5% of the frames due for "
    "enhancement left unenhanced (latency budget) over a minute: the tier, size or budget needs changing",
    "streamer_windows_total": "counter {stream}: windows the motion gate decided on",
    "streamer_windows_skipped_total": "counter {stream}: windows the gate let skip the model",
    "streamer_gate_skip_ratio": "gauge {stream}: skipped / decided windows",
    "streamer_noise_sigma": "gauge {stream}: the source's estimated noise sigma (0..255, as per-channel "
    "Gaussian noise; median of the last 15 one-a-second estimates); absent before the first",
    "streamer_quantizer": "gauge {stream}: the camera's mean H.264 quantizer as its decoder states it (QP "
    "0..51, median of the last 60 frames); absent where the decoder states none",
    "streamer_blend_weight": "gauge {stream}: the share of the model's change frames get now, by the "
    "quantizer and noise estimate (model.blend: do no harm); 1 = all of it",
    "streamer_model_calls_total": "counter {model}: backend calls",
    "streamer_model_windows_total": "counter {model}: windows enhanced by those calls",
    "streamer_model_pending_windows": "gauge {model}: windows waiting for a batch",
    "streamer_inference_provider_info": "gauge {model, provider}: 1 for the execution provider in use",
    "streamer_reconnects_total": "counter {stream, side}: RTSP reconnections of the source or the sink",
    "streamer_tier_moves_total": "counter {stream, direction}: moves of a model auto stream between tiers "
    "(down, up)",
    "streamer_connect_failures_total": "counter {stream}: RTSP source connection attempts that failed (a "
    "dead or silent camera counts here while it reads connecting)",
    "streamer_queue_depth": "gauge {stream, queue}: items in each bounded hand-off",
    "streamer_queue_capacity": "gauge {stream, queue}: capacity of each hand-off",
    "streamer_stream_state": "gauge {stream, state}: 1 for the stream's current state",
    "streamer_streams": "gauge: streams in this process",
    "streamer_build_info": "info {version, onnxruntime, av, python}: what this process runs",
}

_STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class StreamView(Protocol):
    """What a scrape reads of one stream."""

    @property
    def id(self) -> str: ...

    @property
    def pipeline(self) -> Pipeline: ...

    def state(self, now: float) -> StreamState: ...

    @property
    def retier(self) -> Retier | None: ...


class ServiceView(Protocol):
    """What a scrape reads of the service: handed in by the service, so this module never imports it."""

    @property
    def runners(self) -> Mapping[str, StreamView]: ...

    def schedulers(self) -> Sequence[InferenceScheduler]: ...


class ServiceMetrics:
    """The registry ``/metrics`` serves; observers for the pipelines and schedulers to call."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._stage = Histogram(
            "streamer_stage_seconds",
            METRICS["streamer_stage_seconds"],
            ["stream", "stage"],
            buckets=_STAGE_BUCKETS,
            registry=self.registry,
        )
        self._call = Histogram(
            "streamer_model_call_seconds",
            METRICS["streamer_model_call_seconds"],
            ["model"],
            buckets=_STAGE_BUCKETS,
            registry=self.registry,
        )
        self._batch = Histogram(
            "streamer_batch_size",
            METRICS["streamer_batch_size"],
            ["model"],
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )

    def bind(self, service: ServiceView) -> None:
        """Read the service's streams and models at every scrape."""
        self.registry.register(_ServiceCollector(service))

    def stage_observer(self, stream: str) -> StageObserver:
        children = {stage: self._stage.labels(stream, stage.value) for stage in Stage}

        def observe(stage: Stage, seconds: float) -> None:
            children[stage].observe(seconds)

        return observe

    def call_observer(self, model: str) -> CallObserver:
        call, batch = self._call.labels(model), self._batch.labels(model)

        def observe(size: int, seconds: float) -> None:
            call.observe(seconds)
            batch.observe(size)

        return observe

    def forget(self, stream: str) -> None:
        """Drop a removed stream's series, so a long-lived process does not keep them for ever."""
        for stage in Stage:
            self._stage.remove(stream, stage.value)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _ServiceCollector(Collector):
    def __init__(self, service: ServiceView) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        frames_in = _counter("streamer_frames_in_total", ["stream"])
        frames_out = _counter("streamer_frames_out_total", ["stream"])
        dropped = _counter("streamer_frames_dropped_total", ["stream", "reason"])
        passed = _counter("streamer_frames_passed_through_total", ["stream", "reason"])
        enhanced_frames = _counter("streamer_frames_enhanced_total", ["stream"])
        reused = _counter("streamer_frames_reused_total", ["stream"])
        encoded = _counter("streamer_frames_encoded_total", ["stream"])
        resets = _counter("streamer_feature_cache_resets_total", ["stream"])
        misses = _counter("streamer_budget_miss_warnings_total", ["stream"])
        windows = _counter("streamer_windows_total", ["stream"])
        skipped = _counter("streamer_windows_skipped_total", ["stream"])
        ratio = _gauge("streamer_gate_skip_ratio", ["stream"])
        noise = _gauge("streamer_noise_sigma", ["stream"])
        quantizer = _gauge("streamer_quantizer", ["stream"])
        weight = _gauge("streamer_blend_weight", ["stream"])
        reconnects = _counter("streamer_reconnects_total", ["stream", "side"])
        moves = _counter("streamer_tier_moves_total", ["stream", "direction"])
        failures = _counter("streamer_connect_failures_total", ["stream"])
        depth = _gauge("streamer_queue_depth", ["stream", "queue"])
        capacity = _gauge("streamer_queue_capacity", ["stream", "queue"])
        state = _gauge("streamer_stream_state", ["stream", "state"])
        now = time.monotonic()
        runners = list(self._service.runners.values())
        for runner in runners:
            sid, snap = runner.id, runner.pipeline.snapshot(now)
            counters, outcomes, gate = snap.counters, snap.outcomes, snap.gate
            frames_in.add_metric([sid], counters["in"])
            frames_out.add_metric([sid], counters["out"])
            dropped.add_metric([sid, "source"], snap.source_dropped)
            dropped.add_metric([sid, "budget"], outcomes["budget_drop"])
            dropped.add_metric([sid, "sink"], snap.sink_dropped)
            dropped.add_metric([sid, "undecodable"], counters["undecodable"])
            for reason in ("budget", "gate", "stride", "unavailable", "shed"):
                passed.add_metric([sid, reason], outcomes[f"{reason}_passthrough"])
            enhanced_frames.add_metric([sid], outcomes["enhanced"])
            reused.add_metric([sid], outcomes["reused"])
            encoded.add_metric([sid], snap.features.encoded)
            resets.add_metric([sid], snap.features.resets)
            misses.add_metric([sid], snap.misses.warnings)
            windows.add_metric([sid], gate.windows)
            skipped.add_metric([sid], gate.skipped)
            ratio.add_metric([sid], gate.skip_ratio)
            if snap.noise_sigma is not None:
                noise.add_metric([sid], snap.noise_sigma)
            if snap.quantizer is not None:
                quantizer.add_metric([sid], snap.quantizer)
            weight.add_metric([sid], snap.weight)
            connection = snap.connection
            reconnects.add_metric([sid, "source"], connection.reconnects if connection is not None else 0)
            reconnects.add_metric([sid, "sink"], snap.sink_reconnects)
            failures.add_metric([sid], connection.failures if connection is not None else 0)
            for queue in snap.queues:
                kind = queue.name.split(":", 1)[0]
                depth.add_metric([sid, kind], queue.depth)
                capacity.add_metric([sid, kind], queue.capacity)
            for output in snap.outputs or ():
                depth.add_metric([sid, f"output:{output.name}"], output.depth)
                capacity.add_metric([sid, f"output:{output.name}"], output.capacity)
            if runner.retier is not None:
                moves.add_metric([sid, "down"], runner.retier.downs)
                moves.add_metric([sid, "up"], runner.retier.ups)
            current = runner.state(now)
            for s in StreamState:
                state.add_metric([sid, s.value], 1.0 if s is current else 0.0)
        yield from (frames_in, frames_out, dropped, passed, enhanced_frames, reused, encoded, resets)
        yield from (windows, skipped, ratio, noise, quantizer, weight)
        yield from (misses, reconnects, failures, moves)
        yield from (depth, capacity, state)
        yield from self._models(len(runners))

    def _models(self, streams_running: int) -> Iterator[Metric]:
        """Each loaded model's calls, windows and queue, its provider; the streams; the build."""
        calls = _counter("streamer_model_calls_total", ["model"])
        enhanced = _counter("streamer_model_windows_total", ["model"])
        pending = _gauge("streamer_model_pending_windows", ["model"])
        provider = _gauge("streamer_inference_provider_info", ["model", "provider"])
        for scheduler in self._service.schedulers():
            stats = scheduler.stats()
            calls.add_metric([stats.model], stats.calls)
            enhanced.add_metric([stats.model], stats.windows)
            pending.add_metric([stats.model], stats.pending)
            provider.add_metric([stats.model, stats.provider], 1.0)
        streams = _gauge("streamer_streams", [])
        streams.add_metric([], streams_running)
        yield from (calls, enhanced, pending, provider, streams, _BUILD)


def _build_info() -> InfoMetricFamily:
    info = InfoMetricFamily("streamer_build", METRICS["streamer_build_info"])
    info.add_metric(
        [],
        {
            "version": _version("streamer"),
            "onnxruntime": ort.__version__,
            "av": av.__version__,
            "python": platform.python_version(),
        },
    )
    return info


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _counter(name: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name.removesuffix("_total"), METRICS[name], labels=labels)


def _gauge(name: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name], labels=labels)


_BUILD = _build_info()
