"""What every path of ``streamer bench latency`` shares: the run's settings, the camera that stamps
each frame's number into its pixels, the hook that notes how each measured frame left the pipeline, and
the figures made from the frames a player saw. ``streamer bench keepalive`` and ``streamer bench live``
run the same camera and settings."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import av
import numpy as np
from av.packet import Packet
from av.stream import Stream

from streamer.assets import DEFAULT_MODEL
from streamer.config import Config, GateConfig, KeepAliveConfig, LatencyConfig, ModelConfig
from streamer.engine.pipeline import Outcome, Pipeline, PipelineReport
from streamer.engine.telemetry import Stage
from streamer.engine.tiers import AUTO
from streamer.errors import ConfigError
from streamer.frame import Frame
from streamer.media import framecode
from streamer.sources.rtsp import Reader

if TYPE_CHECKING:
    from streamer.serving.service import Service, StreamResult

__all__ = [
    "CAMERA_X264",
    "PATHS",
    "SETUP_S",
    "Camera",
    "PathResult",
    "Recorder",
    "Settings",
    "Skipped",
    "TierShift",
    "abandon",
    "finish",
    "join_threads",
    "parse_model",
    "parse_size",
    "path_result",
    "service_report",
    "stage_means",
    "tier_moves",
]

PATHS = ("rtsp", "webrtc")
SETUP_S = 30.0
"""Wall-clock allowance per path beyond the frames' own duration: relay, peers, model, drain."""
CAMERA_X264 = {"preset": "ultrafast", "tune": "zerolatency", "bf": "0"}
"""The bench camera's libx264 options, besides a keyframe a second."""
VP8_BITRATE = 1_500_000
"""A WebRTC camera encoded ahead: aiortc's VP8 ceiling, which its publisher reaches on loopback."""


@dataclass(frozen=True, slots=True)
class Settings:
    width: int = 640
    height: int = 360
    fps: int = 30
    frames: int = 300
    """Frames measured per path, after the warm-up."""
    warmup: int = 60
    gate: bool = True
    paths: tuple[str, ...] = PATHS
    model: Path | Literal["auto"] | None = None
    """The ONNX model; None is the shipped default (named, where a live source would otherwise take
    ``auto``), ``auto`` the tier ``model: auto`` chooses."""
    budget_ms: float | None = None
    """latency.budget_ms of the pipeline; None enhances every frame however late."""
    threads: int | None = None
    """model.threads (onnxruntime's intra-op threads); None: its default."""
    encoder_threads: int | None = None
    """The RTSP sink's libx264 threads; None: libx264's choice."""
    workers: int | None = None
    """model.workers (windows run at once); None: its default."""
    reader: Reader = "auto"
    """The RTSP path's ``source.reader``, and how its player reads: ``auto``, each frame as its last packet
    arrives; ``ffmpeg``, FFmpeg's reader, one frame period later."""
    camera_ahead: bool = False
    """The RTSP camera encodes every frame before the run and only sends packets during it, as an IP
    camera whose encoder is its own chip: the machine's cores are left to streamer (and the player)."""
    headroom: float | None = None
    """``model.headroom`` for ``model: auto`` (None: its default)."""
    load: tuple[float, float] | None = None
    """The RTSP path: another process keeps one core busy from the first to the second second after the
    camera starts, as a neighbour on the host would (None: no load)."""

    def config(self, **sections: Any) -> Config:
        """The pipeline's config for one path: its source and sink plus this run's model, gate, budget.
        No keep-alive: a repeated frame would be counted as received and measure nothing; no blend: the
        model runs on every frame, whatever the camera's quantizer, which is what is measured."""
        return Config(
            model=ModelConfig(
                path=self.model or DEFAULT_MODEL,
                threads=self.threads,
                workers=self.workers,
                blend="off",
                **({} if self.headroom is None else {"headroom": self.headroom}),
            ),
            gate=GateConfig(enabled=self.gate),
            latency=LatencyConfig(budget_ms=self.budget_ms),
            keepalive=KeepAliveConfig(enabled=False),
            **sections,
        )

    @property
    def tail(self) -> int:
        """Frames sent after the measured ones, so these leave the window and the parsers (half a second)."""
        return math.ceil(self.fps / 2)

    @property
    def total(self) -> int:
        return self.warmup + self.frames + self.tail

    @property
    def cap_s(self) -> float:
        """A path's wall-clock limit."""
        return self.total / self.fps + SETUP_S


@dataclass(frozen=True, slots=True)
class PathResult:
    """One path's figures; latencies in ms, end to end unless named otherwise."""

    path: str
    route: str
    codec: str
    sent: int
    """Measured frames the camera sent."""
    received: int
    """Decoded frames carrying a measured frame's number, repeats (reused frames) included."""
    lost: int
    measured: int
    """Numbers seen for the first time: the latency samples."""
    unreadable: int
    """Decoded frames whose number could not be read (none expected)."""
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    lookahead_frames: int
    lookahead_ms: float
    rest_p50_ms: float | None
    """p50 minus the lookahead: processing and transport."""
    outside_p50_ms: float | None
    """Per frame, end to end minus the time inside the pipeline (arrival to written): the encodes,
    transports and decodes around it."""
    pipeline_p50_ms: float | None
    """Arrival to written inside the pipeline, over the measured frames: what its PipelineReport records
    for each frame."""
    pipeline_p95_ms: float | None
    pipeline_p99_ms: float | None
    report_frames: int
    """Frames the pipeline wrote, warm-up and tail included; its PipelineReport's latency covers them all."""
    report_p50_ms: float | None
    report_p95_ms: float | None
    report_p99_ms: float | None
    outcomes: dict[str, int]
    """How the measured frames left the pipeline."""
    source_dropped: int
    timed_out: bool
    model: str
    """The model the pipeline ran on (``model: auto``: the tier it chose)."""
    moves: tuple[TierShift, ...] = ()
    """``model: auto``'s tier moves during the run (the RTSP path, which runs a service)."""
    stages_ms: dict[str, float] = field(default_factory=dict)
    """Mean ms per frame (or window) in each of the pipeline's stages over the whole run, as the service's
    ``streamer_stage_seconds`` counted them (the RTSP path, which runs a service)."""


@dataclass(frozen=True, slots=True)
class TierShift:
    """A tier move seen in a run: seconds after the camera started, from which model to which, why."""

    after_s: float
    tier_from: str
    tier_to: str
    reason: str


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str
    reason: str


class Camera:
    """FFmpeg's moving testsrc2 with each frame's number stamped in; notes when each frame was captured."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.captured: dict[int, float] = {}
        size = f"{settings.width}x{settings.height}"
        self._container = av.open(f"testsrc2=size={size}:rate={settings.fps}", format="lavfi")
        self._frames = self._container.decode(video=0)

    def frame(self, index: int) -> av.VideoFrame:
        """Frame ``index`` as the encoder takes it; blocking (decode, stamp, convert)."""
        pixels = np.asarray(next(self._frames).to_ndarray(format="rgb24"), dtype=np.uint8)
        return av.VideoFrame.from_ndarray(framecode.stamp(pixels, index), format="rgb24")

    def capture(self, index: int) -> None:
        self.captured[index] = time.monotonic()

    def encode_all(self, codec_name: str = "libx264") -> list[Packet[Stream]]:
        """Every frame of the run encoded now (blocking: seconds per thousand frames), for a camera that
        sends them at the frame rate, as an IP camera or a browser encodes on its own chip, a keyframe
        a second. ``libx264``: as the RTSP camera encodes, no global header (the parameter sets travel
        in band, before each keyframe); ``libvpx``: VP8 as aiortc's publisher encodes it, at the
        bitrate its congestion control reaches on loopback."""
        s = self.settings
        codec = av.VideoCodecContext.create(codec_name, "w")
        assert isinstance(codec, av.VideoCodecContext)
        codec.width, codec.height, codec.pix_fmt = s.width, s.height, "yuv420p"
        codec.time_base, codec.framerate = Fraction(1, s.fps), Fraction(s.fps)
        if codec_name == "libvpx":
            codec.bit_rate = VP8_BITRATE
            codec.options = {"deadline": "realtime", "lag-in-frames": "0", "g": str(s.fps)}
        else:
            codec.options = CAMERA_X264 | {"g": str(s.fps)}
        packets: list[Packet[Stream]] = []
        for index in range(s.total):
            frame = self.frame(index)
            frame.pts, frame.time_base = index, codec.time_base
            packets += codec.encode(frame)
        packets += codec.encode(None)
        return packets

    def close(self) -> None:
        self._container.close()


def _percentiles(samples: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    if not samples:
        return None, None, None
    p50, p95, p99 = np.percentile(np.asarray(samples, dtype=np.float64), [50, 95, 99])
    return float(p50), float(p95), float(p99)


class Recorder:
    """The pipeline's output hook: how each measured frame left, and how long it was inside."""

    def __init__(self, measured: range) -> None:
        self.measured = measured
        self.outcomes: dict[int, Outcome] = {}
        self.inside: dict[int, float] = {}

    def __call__(self, source: Frame, sent: Frame, outcome: Outcome) -> None:
        code = framecode.read(source.pixels)
        if code is not None and code in self.measured:
            self.outcomes[code] = outcome
            self.inside[code] = time.monotonic() - source.arrival


def path_result(
    path: str,
    route: str,
    codec: str,
    settings: Settings,
    camera: Camera,
    arrivals: Sequence[tuple[int | None, float]],
    recorder: Recorder,
    report: PipelineReport,
    timed_out: bool,
) -> PathResult:
    measured = recorder.measured
    sent = sum(1 for code in measured if code in camera.captured)
    received = sum(1 for code, _ in arrivals if code in measured)
    first: dict[int, float] = {}
    for code, at in arrivals:
        if code is not None and code in measured and code not in first:
            first[code] = at
    e2e = [(at - camera.captured[code]) * 1000 for code, at in first.items()]
    outside = [
        (at - camera.captured[code] - recorder.inside[code]) * 1000
        for code, at in first.items()
        if code in recorder.inside
    ]
    p50, p95, p99 = _percentiles(e2e)
    inside = _percentiles([recorder.inside[code] * 1000 for code in first if code in recorder.inside])
    lookahead_ms = report.lookahead_frames * 1000 / settings.fps
    counts = collections.Counter(o.value for o in recorder.outcomes.values())
    return PathResult(
        path=path,
        route=route,
        codec=codec,
        sent=sent,
        received=received,
        lost=max(0, sent - received),
        measured=len(first),
        unreadable=sum(1 for code, _ in arrivals if code is None),
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        lookahead_frames=report.lookahead_frames,
        lookahead_ms=lookahead_ms,
        rest_p50_ms=None if p50 is None else p50 - lookahead_ms,
        outside_p50_ms=_percentiles(outside)[0],
        pipeline_p50_ms=inside[0],
        pipeline_p95_ms=inside[1],
        pipeline_p99_ms=inside[2],
        report_frames=report.frames_out,
        report_p50_ms=report.latency_p50_ms,
        report_p95_ms=report.latency_p95_ms,
        report_p99_ms=report.latency_p99_ms,
        outcomes={o.value: counts[o.value] for o in Outcome if counts[o.value]},
        source_dropped=report.source_dropped,
        timed_out=timed_out,
        model=report.model,
    )


async def finish(pipeline: Pipeline, running: asyncio.Task[Any], deadline: float) -> bool:
    """Waits for the pipeline to end by itself until ``deadline``, else stops it; True if it was stopped."""
    try:
        await asyncio.wait_for(asyncio.shield(running), max(0.0, deadline - time.monotonic()))
        return False
    except TimeoutError:
        pipeline.stop()
        await asyncio.wait_for(running, 20)
        return True


async def abandon(pipeline: Pipeline, running: asyncio.Task[Any] | None) -> None:
    """After a failure elsewhere: stop a pipeline still running and let it close its source and sink."""
    if running is None or running.done():
        return
    pipeline.stop()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(running, 20)


def join_threads(*threads: threading.Thread) -> None:
    """Waits a while for each started thread; they are daemons, so one that hangs cannot block exit."""
    for thread in threads:
        if thread.ident is not None:
            thread.join(10)


def parse_model(text: str) -> Path | Literal["auto"]:
    """A ``--model`` argument: ``auto``, or an exported .onnx file that exists."""
    if text == AUTO:
        return AUTO
    if not Path(text).is_file():
        raise ConfigError(f"--model {text!r} is not a file; pass an exported .onnx model or auto")
    return Path(text)


def parse_size(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit():
        raise ConfigError(f"--size {text!r} is not WIDTHxHEIGHT; write e.g. --size 640x360")
    width, height = int(w), int(h)
    least = (framecode.COLUMNS * framecode.CELL, framecode.ROWS * framecode.CELL)
    if width % 2 or height % 2 or width < least[0] or height < least[1]:
        raise ConfigError(
            f"--size {text!r} must be even on both sides (H.264 4:2:0) and at least {least[0]}x{least[1]} "
            "to carry the frame number"
        )
    return width, height


def tier_moves(service: Service, camera_at: float) -> tuple[TierShift, ...]:
    """The stream's tier moves, timed from the camera's start."""
    retier = next(iter(service.runners.values())).retier
    moves = retier.moves if retier is not None else []
    return tuple(TierShift(m.at - camera_at, m.tier_from, m.tier_to, m.reason) for m in moves)


def service_report(results: list[StreamResult]) -> PipelineReport:
    """The one stream's report, or the error that ended it, raised."""
    (result,) = results
    if result.error is not None:
        raise result.error
    assert result.report is not None
    return result.report


def stage_means(service: Service) -> dict[str, float]:
    """The one stream's mean ms per frame in each stage the service's metrics timed."""
    (stream,) = service.runners
    registry = service.metrics.registry
    means = {}
    for stage in Stage:
        labels = {"stream": stream, "stage": stage.value}
        total = registry.get_sample_value("streamer_stage_seconds_sum", labels)
        count = registry.get_sample_value("streamer_stage_seconds_count", labels)
        if total is not None and count:
            means[stage.value] = 1000.0 * total / count
    return means
