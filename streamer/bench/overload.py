"""``streamer bench overload``: a model slower than the frame rate, with and without a latency budget.

A live source (FFmpeg's ``testsrc2`` paced to the wall clock, as a camera: ``source.realtime``) sends
1280x720 frames at 30 fps into the default pipeline with the default model, which on a small CPU
enhances a few such frames a second. The gate is off, so every window asks for the model. Two runs, one
after the other in one process: the budget on (``latency.budget_ms``; frames that would miss it leave
unenhanced) and off (every frame waits for the model; the bounded queues fill and the live source
drops its oldest frames). Latency is arrival to written, per frame that arrived after the warm-up;
resident memory (VmRSS) is sampled every second.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from streamer.app import build_backend
from streamer.assets import DEFAULT_MODEL
from streamer.bench.harness import (
    LiveResult,
    Target,
    emit,
    markdown_targets,
    overrides,
    parse_size,
    percentiles,
    rss_growth,
    run_live,
    table_footer,
    wrapped,
)
from streamer.config import load_config
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine

__all__ = ["MAX_RSS_GROWTH", "OverloadReport", "OverloadRun", "check_targets", "format_table", "run_overload"]

MAX_RSS_GROWTH = 0.05
"""Resident memory may grow at most this much from the end of the warm-up to the end of a run."""
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class OverloadRun:
    label: str
    budget_ms: float | None
    seconds: float
    frames_in: int
    frames_out: int
    source_dropped: int
    """Frames the live source dropped (oldest first) because the pipeline was not taking them."""
    outcomes: dict[str, int]
    """All frames written, warm-up included."""
    outcomes_measured: dict[str, int]
    """Frames that arrived after the warm-up."""
    model_calls: int
    measured: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    rss_start_mib: float
    rss_warm_mib: float
    rss_end_mib: float
    rss_growth: float
    """(end - after warm-up) / after warm-up."""
    rss_curve_mib: tuple[float, ...]
    budget_estimate_ms: float
    budget_admitted: int
    """Windows the budget let through to the model, warm-up included."""


@dataclass(frozen=True, slots=True)
class OverloadReport:
    machine: Machine
    width: int
    height: int
    fps: int
    model: str
    provider: str
    warmup_s: float
    runs: tuple[OverloadRun, ...]
    targets: tuple[Target, ...]
    notes: tuple[str, ...]
    wall_s: float


def summarize(label: str, budget_ms: float | None, seconds: float, live: LiveResult) -> OverloadRun:
    r = live.report
    p50, p95, p99 = percentiles(live.latencies_ms)
    start = live.rss[0][1] / _MIB if live.rss else 0.0
    warm, end = rss_growth(live.rss, live.warmup_s, live.seconds)
    return OverloadRun(
        label=label,
        budget_ms=budget_ms,
        seconds=seconds,
        frames_in=r.frames_in,
        frames_out=r.frames_out,
        source_dropped=r.source_dropped,
        outcomes={k: v for k, v in r.outcomes.items() if v},
        outcomes_measured=live.outcomes,
        model_calls=r.model_calls,
        measured=len(live.latencies_ms),
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        max_ms=max(live.latencies_ms) if live.latencies_ms else None,
        rss_start_mib=start,
        rss_warm_mib=warm,
        rss_end_mib=end,
        rss_growth=(end - warm) / warm if warm else 0.0,
        rss_curve_mib=tuple(rss / _MIB for _, rss in live.rss),
        budget_estimate_ms=live.budget_estimate_ms,
        budget_admitted=live.budget_admitted,
    )


def check_targets(runs: Sequence[OverloadRun]) -> list[Target]:
    """p99 within the budget for runs that have one; memory flat after warm-up for every run."""
    targets = []
    for run in runs:
        if run.budget_ms is not None:
            ok = run.p99_ms is not None and run.p99_ms <= run.budget_ms
            detail = "no frame measured" if run.p99_ms is None else f"p99 {run.p99_ms:.1f} ms"
            targets.append(
                Target(f"{run.label}: end-to-end p99 within the {run.budget_ms:g} ms budget", ok, detail)
            )
    for run in runs:
        targets.append(
            Target(
                f"{run.label}: memory flat (RSS growth after warm-up under {MAX_RSS_GROWTH:.0%})",
                run.rss_growth < MAX_RSS_GROWTH,
                f"{run.rss_warm_mib:.1f} -> {run.rss_end_mib:.1f} MiB ({run.rss_growth:+.1%})",
            )
        )
    return targets


def run_overload(
    size: tuple[int, int], fps: int, seconds: float, warmup_s: float, budget_ms: float, extra: dict[str, Any]
) -> OverloadReport:
    watch = LoadWatch()
    started = time.monotonic()
    base = {
        "source.kind": "synthetic",
        "source.width": size[0],
        "source.height": size[1],
        "source.fps": fps,
        "source.frames": None,
        "source.realtime": True,
        "sink.kind": "null",
        "gate.enabled": False,
        "model.path": str(DEFAULT_MODEL),  # named: a live source would otherwise take auto's tier
        **extra,
    }
    runs = []
    for label, budget in (("budget on", budget_ms), ("budget off", None)):
        config = load_config(None, {**base, "latency.budget_ms": budget})
        runs.append(summarize(label, budget, seconds, run_live(config, seconds, warmup_s)))
    backend = build_backend(load_config(None, base).model)
    model = backend.info
    backend.close()
    config = load_config(None, base)
    notes = [
        f"source: testsrc2 paced at {fps} fps (source.realtime), queue {config.runtime.queue_size} frames, "
        f"dropping its oldest when full; gate {'on' if config.gate.enabled else 'off'}; runtime.max_batch "
        f"{config.runtime.batch_for(model.provider)}; latency.on_miss {config.latency.on_miss.value}",
        "latency: arrival -> written (null sink), over the frames that arrived after the first "
        f"{warmup_s:g} s of each {seconds:g} s run; it includes the window's lookahead",
        "RSS: this process's VmRSS every second; start = before the run's pipeline is built; warm and end "
        "= medians over the first and the last third (at most 30 s) after the warm-up; growth = end vs warm",
    ]
    for run in runs:
        if run.budget_ms is not None and not run.outcomes_measured.get("enhanced"):
            notes.append(
                f"{run.label}: no frame after the warm-up was enhanced: the budget's estimate of a call "
                f"is {run.budget_estimate_ms:.0f} ms (EWMA of measured calls; {run.budget_admitted} windows "
                f"admitted in all), above the {run.budget_ms:g} ms budget, and a call that is never admitted "
                "is never measured again, so the estimate cannot come down"
            )
    return OverloadReport(
        machine=watch.machine(),
        width=size[0],
        height=size[1],
        fps=fps,
        model=f"{model.name} (T={model.t}, {model.output_position.value})",
        provider=model.provider,
        warmup_s=warmup_s,
        runs=tuple(runs),
        targets=tuple(check_targets(runs)),
        notes=tuple(notes),
        wall_s=time.monotonic() - started,
    )


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _outcomes(run: OverloadRun) -> str:
    return ", ".join(f"{k} {v}" for k, v in run.outcomes_measured.items()) or "none"


def format_table(report: OverloadReport) -> str:
    header = (
        f"streamer bench overload: {report.width}x{report.height} @ {report.fps} fps live; {report.model} on "
        f"{report.provider}; {report.machine.line()}"
    )
    lines = [wrapped(header), ""]
    head = (
        f"{'run':<10}  {'in':>5}  {'out':>5}  {'src drop':>8}  {'calls':>5}  {'p50 ms':>7}  {'p95 ms':>7}  "
        f"{'p99 ms':>7}  {'max ms':>7}  {'RSS MiB start/warm/end':>22}  {'growth':>7}"
    )
    lines += [head, "-" * len(head)]
    for r in report.runs:
        rss = f"{r.rss_start_mib:.0f} / {r.rss_warm_mib:.0f} / {r.rss_end_mib:.0f}"
        lines.append(
            f"{r.label:<10}  {r.frames_in:>5}  {r.frames_out:>5}  {r.source_dropped:>8}  {r.model_calls:>5}  "
            f"{_ms(r.p50_ms):>7}  {_ms(r.p95_ms):>7}  {_ms(r.p99_ms):>7}  {_ms(r.max_ms):>7}  {rss:>22}  "
            f"{r.rss_growth:>+7.1%}"
        )
    lines.append("")
    for r in report.runs:
        budget = "no budget" if r.budget_ms is None else f"budget {r.budget_ms:g} ms"
        lines.append(f"{r.label} ({budget}), {r.measured} frames after warm-up: {_outcomes(r)}")
    lines += table_footer(report.notes, report.targets, report.wall_s)
    return "\n".join(lines)


def format_markdown(report: OverloadReport) -> str:
    lines = [
        "| run | frames in / out | dropped at source | enhanced / passed through / dropped (after warm-up) | "
        "p50 / p95 / p99 ms | RSS MiB start / warm / end | growth |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.runs:
        m = r.outcomes_measured
        budget = "" if r.budget_ms is None else f" ({r.budget_ms:g} ms)"
        lines.append(
            f"| {r.label}{budget} | {r.frames_in} / {r.frames_out} | {r.source_dropped} | "
            f"{m.get('enhanced', 0)} / {m.get('budget_passthrough', 0)} / {m.get('budget_drop', 0)} | "
            f"{_ms(r.p50_ms)} / {_ms(r.p95_ms)} / {_ms(r.p99_ms)} | "
            f"{r.rss_start_mib:.0f} / {r.rss_warm_mib:.0f} / {r.rss_end_mib:.0f} | {r.rss_growth:+.1%} |"
        )
    lines += [
        "",
        *markdown_targets(report.targets),
        "",
        f"{report.width}x{report.height} @ {report.fps} fps live, {report.runs[0].seconds:g} s per run, "
        f"{report.warmup_s:g} s warm-up; {report.model} on {report.provider}; {report.notes[0]}; "
        f"{report.machine.line()}.",
        *(f"\n{note[0].upper()}{note[1:]}." for note in report.notes[3:]),
    ]
    return "\n".join(lines) + "\n"


def run_from_args(args: argparse.Namespace) -> int:
    """The ``bench overload`` handler: prints the table, writes --json / --markdown when asked."""
    size = parse_size(args.size, "--size")
    if args.seconds <= 0 or not 0 <= args.warmup_s < args.seconds:
        raise ConfigError(
            "--seconds must be positive and --warmup-s in [0, --seconds); "
            f"got {args.seconds}, {args.warmup_s}"
        )
    if args.budget_ms <= 0:
        raise ConfigError(f"--budget-ms must be positive, got {args.budget_ms}")
    if not 1 <= args.fps <= 120:
        raise ConfigError(f"--fps {args.fps} is out of range; use 1..120")
    extra = overrides(args.set, args.model)
    report = run_overload(size, args.fps, args.seconds, args.warmup_s, args.budget_ms, extra)
    return emit(format_table(report), format_markdown(report), asdict(report), args.json, args.markdown)
