"""``streamer bench batching``: N streams sharing one model, cross-stream batching on versus off.

Each contender is one :class:`~streamer.serving.service.Service` running N synthetic streams that decode as
fast as the pipeline takes them (a file-like source: the model is the bottleneck) with the motion gate off, so
every frame's window runs the model. *on* batches up to ``--max-batch`` windows of any streams per call; *off*
runs one window per call (``runtime.max_batch: 1``). The two alternate (on, off, on, off, ...) so load from
elsewhere on the machine falls on both, and the table gives the median of the rounds for each, side by side,
with their ratios: model calls per second should fall, throughput rise. The model alone, on random windows of
the same size at batch 1 and at ``--max-batch``, shows how much of the difference is the runtime's own
per-window cost.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamer.app import build_backend
from streamer.bench.harness import Target, emit, format_targets, parse_size
from streamer.config import Config, load_config
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine
from streamer.serving.service import Service

__all__ = ["BatchingReport", "Round", "Side", "format_markdown", "run_batching", "run_from_args"]


@dataclass(frozen=True, slots=True)
class Round:
    """One run of one contender."""

    batching: bool
    seconds: float
    frames: int
    calls: int
    windows: int
    fairness: float
    """Fewest frames any stream wrote per second over most: 1.0 when every stream kept the same pace."""

    @property
    def fps(self) -> float:
        return self.frames / self.seconds

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.seconds

    @property
    def mean_batch(self) -> float:
        return self.windows / self.calls if self.calls else 0.0


@dataclass(frozen=True, slots=True)
class Side:
    """The median of one contender's rounds."""

    fps: float
    calls_per_s: float
    mean_batch: float
    fairness: float
    calls: int


@dataclass(frozen=True, slots=True)
class BatchingReport:
    streams: int
    size: tuple[int, int]
    frames: int
    max_batch: int
    max_wait_ms: float
    model: str
    provider: str
    on: Side
    off: Side
    rounds: list[Round]
    machine: Machine
    model_ms_per_window: dict[int, float]
    """The model alone (``Backend.infer`` on random windows of this size): median ms per window, by batch."""

    @property
    def throughput_ratio(self) -> float:
        return self.on.fps / self.off.fps

    @property
    def calls_ratio(self) -> float:
        return self.on.calls_per_s / self.off.calls_per_s

    def targets(self) -> list[Target]:
        return [
            Target(
                "model calls per second fall with batching on",
                self.calls_ratio < 1.0,
                f"{self.on.calls_per_s:.1f} vs {self.off.calls_per_s:.1f} calls/s ({self.calls_ratio:.2f}x)",
            ),
            Target(
                "throughput rises with batching on",
                self.throughput_ratio > 1.0,
                f"{self.on.fps:.1f} vs {self.off.fps:.1f} frames/s ({self.throughput_ratio:.2f}x)",
            ),
        ]


def _config(
    streams: int, size: tuple[int, int], frames: int, max_batch: int, wait_ms: float, model: Path | None
) -> Config:
    width, height = size
    source = {"kind": "synthetic", "width": width, "height": height, "frames": frames}
    return load_config(
        None,
        {
            "streams": [
                {"id": f"cam{i}", "source": {**source, "seed": i, "noise_sigma": 10.0}}
                for i in range(streams)
            ],
            "gate.enabled": False,
            "model.path": None if model is None else str(model),
            "runtime.max_batch": max_batch,
            "runtime.max_wait_ms": wait_ms,
        },
    )


async def _round(config: Config, batching: bool) -> tuple[Round, str, str]:
    service = Service(config)
    service.prepare()
    started = time.monotonic()
    results = await service.run()
    seconds = time.monotonic() - started
    failed = [r for r in results if r.report is None]
    if failed:
        raise ConfigError(f"stream {failed[0].stream_id} failed during the benchmark: {failed[0].error}")
    reports = [r.report for r in results if r.report is not None]
    (scheduler,) = service.schedulers()
    stats = scheduler.stats()
    paces = [r.frames_out / r.wall_s for r in reports]
    round_ = Round(
        batching=batching,
        seconds=seconds,
        frames=sum(r.frames_out for r in reports),
        calls=stats.calls,
        windows=stats.windows,
        fairness=min(paces) / max(paces),
    )
    return round_, stats.model, stats.provider


def _model_alone(config: Config, size: tuple[int, int], batches: tuple[int, ...]) -> dict[int, float]:
    backend = build_backend(config.model)
    try:
        width, height = size
        rng = np.random.default_rng(0)
        costs = {}
        for batch in batches:
            windows = rng.integers(0, 256, (batch, backend.info.t, 3, height, width), dtype=np.uint8)
            backend.infer(windows)
            times = []
            for _ in range(5):
                started = time.perf_counter()
                backend.infer(windows)
                times.append(time.perf_counter() - started)
            costs[batch] = statistics.median(times) * 1000.0 / batch
        return costs
    finally:
        backend.close()


def _side(rounds: list[Round]) -> Side:
    return Side(
        fps=statistics.median(r.fps for r in rounds),
        calls_per_s=statistics.median(r.calls_per_s for r in rounds),
        mean_batch=statistics.median(r.mean_batch for r in rounds),
        fairness=statistics.median(r.fairness for r in rounds),
        calls=int(statistics.median(r.calls for r in rounds)),
    )


def run_batching(
    streams: int = 8,
    size: tuple[int, int] = (320, 180),
    frames: int = 60,
    max_batch: int = 8,
    max_wait_ms: float = 5.0,
    repeats: int = 3,
    model: Path | None = None,
) -> BatchingReport:
    if streams < 1 or frames < 1 or repeats < 1 or max_batch < 2:
        raise ConfigError(
            f"--streams ({streams}), --frames ({frames}) and --repeats ({repeats}) must be at least 1, "
            f"--max-batch ({max_batch}) at least 2"
        )
    watch = LoadWatch()
    on = _config(streams, size, frames, max_batch, max_wait_ms, model)
    off = _config(streams, size, frames, 1, 0.0, model)
    asyncio.run(
        _round(_config(streams, size, 6, max_batch, max_wait_ms, model), True)
    )  # warm-up, not counted
    rounds: list[Round] = []
    name = provider = ""
    for _ in range(repeats):
        for config, batching in ((on, True), (off, False)):
            round_, name, provider = asyncio.run(_round(config, batching))
            rounds.append(round_)
    return BatchingReport(
        streams=streams,
        size=size,
        frames=frames,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        model=name,
        provider=provider,
        on=_side([r for r in rounds if r.batching]),
        off=_side([r for r in rounds if not r.batching]),
        rounds=rounds,
        machine=watch.machine(),
        model_ms_per_window=_model_alone(on, size, (1, max_batch)),
    )


def format_markdown(report: BatchingReport) -> str:
    def row(name: str, side: Side) -> str:
        return (
            f"| {name} | {side.fps:.1f} | {side.calls_per_s:.1f} | {side.mean_batch:.2f} | "
            f"{side.fairness:.2f} |"
        )

    w, h = report.size
    rounds = len(report.rounds) // 2
    lines = [
        "| batching | frames/s (all streams) | model calls/s | windows per call | slowest / fastest stream |",
        "|---|---:|---:|---:|---:|",
        row(f"on (max_batch {report.max_batch}, max_wait {report.max_wait_ms:g} ms)", report.on),
        row("off (max_batch 1)", report.off),
        f"| on / off | {report.throughput_ratio:.2f}x | {report.calls_ratio:.2f}x | | |",
        "",
        "The model alone on random windows of this size: "
        + ", ".join(f"{ms:.1f} ms per window at batch {b}" for b, ms in report.model_ms_per_window.items())
        + ".",
        "",
        f"streamer bench batching: {report.streams} streams of {w}x{h}, {report.frames} frames each, "
        f"gate off; {report.model} on {report.provider}; median of {rounds} alternating rounds per side; "
        f"{report.machine.line()}.",
    ]
    return "\n".join(lines)


def run_from_args(args: argparse.Namespace) -> int:
    report = run_batching(
        streams=args.streams,
        size=parse_size(args.size, "--size"),
        frames=args.frames,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        repeats=args.repeats,
        model=args.model,
    )
    table = format_markdown(report)
    data: dict[str, Any] = asdict(report)
    data["throughput_ratio"] = report.throughput_ratio
    data["calls_ratio"] = report.calls_ratio
    data["targets"] = [asdict(t) for t in report.targets()]
    printed = "\n".join([table, "targets:", *format_targets(report.targets())])
    return emit(printed, table + "\n", data, args.json, args.markdown)
