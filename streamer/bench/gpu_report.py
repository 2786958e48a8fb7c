"""What ``streamer bench gpu`` records, a row per provider, variant, size, batch and path, the parity
of each GPU provider with the CPU's, and how it prints: the table and its markdown twin."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from streamer.bench.harness import wrapped

__all__ = ["GpuReport", "Parity", "Speed", "format_report", "streams_1080p30"]


@dataclass(frozen=True, slots=True)
class Speed:
    provider: str
    precision: str
    io: str
    """``float``: the model's own float32 input and output, normalised on the host; ``uint8``: the
    same graph with the normalisation folded in (uint8 window in, uint8 frame out)."""
    size: str
    batch: int
    path: str
    """``device`` (IO binding, nothing crosses PCIe), ``host`` (``OnnxBackend.infer``), ``frames``
    (frames uploaded once into a device-side ring, one frame down) or ``frames_fresh`` (the same
    through fresh buffers)."""
    fps: float | None
    """Output frames per second at the median batch time; None where the row failed (``error``)."""
    batch_ms: float | None
    host_cpu_ms: float | None
    """CPU time of this process per output frame, all threads."""
    pcie_bytes: int
    """Bytes up and down per output frame: the input window and the output, as the path sends them."""
    runs: int
    error: str | None = None
    first_ms: float | None = None
    """The first call at this size and batch: the lazy work (algorithm search, allocations) included."""


@dataclass(frozen=True, slots=True)
class Parity:
    provider: str
    precision: str
    io: str
    size: str
    max_levels: int
    """Largest difference from the CPU provider's fp32 output, in levels of 255."""
    over_one: float
    """Share of output samples more than one level from the CPU provider's."""
    steps: int = 1
    """Frames compared: a recurrent model's last output after this many steps, its state kept on the
    device, against the CPU's host path, so drift in a half-precision state shows."""


@dataclass(frozen=True, slots=True)
class GpuReport:
    cpu: str
    isa: tuple[str, ...]
    gpu: str
    onnxruntime: str
    available: list[str]
    """Providers this onnxruntime build lists."""
    loaded: list[str]
    """Providers that loaded the model (a listed provider whose libraries are missing does not)."""
    skipped: list[str]
    cuda_options: dict[str, str]
    """What ``--cuda-options`` gave the CUDA provider (prefer_nhwc, enable_cuda_graph, ...)."""
    gpu_wait: str
    """How the calling thread waited for the GPU (``--gpu-wait``; the log says whether CUDA took it)."""
    model: str
    t: int
    parity: list[Parity]
    speeds: list[Speed]
    streams_1080p30: dict[str, int]
    """By ``provider precision path``: the best 1080p fps over 30, the model alone."""
    pinned: str
    """Whether the frames path's host buffers were page-locked (``streamer.backend.host_buffers``):
    what its fps rest on."""
    wall_s: float


def streams_1080p30(speeds: Sequence[Speed]) -> dict[str, int]:
    """By ``provider precision io path``: the best 1080p fps over 30, rounded down."""
    best: dict[str, float] = {}
    for s in speeds:
        if s.fps is not None and s.size.endswith("x1080"):
            key = f"{s.provider} {s.precision} {s.io} {s.path}"
            best[key] = max(best.get(key, 0.0), s.fps)
    return {key: math.floor(fps / 30) for key, fps in best.items()}


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_report(report: GpuReport) -> tuple[str, str]:
    """The printed table and its markdown twin."""
    head = [
        f"GPU: {report.gpu}",
        f"host: {report.cpu} ({', '.join(report.isa) or 'no listed ISA flags'}), {os.cpu_count()} cores; "
        f"onnxruntime {report.onnxruntime}",
        f"providers listed: {', '.join(report.available)}; "
        f"loaded the model: {', '.join(report.loaded) or 'none'}",
        f"model: {report.model} (T={report.t}); CUDA provider options: {report.cuda_options or 'defaults'}; "
        f"waits for the GPU: {report.gpu_wait}",
        f"frames path host buffers: {report.pinned}",
    ]
    parity = [
        f"parity vs CPU fp32, {p.size}{f' after {p.steps} steps' if p.steps > 1 else ''}: {p.provider} "
        f"{p.precision} {p.io}: at most {p.max_levels} levels of 255, {100 * p.over_one:.3f}% of samples "
        "more than 1 level apart"
        for p in report.parity
    ]
    columns = (
        "provider",
        "prec",
        "io",
        "size",
        "batch",
        "path",
        "fps",
        "ms/batch",
        "CPU ms/frame",
        "PCIe MB/frame",
        "runs",
        "first call ms",
    )
    lines = [" | ".join(columns)]
    md = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for s in report.speeds:
        provider = s.provider.removesuffix("ExecutionProvider")
        cells = [
            provider,
            s.precision,
            s.io,
            s.size,
            str(s.batch),
            s.path,
            _cell(s.fps),
            _cell(s.batch_ms),
            _cell(s.host_cpu_ms, 2),
            f"{s.pcie_bytes / 1e6:.1f}",
            str(s.runs),
            _cell(s.first_ms, 0),
        ]
        if s.error:
            cells[6] = f"({s.error})"
        lines.append(" | ".join(cells))
        md.append("| " + " | ".join(cells) + " |")
    streams = [f"1080p30 streams per GPU, model alone ({k}): {v}" for k, v in report.streams_1080p30.items()]
    notes = [*(f"skipped: {s}" for s in report.skipped), *streams, f"total {report.wall_s:.1f} s"]
    table = "\n".join([*head, *parity, "", *lines, "", *(wrapped(n) for n in notes)])
    markdown = (
        "\n".join(
            [*(f"- {h}" for h in head), *(f"- {p}" for p in parity), "", *md, "", *(f"- {n}" for n in notes)]
        )
        + "\n"
    )
    return table, markdown
