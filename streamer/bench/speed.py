"""``streamer bench speed``: several models' fps alone at one frame size, side by side in alternating rounds.

Each round times every model once (``streamer.engine.tiers.model_fps``: a stream's steady state at batch 1),
in an order that rotates from round to round, so a slow spell of a shared machine falls on all of them
alike rather than on whichever ran last. Each model's figure is its median over the rounds; its ratio
to the baseline is the median of the per-round ratios, which is what a noisy machine leaves standing.
The targets are issue 13's: each recurrent model at least as fast as the baseline (conv3d_t5).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamer.assets import SHIPPED_PREFIX, resolve_shipped
from streamer.backend.onnx import OnnxBackend
from streamer.bench.harness import Target, emit, markdown_targets, parse_size, table_footer
from streamer.engine.tiers import model_fps
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine

__all__ = ["DEFAULT_MODELS", "SpeedRow", "compare", "speed_rows"]

DEFAULT_MODELS = ("convlstm_strength", "convlstm", "conv3d_t1", "conv3d_t5")
"""Issue 13's comparison: the recurrent models, the per-frame model and the default window model."""
DEFAULT_BASELINE = "conv3d_t5"


@dataclass(frozen=True, slots=True)
class SpeedRow:
    model: str
    recurrent: bool
    fps: list[float]
    """One figure per round, in round order."""
    median_fps: float
    ratio: float
    """Median over the rounds of this model's fps over the baseline's in the same round."""
    ratio_min: float
    ratio_max: float


def speed_rows(fps: dict[str, list[float]], recurrent: dict[str, bool], baseline: str) -> list[SpeedRow]:
    """The rows of the table from each model's fps per round (every list as long as the baseline's)."""
    base = fps[baseline]
    rows = []
    for name, figures in fps.items():
        ratios = [f / b if b > 0 else 0.0 for f, b in zip(figures, base, strict=True)]
        rows.append(
            SpeedRow(
                model=name,
                recurrent=recurrent[name],
                fps=figures,
                median_fps=statistics.median(figures),
                ratio=statistics.median(ratios),
                ratio_min=min(ratios),
                ratio_max=max(ratios),
            )
        )
    return rows


def targets(rows: Sequence[SpeedRow], baseline: str) -> list[Target]:
    """Issue 13: a recurrent model runs one frame per step and is to be no slower than the window model."""
    return [
        Target(
            f"{row.model} at least {baseline}'s fps",
            row.ratio >= 1.0,
            f"{row.ratio:.3f}x (median of the per-round ratios; {row.ratio_min:.3f}-{row.ratio_max:.3f}), "
            f"{row.median_fps:.1f} fps",
        )
        for row in rows
        if row.recurrent and row.model != baseline
    ]


def compare(
    models: Sequence[tuple[str | None, Path]],
    width: int,
    height: int,
    threads: int,
    rounds: int,
    seconds: float,
    baseline: str | None = None,
    progress: bool = True,
) -> tuple[dict[str, list[float]], dict[str, bool], str]:
    """Each model's fps per round, timed in turn, the order rotated by one model each round; whether
    each is recurrent; the baseline (``baseline``, else conv3d_t5 where timed, else the last model).
    ``models``: (name, path) pairs, a name of None taking the model's own."""
    backends = [OnnxBackend(path, threads=threads, workers=1) for _, path in models]
    try:
        names = [name or b.info.name for (name, _), b in zip(models, backends, strict=True)]
        if len(set(names)) != len(names):
            raise ConfigError(f"bench speed: two models share a name ({', '.join(names)}); give each once")
        if baseline is None:
            baseline = DEFAULT_BASELINE if DEFAULT_BASELINE in names else names[-1]
        if baseline not in names:
            raise ConfigError(f"--baseline {baseline!r} is not one of the models given: {', '.join(names)}")
        fps: dict[str, list[float]] = {name: [] for name in names}
        named = list(zip(names, backends, strict=True))
        for r in range(rounds):
            for name, backend in named[r % len(named) :] + named[: r % len(named)]:
                fps[name].append(model_fps(backend, width, height, seconds=seconds))
            if progress:
                figures = ", ".join(f"{n} {v[-1]:.1f}" for n, v in fps.items())
                print(f"round {r + 1}/{rounds}: {figures}", flush=True)
        return fps, {name: bool(b.info.state) for name, b in named}, baseline
    finally:
        for backend in backends:
            backend.close()


def format_table(
    rows: Sequence[SpeedRow], baseline: str, size: str, args: Any, machine: Machine, wall_s: float
) -> str:
    lines = [
        f"streamer bench speed: {size}, {args.threads} thread(s), {args.rounds} alternating rounds of "
        f"{args.seconds:g} s per model; {machine.line()}",
        "",
        f"{'model':<24}{'kind':<11}{'fps (median)':>13}{'range':>14}{'x ' + baseline:>20}{'ratio range':>14}",
    ]
    for r in rows:
        kind = "recurrent" if r.recurrent else "window"
        spread = f"{min(r.fps):.1f}-{max(r.fps):.1f}"
        ratio_spread = f"{r.ratio_min:.3f}-{r.ratio_max:.3f}"
        lines.append(
            f"{r.model:<24}{kind:<11}{r.median_fps:>13.1f}{spread:>14}{r.ratio:>20.3f}{ratio_spread:>14}"
        )
    notes = [
        "fps: streamer.engine.tiers.model_fps, batch 1, one call at a time, a stream's steady state "
        "(a recurrent "
        "model one frame and its states per step; a window model its whole window); each round times every "
        "model once, in an order rotated each round",
        f"x {baseline}: the median over the rounds of the model's fps over {baseline}'s in the same round",
    ]
    return "\n".join(lines + table_footer(notes, targets(rows, baseline), wall_s))


def format_markdown(rows: Sequence[SpeedRow], baseline: str, size: str, args: Any, machine: Machine) -> str:
    lines = [
        f"| model | kind | fps (median) | range | x {baseline} (median per round) | ratio range |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        kind = "recurrent" if r.recurrent else "window"
        lines.append(
            f"| {r.model} | {kind} | {r.median_fps:.1f} | {min(r.fps):.1f}-{max(r.fps):.1f} | "
            f"{r.ratio:.3f} | {r.ratio_min:.3f}-{r.ratio_max:.3f} |"
        )
    lines += [
        "",
        f"{size}, {args.threads} thread(s), {args.rounds} alternating rounds of {args.seconds:g} s; "
        f"{machine.line()}.",
        "",
        *markdown_targets(targets(rows, baseline)),
    ]
    return "\n".join(lines) + "\n"


def _model(text: str) -> tuple[str | None, Path]:
    """``--model``: a path, ``shipped:NAME``, or either after ``NAME=`` to name it in the table."""
    name, sep, where = text.partition("=")
    if not sep or SHIPPED_PREFIX in name or "/" in name:
        name, where = "", text
    path = Path(resolve_shipped(where))
    if not path.is_file():
        raise ConfigError(f"--model {where!r} is not a file; give an ONNX model or shipped:NAME")
    return name or None, path


def run_from_args(args: argparse.Namespace) -> int:
    width, height = parse_size(args.size, "--size")
    if not 1 <= args.threads <= 256:
        raise ConfigError(f"--threads must be in 1..256; got {args.threads}")
    if not 1 <= args.rounds <= 100:
        raise ConfigError(f"--rounds must be in 1..100; got {args.rounds}")
    if not 0.05 <= args.seconds <= 60:
        raise ConfigError(f"--seconds must be in 0.05..60; got {args.seconds}")
    given = args.model or [SHIPPED_PREFIX + name for name in DEFAULT_MODELS]
    models = [_model(text) for text in given]
    started = time.monotonic()
    watch = LoadWatch()
    fps, recurrent, baseline = compare(
        models, width, height, args.threads, args.rounds, args.seconds, args.baseline
    )
    rows = speed_rows(fps, recurrent, baseline)
    machine = watch.machine()
    size = f"{width}x{height}"
    data = {
        "machine": asdict(machine),
        "size": size,
        "threads": args.threads,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "baseline": baseline,
        "rows": [asdict(r) for r in rows],
        "targets": [asdict(t) | {"verdict": t.verdict} for t in targets(rows, baseline)],
    }
    wall = time.monotonic() - started
    return emit(
        format_table(rows, baseline, size, args, machine, wall),
        format_markdown(rows, baseline, size, args, machine),
        data,
        args.json,
        args.markdown,
    )
