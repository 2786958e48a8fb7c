"""``streamer bench triton``: what a model on a Triton server costs a sidecar, against the same model local.

A real tritonserver on loopback (``streamer.measure.tritonserver``) serves each model folded to uint8 in
and out (``streamer.backend.fold``: one uint8 window up, one uint8 frame down); the same file runs
locally with onnxruntime. Per size and model, in alternating rounds so a noisy machine's drift falls on each
path alike: the p50 of one window's call, locally, through Triton over gRPC and through Triton with the
inputs in shared memory; the added p50 against local; windows per second one call at a time. Then an
outage: the server stopped under a 30 fps stream of calls (how long until a call fails, so its frame
passes through) and started again (how long from its being ready to the first answered call).

The stand-in server runs each model in PyTriton's Python backend, which copies tensors between
Triton's core and the model's process; Triton's own onnxruntime backend does not, so the added time
here is an upper bound for the transfer path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

from streamer.assets import ASSETS
from streamer.backend.base import Backend
from streamer.backend.fold import fold_uint8_io
from streamer.backend.onnx import OnnxBackend
from streamer.backend.triton import TritonBackend
from streamer.contract import Key
from streamer.errors import ConfigError, ModelUnavailableError
from streamer.measure.machine import LoadWatch, Machine
from streamer.measure.tritonserver import TritonServer

__all__ = ["OutageRow", "TritonRow", "run_from_args"]

DEFAULT_MODELS = ("temporal_filter_t5", "conv3d_t5")
"""A model that costs next to nothing (so the transfer path shows) and the default model."""
_PATHS = ("local", "grpc", "shm")


@dataclass(frozen=True, slots=True)
class TritonRow:
    size: str
    model: str
    window_mb: float
    """The uint8 window sent per call."""
    p50_ms: dict[str, float]
    added_p50_ms: dict[str, float]
    """Triton's p50 less the local p50, per transport."""
    windows_per_s: dict[str, float]


@dataclass(frozen=True, slots=True)
class OutageRow:
    model: str
    deadline_ms: float
    first_failure_s: float
    """From the server's being told to stop to the first call that failed (its frame passed through);
    the stand-in drains and unloads its models first."""
    slowest_failure_ms: float
    """The longest any failed call took: how long a frame waited before passing through."""
    failed_calls: int
    server_start_s: float
    """How long the server took to start again with its models (the stand-in's own cost)."""
    recovery_s: float
    """From the server's being ready again to the first call it answered."""


def _fold(name: str, folder: Path) -> tuple[Path, str]:
    """The shipped model ``name`` with uint8 in and out, written to ``folder``; its Triton name."""
    source = ASSETS / f"{name}.onnx"
    if not source.is_file():
        raise ConfigError(f"bench triton: no shipped model {name!r} in {ASSETS}; name a window model there")
    model = onnx.load(str(source))
    meta = {p.key: p.value for p in model.metadata_props}
    if Key.ENCODER in meta or Key.STATE in meta:
        raise ConfigError(f"bench triton times window models; {name!r} is a streaming or recurrent one")
    lo, hi = (float(v) for v in meta.get(Key.VALUE_RANGE, "0,1").split(","))
    folded = fold_uint8_io(model, (lo, hi))
    path = folder / f"{name}_u8.onnx"
    onnx.save(folded, str(path))
    return path, f"{name}_u8"


def _time(backend: Backend, window: np.ndarray, calls: int) -> list[float]:
    seconds = []
    for _ in range(calls):
        started = time.perf_counter()
        backend.infer(window)
        seconds.append(time.perf_counter() - started)
    return seconds


def _outage(server: TritonServer, name: str, window: np.ndarray, deadline_ms: float = 250.0) -> OutageRow:
    """Calls at 30 fps on gRPC while the server stops (in another thread, as an operator's restart
    would) and starts again."""
    backend = TritonBackend(server.url, name, deadline_ms=deadline_ms, cooldown_s=0.5)
    failures: list[float] = []
    try:
        backend.infer(window)
        stopping = threading.Thread(target=server.stop, name="triton-stop")
        told = time.monotonic()
        stopping.start()
        first_failure = None
        while stopping.is_alive() or first_failure is None:
            started = time.monotonic()
            try:
                backend.infer(window)
            except ModelUnavailableError:
                failures.append(time.monotonic() - started)
                if first_failure is None:
                    first_failure = started - told
            time.sleep(1 / 30)
        start_s = server.start()
        ready = time.monotonic()
        while True:
            started = time.monotonic()
            try:
                backend.infer(window)
                break
            except ModelUnavailableError:
                failures.append(time.monotonic() - started)
                time.sleep(1 / 30)
        recovery = time.monotonic() - ready
    finally:
        backend.close()
    return OutageRow(name, deadline_ms, first_failure, 1000 * max(failures), len(failures), start_s, recovery)


def run(
    sizes: list[tuple[int, int]], models: list[str], rounds: int, calls: int, threads: int
) -> tuple[list[TritonRow], list[OutageRow], Machine]:
    watch = LoadWatch()
    rows: list[TritonRow] = []
    with tempfile.TemporaryDirectory(prefix="streamer-bench-triton-") as tmp:
        folder = Path(tmp)
        from export.triton_repo import TritonOptions, write_repo

        files = {}
        for name in models:
            path, served = _fold(name, folder)
            write_repo(folder / "repo", served, path, TritonOptions(max_batch_size=4))
            files[served] = path
        token = "bench-triton"
        server = TritonServer(folder / "repo", token, threads=threads)
        server.start()
        try:
            for width, height in sizes:
                for served, path in files.items():
                    backends: dict[str, Backend] = {
                        "local": OnnxBackend(path, threads=threads),
                        "grpc": TritonBackend(server.url, served, deadline_ms=60_000.0),
                        "shm": TritonBackend(
                            server.url, served, transport="shm", deadline_ms=60_000.0, access_token=token
                        ),
                    }
                    try:
                        t = backends["local"].info.t
                        window = np.random.default_rng(0).integers(0, 256, (1, t, 3, height, width), np.uint8)
                        seconds: dict[str, list[float]] = {p: [] for p in _PATHS}
                        for backend in backends.values():
                            _time(backend, window, 2)  # warm-up: sessions, regions, channels
                        for k in range(rounds):
                            order = _PATHS if k % 2 == 0 else _PATHS[::-1]
                            for p in order:
                                seconds[p] += _time(backends[p], window, calls)
                    finally:
                        for backend in backends.values():
                            backend.close()
                    p50 = {p: 1000 * statistics.median(s) for p, s in seconds.items()}
                    rows.append(
                        TritonRow(
                            size=f"{width}x{height}",
                            model=served,
                            window_mb=round(window.nbytes / 1e6, 2),
                            p50_ms={p: round(v, 2) for p, v in p50.items()},
                            added_p50_ms={p: round(p50[p] - p50["local"], 2) for p in ("grpc", "shm")},
                            windows_per_s={p: round(len(s) / sum(s), 1) for p, s in seconds.items()},
                        )
                    )
            first = next(iter(files))
            width, height = sizes[0]
            window = np.zeros((1, 5, 3, height, width), np.uint8)
            outages = [_outage(server, first, window)]
        finally:
            server.stop()
    return rows, outages, watch.machine()


def _table(rows: list[TritonRow], outages: list[OutageRow], machine: Machine) -> str:
    lines = [
        "streamer bench triton: one uint8 window per call, batch 1, one call at a time, on loopback; "
        f"{machine.line()}",
        "",
        "size      model                  window MB  local p50  grpc p50  shm p50   added grpc  added shm"
        "  windows/s local/grpc/shm",
    ]
    for r in rows:
        w = r.windows_per_s
        lines.append(
            f"{r.size:9s} {r.model:22s} {r.window_mb:9.2f} {r.p50_ms['local']:8.1f}ms "
            f"{r.p50_ms['grpc']:7.1f}ms {r.p50_ms['shm']:7.1f}ms {r.added_p50_ms['grpc']:+10.1f}ms "
            f"{r.added_p50_ms['shm']:+9.1f}ms  {w['local']:.1f} / {w['grpc']:.1f} / {w['shm']:.1f}"
        )
    for o in outages:
        lines += [
            "",
            f"outage ({o.model}, calls at 30 fps, deadline {o.deadline_ms:g} ms, breaker cooldown 0.5 s): "
            f"the first call failed (its frame passed through) {o.first_failure_s:.2f} s after the server "
            f"was told to stop; {o.failed_calls} calls failed, the slowest in {o.slowest_failure_ms:.0f} ms; "
            f"the server took {o.server_start_s:.1f} s to start again; the first call answered "
            f"{o.recovery_s:.2f} s after it was ready",
        ]
    lines.append("")
    for r in rows:
        if r.size == "1280x720":
            added = r.added_p50_ms["shm"]
            verdict = "PASS" if added <= 10 else "FAIL"
            lines.append(
                f"target: <= 10 ms added p50 per 720p window (shared memory), {r.model}: {verdict} "
                f"({added:+.1f} ms)"
            )
    for o in outages:
        verdict = "PASS" if o.recovery_s <= 5 else "FAIL"
        lines.append(f"target: recovery <= 5 s after the server is back: {verdict} ({o.recovery_s:.2f} s)")
        verdict = "PASS" if o.slowest_failure_ms <= 250 else "FAIL"
        lines.append(
            f"target: in an outage a frame passes through within one budget (250 ms): {verdict} "
            f"(slowest failed call {o.slowest_failure_ms:.0f} ms)"
        )
    lines += [
        "note: the stand-in server runs models in PyTriton's Python backend, which copies each tensor",
        "    between Triton's core and the model's process; Triton's onnxruntime backend does not.",
    ]
    return "\n".join(lines)


def run_from_args(args: argparse.Namespace) -> int:
    sizes = []
    for part in str(args.sizes).split(","):
        width, _, height = part.partition("x")
        if not (width.isdigit() and height.isdigit()) or int(width) < 16 or int(height) < 16:
            raise ConfigError(f"bench triton --sizes: {part!r} is not WxH (at least 16x16)")
        sizes.append((int(width), int(height)))
    models = args.model or list(DEFAULT_MODELS)
    rows, outages, machine = run(sizes, models, args.rounds, args.calls, args.threads)
    text = _table(rows, outages, machine)
    print(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "rows": [asdict(r) for r in rows],
                    "outages": [asdict(o) for o in outages],
                    "machine": asdict(machine),
                },
                indent=1,
            )
        )
    if args.markdown:
        Path(args.markdown).write_text("```\n" + text + "\n```\n")
    return 0
