"""``streamer bench soak``: a live stream for minutes on end, watching resident memory.

A wall-clock-paced synthetic source (640x360 at 30 fps, ``source.realtime``) runs through the default
pipeline with a model that keeps up on a small CPU (the fixed temporal filter by default) into the null
sink for ``--minutes``. The process's VmRSS is sampled every second; the curve is printed every
``--every-s`` seconds. The target: RSS at the end within 5% of RSS after the warm-up (each the median of
a window of samples, so one sample caught mid-call does not decide).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from typing import Any

from streamer.app import build_backend
from streamer.assets import TEMPORAL_FILTER
from streamer.bench.harness import (
    Target,
    emit,
    markdown_targets,
    overrides,
    parse_size,
    percentiles,
    rss_at,
    rss_growth,
    run_live,
    sparkline,
    table_footer,
    wrapped,
)
from streamer.config import load_config
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine

__all__ = ["MAX_RSS_GROWTH", "SoakReport", "check_targets", "format_markdown", "format_table", "run_soak"]

MAX_RSS_GROWTH = 0.05
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SoakReport:
    machine: Machine
    width: int
    height: int
    fps: int
    seconds: float
    warmup_s: float
    model: str
    provider: str
    frames_in: int
    frames_out: int
    source_dropped: int
    outcomes: dict[str, int]
    model_calls: int
    p50_ms: float | None
    p99_ms: float | None
    rss_start_mib: float
    rss_warm_mib: float
    rss_end_mib: float
    rss_peak_mib: float
    rss_growth: float
    """Of the medians: end vs warm."""
    rss_peak_warm_mib: float
    rss_peak_end_mib: float
    curve: tuple[tuple[float, float], ...]
    """(seconds, RSS MiB) every ``--every-s``."""
    sparkline: str
    """Every sample of the run, one character per few seconds."""
    targets: tuple[Target, ...]
    notes: tuple[str, ...]
    wall_s: float


def _growth(before: float, after: float) -> float:
    return (after - before) / before if before else 0.0


def check_targets(warm_mib: float, end_mib: float, peak_warm_mib: float, peak_end_mib: float) -> list[Target]:
    """Both the medians and the peaks of the first and last windows after warm-up must grow under 5%."""
    growth, peak = _growth(warm_mib, end_mib), _growth(peak_warm_mib, peak_end_mib)
    return [
        Target(
            f"RSS growth after warm-up under {MAX_RSS_GROWTH:.0%}",
            growth < MAX_RSS_GROWTH and peak < MAX_RSS_GROWTH,
            f"median {warm_mib:.1f} -> {end_mib:.1f} MiB ({growth:+.2%}), peak {peak_warm_mib:.1f} -> "
            f"{peak_end_mib:.1f} MiB ({peak:+.2%})",
        )
    ]


def run_soak(
    size: tuple[int, int], fps: int, seconds: float, warmup_s: float, every_s: float, extra: dict[str, Any]
) -> SoakReport:
    watch = LoadWatch()
    started = time.monotonic()
    config = load_config(
        None,
        {
            "source.kind": "synthetic",
            "source.width": size[0],
            "source.height": size[1],
            "source.fps": fps,
            "source.frames": None,
            "source.realtime": True,
            "sink.kind": "null",
            "model.path": str(TEMPORAL_FILTER),
            **extra,
        },
    )
    backend = build_backend(config.model)
    model = backend.info
    backend.close()
    live = run_live(config, seconds, warmup_s)
    r = live.report
    warm, end = rss_growth(live.rss, warmup_s, seconds)
    peak_warm, peak_end = rss_growth(live.rss, warmup_s, seconds, peak=True)
    samples = [(t, rss / _MIB) for t, rss in live.rss if t <= seconds]
    points = [0.0]
    while points[-1] + every_s <= seconds:
        points.append(points[-1] + every_s)
    curve = tuple((t, rss_at(live.rss, t) / _MIB) for t in points)
    step = max(1, len(samples) // 60)
    p50, _, p99 = percentiles(live.latencies_ms)
    notes = [
        f"source: testsrc2 paced at {fps} fps (source.realtime); gate "
        f"{'on' if config.gate.enabled else 'off'} (on_skip {config.gate.on_skip.value}); latency budget "
        f"{config.latency.budget_ms or 'none'}; null sink",
        f"RSS: VmRSS every second; warm and end = medians (and peaks) over the first and the last third (at "
        f"most 30 s) after the {warmup_s:g} s warm-up; growth = end vs warm; the sparkline draws one sample "
        f"every {step} s, scaled between {min(v for _, v in samples):.1f} and "
        f"{max(v for _, v in samples):.1f} MiB",
        "latency: arrival -> written, frames after the warm-up",
    ]
    return SoakReport(
        machine=watch.machine(),
        width=size[0],
        height=size[1],
        fps=fps,
        seconds=seconds,
        warmup_s=warmup_s,
        model=f"{model.name} (T={model.t}, {model.output_position.value})",
        provider=model.provider,
        frames_in=r.frames_in,
        frames_out=r.frames_out,
        source_dropped=r.source_dropped,
        outcomes={k: v for k, v in r.outcomes.items() if v},
        model_calls=r.model_calls,
        p50_ms=p50,
        p99_ms=p99,
        rss_start_mib=samples[0][1] if samples else 0.0,
        rss_warm_mib=warm,
        rss_end_mib=end,
        rss_peak_mib=max(v for _, v in samples) if samples else 0.0,
        rss_growth=_growth(warm, end),
        rss_peak_warm_mib=peak_warm,
        rss_peak_end_mib=peak_end,
        curve=curve,
        sparkline=sparkline([v for _, v in samples[::step]]),
        targets=tuple(check_targets(warm, end, peak_warm, peak_end)),
        notes=tuple(notes),
        wall_s=time.monotonic() - started,
    )


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _summary(report: SoakReport) -> str:
    outcomes = ", ".join(f"{k} {v}" for k, v in report.outcomes.items())
    return (
        f"{report.frames_in} frames in, {report.frames_out} out, {report.source_dropped} dropped at the "
        f"source; {outcomes}; {report.model_calls} model calls; latency p50 {_ms(report.p50_ms)} ms, p99 "
        f"{_ms(report.p99_ms)} ms; RSS start {report.rss_start_mib:.1f}, warm {report.rss_warm_mib:.1f}, end "
        f"{report.rss_end_mib:.1f} MiB ({report.rss_growth:+.2%}); peaks warm "
        f"{report.rss_peak_warm_mib:.1f}, end {report.rss_peak_end_mib:.1f}, whole run "
        f"{report.rss_peak_mib:.1f} MiB"
    )


def format_table(report: SoakReport) -> str:
    header = (
        f"streamer bench soak: {report.width}x{report.height} @ {report.fps} fps live for "
        f"{report.seconds / 60:g} min; {report.model} on {report.provider}; {report.machine.line()}"
    )
    lines = [wrapped(header), ""]
    lines += [f"{'t (s)':>7}  {'RSS MiB':>8}  {'vs warm':>8}", "-" * 27]
    for t, mib in report.curve:
        versus = f"{(mib - report.rss_warm_mib) / report.rss_warm_mib:+.1%}" if t >= report.warmup_s else ""
        lines.append(f"{t:>7.0f}  {mib:>8.1f}  {versus:>8}")
    lines += [
        "",
        f"RSS {report.sparkline}",
        "",
        wrapped(_summary(report)),
    ]
    lines += table_footer(report.notes, report.targets, report.wall_s)
    return "\n".join(lines)


def format_markdown(report: SoakReport) -> str:
    lines = ["| t (s) | RSS MiB | vs after warm-up |", "|---:|---:|---:|"]
    for t, mib in report.curve:
        versus = f"{(mib - report.rss_warm_mib) / report.rss_warm_mib:+.1%}" if t >= report.warmup_s else "—"
        lines.append(f"| {t:.0f} | {mib:.1f} | {versus} |")
    lines += [
        "",
        f"RSS over the run: `{report.sparkline}`",
        "",
        _summary(report) + ".",
        "",
        *markdown_targets(report.targets),
        "",
        f"{report.width}x{report.height} @ {report.fps} fps live for {report.seconds / 60:g} min, "
        f"{report.warmup_s:g} s warm-up; {report.model} on {report.provider}; {report.machine.line()}.",
    ]
    return "\n".join(lines) + "\n"


def run_from_args(args: argparse.Namespace) -> int:
    """The ``bench soak`` handler: prints the curve, writes --json / --markdown when asked."""
    size = parse_size(args.size, "--size")
    seconds = args.minutes * 60.0
    if seconds <= 0 or args.every_s <= 0:
        raise ConfigError(f"--minutes and --every-s must be positive, got {args.minutes}, {args.every_s}")
    warmup = args.warmup_s if args.warmup_s is not None else min(60.0, seconds / 5)
    if not 0 <= warmup < seconds:
        raise ConfigError(f"--warmup-s {warmup} must be in [0, the run's {seconds:g} s)")
    if not 1 <= args.fps <= 120:
        raise ConfigError(f"--fps {args.fps} is out of range; use 1..120")
    extra = overrides(args.set, args.model)
    report = run_soak(size, args.fps, seconds, warmup, args.every_s, extra)
    return emit(format_table(report), format_markdown(report), asdict(report), args.json, args.markdown)
