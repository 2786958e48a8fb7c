"""``streamer bench memory``: what one model call takes in memory per pixel, for memory admission.

Admission estimates a stream's cost before it runs; the largest part is one model call's activations,
which grow with the frame and differ per model (a streaming model fuses cached maps, a window model
re-reads T frames). Each model is measured in a fresh process: the peak resident memory after a call at
a small size (libraries and kernels loaded) against the peak after four calls at ``--size`` (a window
model's whole window; a streaming model's T frames encoded and one fusion), divided by the pixels.
``--write-cards`` stores the figure, rounded up, as ``activation_bytes_per_pixel`` in each model's card
(the JSON beside it), where the runtime reads it.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamer.assets import AUTO_TIERS, DEFAULT_MODEL
from streamer.bench.harness import emit, parse_size, wrapped
from streamer.contract import CARD_BYTES_KEY
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine

__all__ = ["MemoryRow", "measure_bytes_per_pixel"]

_CALLS = 4
"""Calls measured at the size: onnxruntime's peak grows over the first calls (a second call at 1080p took
conv3d_t5 half as much again as the first) before it settles, and a stream makes many."""

_PROBE = f"""
import sys
import numpy as np
from streamer.backend.onnx import OnnxBackend
path, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
backend = OnnxBackend(path, threads=1, workers=1)
t = backend.info.t
def call(w, h):
    frames = np.zeros((t, h, w, 3), np.uint8)
    if backend.info.streaming:
        maps = backend.encode(frames)
        backend.fuse([maps], frames[:1])
    else:
        backend.infer(np.ascontiguousarray(frames.transpose(0, 3, 1, 2))[None])
def hwm():  # this process's peak RSS in KiB (getrusage's would include the parent's, from before exec)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
call(64, 48)
base = hwm()
for _ in range({_CALLS}):
    call(width, height)
print((hwm() - base) * 1024 / (width * height))
"""


@dataclass(frozen=True, slots=True)
class MemoryRow:
    model: str
    path: str
    size: str
    bytes_per_pixel: float
    card: str
    """What happened to the card: written, unchanged (not asked), or none beside the model."""


def measure_bytes_per_pixel(model: Path, width: int, height: int) -> float:
    """Peak memory of one call per pixel, in a fresh process (its peak is this call's alone)."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(model), str(width), str(height)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"bench memory: measuring {model} failed: {last}")
    return float(result.stdout.strip().splitlines()[-1])


def _write_card(model: Path, value: float) -> str:
    card = model.with_suffix(".json")
    if not card.is_file():
        return "no card"
    data = json.loads(card.read_text())
    data[CARD_BYTES_KEY] = math.ceil(value)
    card.write_text(json.dumps(data, indent=2) + "\n")
    return f"written ({math.ceil(value)})"


def run_memory(args: argparse.Namespace) -> tuple[list[MemoryRow], Machine, float]:
    width, height = parse_size(args.size, "--size")
    models = [Path(m) for m in args.model] if args.model else [DEFAULT_MODEL, *AUTO_TIERS]
    for model in models:
        if not model.is_file():
            raise ConfigError(f"--model {str(model)!r} is not a file; pass an exported .onnx model")
    watch, started = LoadWatch(), time.monotonic()
    rows = []
    for model in models:
        value = measure_bytes_per_pixel(model, width, height)
        card = _write_card(model, value) if args.write_cards else "unchanged"
        rows.append(MemoryRow(model.stem, str(model), f"{width}x{height}", value, card))
    return rows, watch.machine(), time.monotonic() - started


def format_table(rows: list[MemoryRow], machine: Machine, wall_s: float) -> str:
    lines = [
        f"streamer bench memory: one model call's peak memory per pixel; {machine.line()}",
        "",
        f"{'model':24} {'size':>10} {'bytes/px':>9}  card",
        *(f"{r.model:24} {r.size:>10} {r.bytes_per_pixel:9.0f}  {r.card}" for r in rows),
        "",
        wrapped(
            "note: peak RSS after four calls at the size against after one at 64x48, in a fresh process per "
            "model (one thread); memory admission reads the card's activation_bytes_per_pixel, else 480"
        ),
        f"total {wall_s:.1f} s",
    ]
    return "\n".join(lines)


def format_markdown(rows: list[MemoryRow], machine: Machine) -> str:
    lines = ["| model | size | bytes per pixel |", "|---|---|---:|"]
    lines += [f"| {r.model} | {r.size} | {r.bytes_per_pixel:.0f} |" for r in rows]
    lines += ["", f"{machine.line()}."]
    return "\n".join(lines) + "\n"


def run_from_args(args: argparse.Namespace) -> int:
    rows, machine, wall = run_memory(args)
    data: dict[str, Any] = {"machine": asdict(machine), "rows": [asdict(r) for r in rows]}
    return emit(
        format_table(rows, machine, wall), format_markdown(rows, machine), data, args.json, args.markdown
    )
