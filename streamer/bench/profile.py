"""``streamer bench profile``: where a model's time goes, operator by operator, at one frame size.

The model runs in a stream's steady state (a streaming model encodes one new frame and fuses T cached
maps; any other model runs its whole window) with onnxruntime's profiler on, after a warm-up. Each
operator type's kernel time per output frame is summed from the profile, by graph, beside the wall
time per frame: what the kernels do not account for is the runtime's own work (feeds, casts in numpy,
onnxruntime's scheduling between operators). One thread by default, so times add up to CPU time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamer.assets import STREAMING_LITE_MODEL
from streamer.backend.onnx import OnnxBackend
from streamer.bench.harness import emit, parse_size, wrapped
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine

__all__ = ["NodeTime", "OpTime", "ProfileResult", "profile_model"]


@dataclass(frozen=True, slots=True)
class OpTime:
    graph: str
    """``model`` (a streaming model's fusion graph, or the only graph), or ``encoder``."""
    op: str
    ms: float
    """Kernel time per output frame, summed over the operator's nodes."""
    nodes: int


@dataclass(frozen=True, slots=True)
class NodeTime:
    graph: str
    node: str
    op: str
    ms: float


@dataclass(frozen=True, slots=True)
class ProfileResult:
    model: str
    size: str
    threads: int
    frames: int
    wall_ms: float
    """Median wall time per output frame, as the caller of the backend sees it."""
    kernels_ms: float
    ops: list[OpTime]
    heaviest: list[NodeTime]
    """The nodes that take longest, up to eight."""


def profile_model(path: Path, width: int, height: int, threads: int, frames: int) -> ProfileResult:
    """Profiles ``frames`` output frames of ``path`` at ``width`` x ``height`` after 3 warm-up frames."""
    with tempfile.TemporaryDirectory(prefix="streamer-profile-") as folder:
        backend = OnnxBackend(path, threads=threads, profile=Path(folder))
        info = backend.info
        rng = np.random.default_rng(0)
        if info.streaming:
            frame = rng.integers(0, 256, (1, height, width, 3), dtype=np.uint8)
            window = backend.encode(frame) * info.t

            def one() -> None:
                backend.encode(frame)
                backend.fuse([window], frame)

        else:
            batch = rng.integers(0, 256, (1, info.t, 3, height, width), dtype=np.uint8)

            def one() -> None:
                backend.infer(batch)

        warmup = 3
        for _ in range(warmup):
            one()
        walls = []
        for _ in range(frames):
            started = time.perf_counter()
            one()
            walls.append(time.perf_counter() - started)
        files = backend.end_profiling()
        backend.close()
        nodes = [node for graph, file in files.items() for node in _nodes(file, graph, frames)]
    totals: dict[tuple[str, str], list[NodeTime]] = defaultdict(list)
    for node in nodes:
        totals[(node.graph, node.op)].append(node)
    ops = [OpTime(g, op, sum(n.ms for n in group), len(group)) for (g, op), group in totals.items()]
    ops.sort(key=lambda op: op.ms, reverse=True)
    return ProfileResult(
        model=info.name,
        size=f"{width}x{height}",
        threads=threads,
        frames=frames,
        wall_ms=float(np.median(walls)) * 1000,
        kernels_ms=sum(op.ms for op in ops),
        ops=ops,
        heaviest=sorted(nodes, key=lambda n: n.ms, reverse=True)[:8],
    )


def _nodes(file: Path, graph: str, frames: int) -> list[NodeTime]:
    """Kernel time per call of each node, over the last ``frames`` calls (the timed ones)."""
    events = json.loads(file.read_text())
    runs = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(runs) < frames:
        raise ConfigError(f"bench profile: {file} holds {len(runs)} runs of {graph}, fewer than {frames}")
    start = runs[-frames]
    total: dict[str, float] = defaultdict(float)
    ops: dict[str, str] = {}
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith("_kernel_time") or event["ts"] < start:
            continue
        node = name.removesuffix("_kernel_time")
        total[node] += float(event["dur"])
        ops[node] = str(event.get("args", {}).get("op_name", "?"))
    return [NodeTime(graph, node, ops[node], us / frames / 1000) for node, us in total.items()]


def format_table(result: ProfileResult, machine: Machine) -> str:
    r = result
    lines = [
        f"streamer bench profile: {r.model} at {r.size}, {r.threads} thread(s), {r.frames} frames after 3 "
        f"warm-up; {machine.line()}",
        "",
        f"{'graph':<9}{'operator':<24}{'nodes':>6}{'ms/frame':>10}{'share':>8}",
    ]
    for op in r.ops:
        share = op.ms / r.wall_ms if r.wall_ms else 0.0
        lines.append(f"{op.graph:<9}{op.op:<24}{op.nodes:>6}{op.ms:>10.2f}{share:>8.1%}")
    outside = r.wall_ms - r.kernels_ms
    lines += [
        f"{'':<9}{'kernels, all':<24}{'':>6}{r.kernels_ms:>10.2f}{r.kernels_ms / r.wall_ms:>8.1%}",
        f"{'':<9}{'outside the kernels':<24}{'':>6}{outside:>10.2f}{outside / r.wall_ms:>8.1%}",
        f"{'':<9}{'wall per frame (median)':<24}{'':>6}{r.wall_ms:>10.2f}",
        "",
        "heaviest nodes:",
        *(f"  {n.graph:<9}{n.node[-56:]:<58}{n.op:<16}{n.ms:>8.2f} ms" for n in r.heaviest),
        "",
        wrapped(
            "note: a stream's steady state per output frame (a streaming model: one frame encoded, T cached "
            "maps fused); kernel times from onnxruntime's profiler, which adds a little to the wall time; "
            "'outside the kernels' is the runtime's own work: feeds, numpy casts and padding, onnxruntime's "
            "scheduling between operators"
        ),
    ]
    return "\n".join(lines)


def format_markdown(result: ProfileResult, machine: Machine) -> str:
    r = result
    lines = ["| graph | operator | nodes | ms/frame | share |", "|---|---|---:|---:|---:|"]
    lines += [f"| {o.graph} | {o.op} | {o.nodes} | {o.ms:.2f} | {o.ms / r.wall_ms:.1%} |" for o in r.ops]
    lines += [
        f"| | kernels, all | | {r.kernels_ms:.2f} | {r.kernels_ms / r.wall_ms:.1%} |",
        f"| | wall per frame (median) | | {r.wall_ms:.2f} | |",
        "",
        f"{r.model} at {r.size}, {r.threads} thread(s), {r.frames} frames; {machine.line()}.",
    ]
    return "\n".join(lines) + "\n"


def run_from_args(args: argparse.Namespace) -> int:
    width, height = parse_size(args.size, "--size")
    if not 1 <= args.threads <= 256:
        raise ConfigError(f"--threads must be in 1..256; got {args.threads}")
    if not 1 <= args.frames <= 1000:
        raise ConfigError(f"--frames must be in 1..1000; got {args.frames}")
    model = Path(args.model) if args.model else STREAMING_LITE_MODEL
    watch = LoadWatch()
    result = profile_model(model, width, height, args.threads, args.frames)
    machine = watch.machine()
    data: dict[str, Any] = {"machine": asdict(machine), "result": asdict(result)}
    return emit(
        format_table(result, machine), format_markdown(result, machine), data, args.json, args.markdown
    )
