"""What the overhead, motion, overload and soak benchmarks share: resident memory, the issue's targets
as PASS/FAIL lines, config overrides from ``--set``, the printed table's footer and its JSON and
markdown files, and timed pipeline runs.

Every figure a benchmark prints is measured in one run, beside the figure it is compared with, on a
machine other people may be using: the machine line (:mod:`streamer.measure.machine`), with the load
average at start and end, says how busy it was. The pipeline's modules are imported where a pipeline
runs, so ``bench gpu`` runs on a GPU machine that has numpy and onnxruntime alone.
"""

from __future__ import annotations

import asyncio
import collections
import json
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from streamer.errors import ConfigError
from streamer.measure.records import finite

if TYPE_CHECKING:
    from streamer.config import Config
    from streamer.engine.pipeline import Outcome, Pipeline, PipelineReport
    from streamer.frame import Frame

__all__ = [
    "LiveResult",
    "RssSampler",
    "Target",
    "emit",
    "format_targets",
    "markdown_targets",
    "overrides",
    "parse_size",
    "parse_sizes",
    "percentiles",
    "rss_at",
    "rss_bytes",
    "rss_growth",
    "rss_window_mib",
    "run_for",
    "run_live",
    "sparkline",
    "table_footer",
    "wrapped",
]


def rss_bytes() -> int:
    """This process's resident set (VmRSS of /proc/self/status), in bytes; 0 where there is no /proc."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """Samples :func:`rss_bytes` every ``interval_s`` in a daemon thread: (seconds since start, bytes)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        if interval_s <= 0:
            raise ConfigError(f"RSS sampling interval must be positive, got {interval_s}")
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)
        self._start = 0.0

    def __enter__(self) -> RssSampler:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.samples.append((time.monotonic() - self._start, rss_bytes()))

    def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic() - self._start, rss_bytes()))
            if self._stop.wait(self.interval_s):
                return


def rss_at(samples: Sequence[tuple[float, int]], seconds: float) -> int:
    """The last sample taken at or before ``seconds`` (the first one if none was)."""
    chosen = samples[0][1] if samples else 0
    for t, rss in samples:
        if t > seconds:
            break
        chosen = rss
    return chosen


@dataclass(frozen=True, slots=True)
class Target:
    """One of the issue's targets; ``passed`` is None when this run could not check it."""

    name: str
    passed: bool | None
    detail: str

    @property
    def verdict(self) -> str:
        return "SKIP" if self.passed is None else "PASS" if self.passed else "FAIL"


def format_targets(targets: Sequence[Target]) -> list[str]:
    return [f"  {t.verdict}  {t.name}: {t.detail}" for t in targets]


def overrides(pairs: Sequence[str] | None, model: Path | None = None) -> dict[str, Any]:
    """``--set section.key=value`` pairs (value read as YAML) and ``--model`` as load_config overrides."""
    from streamer.config import parse_override

    out: dict[str, Any] = {}
    for text in pairs or ():
        key, value = parse_override(text)
        out[key] = value
    if model is not None:
        out["model.path"] = str(model)
    return out


def wrapped(text: str) -> str:
    """A long line of a printed table, wrapped at 110 columns with continuation lines indented."""
    return textwrap.fill(text, 110, subsequent_indent="    ")


def table_footer(notes: Sequence[str], targets: Sequence[Target], wall_s: float) -> list[str]:
    """What closes every printed table: the notes, the targets' PASS/FAIL lines, the run's length."""
    return [
        "",
        *(wrapped(f"note: {n}") for n in notes),
        "",
        "targets:",
        *format_targets(targets),
        f"total {wall_s:.1f} s",
    ]


def markdown_targets(targets: Sequence[Target]) -> list[str]:
    return [f"- {t.verdict} {t.name}: {t.detail}" for t in targets]


def emit(table: str, markdown: str, data: Any, json_path: str | None, markdown_path: str | None) -> int:
    """Print the table; write the results as JSON and the markdown table where asked. Returns 0."""
    print(table)
    if json_path:
        Path(json_path).write_text(json.dumps(finite(data), indent=2, allow_nan=False) + "\n")
    if markdown_path:
        Path(markdown_path).write_text(markdown)
    return 0


def percentiles(samples_ms: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """p50, p95, p99 of ``samples_ms``; None each when there is none."""
    if not samples_ms:
        return None, None, None
    p50, p95, p99 = np.percentile(np.asarray(samples_ms, dtype=np.float64), [50, 95, 99])
    return float(p50), float(p95), float(p99)


async def _run_for(pipeline: Pipeline, seconds: float | None) -> PipelineReport:
    running = asyncio.create_task(pipeline.run())
    if seconds is not None:
        try:
            await asyncio.wait_for(asyncio.shield(running), seconds)
        except TimeoutError:
            pipeline.stop()
    return await running


def run_for(pipeline: Pipeline, seconds: float | None = None) -> PipelineReport:
    """Runs ``pipeline`` to its end, or stops it after ``seconds`` and lets what is in flight drain."""
    return asyncio.run(_run_for(pipeline, seconds))


_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    """One character per value, lowest to highest of ``values``; flat values draw the lowest bar."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo
    if span <= 0:
        return _BARS[0] * len(values)
    return "".join(_BARS[min(len(_BARS) - 1, int((v - lo) / span * len(_BARS)))] for v in values)


def parse_size(text: str, flag: str) -> tuple[int, int]:
    """One ``WxH`` size for ``flag``."""
    sizes = parse_sizes(text, flag)
    if len(sizes) != 1:
        raise ConfigError(f"{flag} {text!r}: give one size, WIDTHxHEIGHT, e.g. 640x360")
    return sizes[0]


def parse_sizes(text: str, flag: str) -> list[tuple[int, int]]:
    """Comma-separated ``WxH`` sizes for ``flag``, each even on both sides (H.264 4:2:0)."""
    sizes = []
    for part in text.split(","):
        w, sep, h = part.strip().lower().partition("x")
        if not sep or not w.isdigit() or not h.isdigit() or int(w) < 16 or int(h) < 16:
            raise ConfigError(f"{flag} {text!r}: write sizes as WIDTHxHEIGHT, comma-separated, e.g. 640x360")
        if int(w) % 2 or int(h) % 2:
            raise ConfigError(f"{flag} {text!r} has an odd side; H.264 4:2:0 needs even sizes")
        sizes.append((int(w), int(h)))
    return sizes


@dataclass(frozen=True, slots=True)
class LiveResult:
    """A live pipeline's run: its report, and what the output hook and the RSS sampler saw."""

    report: PipelineReport
    latencies_ms: list[float]
    """Arrival to written, per frame that arrived after the warm-up."""
    outcomes: dict[str, int]
    """How the frames that arrived after the warm-up left."""
    rss: list[tuple[float, int]]
    """(seconds since the run began, bytes), every sampling interval."""
    warmup_s: float
    seconds: float
    budget_estimate_ms: float
    """The latency budget's estimate of one model call when the run ended."""
    budget_admitted: int


def rss_window_mib(
    samples: Sequence[tuple[float, int]], start: float, end: float, peak: bool = False
) -> float:
    """Median (or highest) RSS in MiB of the samples taken in [start, end]; the nearest one if none was."""
    inside = [rss for t, rss in samples if start <= t <= end]
    if not inside:
        inside = [rss_at(samples, end)]
    return float(np.max(inside) if peak else np.median(inside)) / (1024 * 1024)


def rss_growth(
    samples: Sequence[tuple[float, int]], warmup_s: float, seconds: float, peak: bool = False
) -> tuple[float, float]:
    """Median (or ``peak``: highest) RSS in MiB of the first and of the last window after the warm-up,
    each a third of the measured span and at most 30 s: medians, so one sample taken mid-inference does
    not decide; peaks, so an allocator that returns memory between calls does not hide a leak."""
    span = min(30.0, max(1.0, (seconds - warmup_s) / 3))
    return (
        rss_window_mib(samples, warmup_s, warmup_s + span, peak),
        rss_window_mib(samples, seconds - span, seconds, peak),
    )


def run_live(config: Config, seconds: float, warmup_s: float, interval_s: float = 1.0) -> LiveResult:
    """Builds the pipeline of ``config``, runs it for ``seconds`` while sampling RSS, then stops it."""
    from streamer.app import build_pipeline

    latencies: list[float] = []
    outcomes: collections.Counter[str] = collections.Counter()
    begun = time.monotonic()

    def hook(source: Frame, sent: Frame, outcome: Outcome) -> None:
        if source.arrival >= begun + warmup_s:
            latencies.append((time.monotonic() - source.arrival) * 1000.0)
            outcomes[outcome.value] += 1

    with RssSampler(interval_s) as sampler:
        pipeline = build_pipeline(config, on_output=hook)
        try:
            report = run_for(pipeline, seconds)
        finally:
            pipeline.backend.close()
    budget = pipeline.budget.stats()
    return LiveResult(
        report,
        latencies,
        dict(outcomes),
        sampler.samples,
        warmup_s,
        seconds,
        budget.estimate_ms,
        budget.admitted,
    )
