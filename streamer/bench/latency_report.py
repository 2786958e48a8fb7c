"""``streamer bench latency``'s report: what a run measured, the aligned table it prints and the
markdown for the docs."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from streamer.bench.latency_measure import PathResult, Settings, Skipped

__all__ = ["LatencyReport", "format_markdown", "format_table"]


@dataclass(frozen=True, slots=True)
class LatencyReport:
    machine: str
    settings: Settings
    model: str
    provider: str
    on_skip: str
    rows: tuple[PathResult, ...]
    skipped: tuple[Skipped, ...]
    notes: tuple[str, ...]
    wall_s: float


_WIDTH = 110
"""Where the lines under the table wrap."""


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


_COLUMNS: tuple[tuple[str, str, Callable[[PathResult], str]], ...] = (
    ("path", "", lambda r: r.path),
    ("sent", "frames", lambda r: str(r.sent)),
    ("recv", "frames", lambda r: str(r.received)),
    ("lost", "frames", lambda r: str(r.lost)),
    ("new", "frames", lambda r: str(r.measured)),
    ("p50", "end-to-end ms", lambda r: _ms(r.p50_ms)),
    ("p95", "end-to-end ms", lambda r: _ms(r.p95_ms)),
    ("p99", "end-to-end ms", lambda r: _ms(r.p99_ms)),
    ("lookahead", "split of p50 ms", lambda r: _ms(r.lookahead_ms)),
    ("rest", "split of p50 ms", lambda r: _ms(r.rest_p50_ms)),
    ("p50", "pipeline ms", lambda r: _ms(r.pipeline_p50_ms)),
    ("p95", "pipeline ms", lambda r: _ms(r.pipeline_p95_ms)),
    ("p99", "pipeline ms", lambda r: _ms(r.pipeline_p99_ms)),
    ("outside p50", "", lambda r: _ms(r.outside_p50_ms)),
)


def _header(report: LatencyReport) -> str:
    s = report.settings
    gate = f"gate on (on_skip {report.on_skip})" if s.gate else "gate off"
    budget = "no latency budget" if s.budget_ms is None else f"budget {s.budget_ms:g} ms"
    return (
        f"streamer bench latency: {s.width}x{s.height} @ {s.fps} fps, {s.frames} frames per path after "
        f"{s.warmup} warm-up; {report.model} on {report.provider}; {gate}; {budget}; {report.machine}"
    )


def format_table(report: LatencyReport) -> str:
    """One aligned table, a row per path, with groups of columns over their headings; then the notes."""
    cells = [[get(r) for _, _, get in _COLUMNS] for r in report.rows]
    widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, (name, _, _) in enumerate(_COLUMNS)]
    groups: list[tuple[str, int]] = []
    for (_, group, _), width in zip(_COLUMNS, widths, strict=True):
        if groups and groups[-1][0] == group and group:
            groups[-1] = (group, groups[-1][1] + 2 + width)
        else:
            groups.append((group, width))
    top = "  ".join(f" {g} ".center(w, "-") if g else " " * w for g, w in groups).rstrip()
    names = "  ".join(
        n.ljust(w) if i == 0 else n.rjust(w)
        for i, ((n, _, _), w) in enumerate(zip(_COLUMNS, widths, strict=True))
    )
    lines = [
        textwrap.fill(_header(report), _WIDTH, subsequent_indent="    "),
        "",
        top,
        names,
        "-" * len(names),
    ]
    for row in cells:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    lines.append("")
    for r in report.rows:
        outcomes = ", ".join(f"{name} {count}" for name, count in r.outcomes.items()) or "none"
        text = (
            f"{r.path}: {r.route}, {r.codec}; model {r.model}; measured frames {outcomes}; "
            f"{r.source_dropped} dropped at the source, {r.unreadable} unreadable; PipelineReport over all "
            f"{r.report_frames} frames written: p50 {_ms(r.report_p50_ms)}, p95 {_ms(r.report_p95_ms)}, "
            f"p99 {_ms(r.report_p99_ms)} ms" + ("; stopped at the time cap" if r.timed_out else "")
        )
        lines.append(textwrap.fill(text, _WIDTH, subsequent_indent="    "))
    lines += [
        textwrap.fill(f"{s.path}: skipped: {s.reason}", _WIDTH, subsequent_indent="    ")
        for s in report.skipped
    ]
    lines += [textwrap.fill(f"note: {n}", _WIDTH, subsequent_indent="    ") for n in report.notes]
    lines.append(f"total {report.wall_s:.1f} s")
    return "\n".join(lines)


def format_markdown(report: LatencyReport) -> str:
    """The table for the README, with the setup and the machine under it."""
    lines = [
        "| path | sent | received | lost | p50 ms | p95 ms | p99 ms | lookahead ms | rest p50 ms | "
        "pipeline p50 / p95 / p99 ms | outside p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.rows:
        lines.append(
            f"| {r.path} ({r.codec}) | {r.sent} | {r.received} | {r.lost} | {_ms(r.p50_ms)} | "
            f"{_ms(r.p95_ms)} | {_ms(r.p99_ms)} | {_ms(r.lookahead_ms)} | {_ms(r.rest_p50_ms)} | "
            f"{_ms(r.pipeline_p50_ms)} / {_ms(r.pipeline_p95_ms)} / {_ms(r.pipeline_p99_ms)} | "
            f"{_ms(r.outside_p50_ms)} |"
        )
    lines += ["", _header(report) + "; " + report.notes[-1] + "."]
    lines += [f"{s.path} skipped: {s.reason}." for s in report.skipped]
    return "\n".join(lines) + "\n"
