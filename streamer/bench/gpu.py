"""``streamer bench gpu``: the prepared check for a machine with an NVIDIA GPU, a few minutes in all.

It says which execution providers load, how far each one's output is from the CPU provider's on one
window, and for each provider, precision, frame size and batch, two speeds of the same session:

- ``device``: the window already in device memory (IO binding) and the output left there: the model's
  own speed, the ceiling for a path that uploads each frame once and keeps windows on the device;
- ``host``: ``OnnxBackend.infer``: a window of T frames built on the host (float32, or uint8 where the
  normalisation is folded in), copied up, the output copied down, with the host CPU time and the bytes
  over PCIe that each output frame costs;
- ``frames``: the runtime's path on a GPU (``model.device_frames``): per output frame one new uint8
  frame uploaded into the device-side ring of the last T, the window made inside the graph, one uint8
  frame downloaded (``streamer.backend.device_frames``); at batch B, B streams' windows in one call,
  as the scheduler batches them. Frames cross through kept, page-locked host buffers into kept device
  memory (``streamer.backend.host_buffers``);
- ``frames_fresh``: the same with a fresh host array and device allocation for every frame, as before
  the buffers were kept: what keeping them is worth;
- ``frames_yuv``: ``frames`` with each frame going up and coming down as 4:2:0 planes, converted to
  RGB on the device as it goes up and from RGB in the window's graph (``model.yuv420``, BT.709 tv
  range): 1.5 bytes a pixel each way instead of 3, and the cost of the conversions on the device.

A recurrent model (``--model convlstm_strength.onnx``) runs the same paths with its state: ``device``
keeps it on the device both ways; ``host`` sends it up and brings it down with every call, as
``model.device_frames: false`` does (49.8 MB per 1080p frame each way for the ConvLSTM); ``frames``
steps B streams in one call (``DeviceFrames.step_batch``; ``frames_yuv``: ``step_batch_yuv``), each
state left on the device, one uint8 frame up and one down per step.

fp16 is the fp32 file converted here by onnxruntime's own converter (float32 inputs and outputs kept),
so both precisions feed alike. How many 1080p30 streams one GPU holds is read off the best batch of
each path, for the model alone: decode and encode are not in it (``streamer bench codecs`` times
them). Only numpy and onnxruntime are imported (onnx for fp16), so ``python -m streamer.bench gpu``
runs on a GPU machine that has neither PyAV nor the service's dependencies.

This module times the paths and reads the flags; which providers load and with what options is
:mod:`streamer.bench.gpu_providers`, the records and their table :mod:`streamer.bench.gpu_report`.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.assets import DEFAULT_MODEL
from streamer.backend.cuda_runtime import GpuWait
from streamer.backend.device_frames import DeviceFrames
from streamer.backend.host_buffers import cuda_host_memory
from streamer.backend.onnx import OnnxBackend
from streamer.bench.gpu_providers import (
    CPU,
    CUDA,
    GPU_PROVIDERS,
    TENSORRT,
    chain,
    loaded_providers,
    provider_options,
)
from streamer.bench.gpu_report import GpuReport, Parity, Speed, format_report, streams_1080p30
from streamer.bench.harness import emit, parse_sizes
from streamer.errors import ConfigError
from streamer.frame import Colour
from streamer.measure.machine import cpu_isa, cpu_name
from streamer.measure.synthetic import pattern_window
from streamer.measure.variants import fold_uint8_io, half_precision, on_device
from streamer.media.yuv import matrices

__all__ = ["run_gpu_bench"]

HD_TV = Colour(1, 1)
"""BT.709 in tv range: the colour a 720p or 1080p stream that states none is encoded in."""
PRECISIONS = ("fp32", "fp16")
IOS = ("float", "uint8")
Variant = tuple[str, str]
"""(precision, io): ``fp32`` or ``fp16``; ``float`` or ``uint8`` (see
:attr:`streamer.bench.gpu_report.Speed.io`)."""


def gpu_name() -> str:
    """The GPUs nvidia-smi names, with the driver; "none found" where there is no nvidia-smi or GPU."""
    if shutil.which("nvidia-smi") is None:
        return "none found (no nvidia-smi)"
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unknown ({err})"
    return "; ".join(line.strip() for line in done.stdout.splitlines() if line.strip()) or "none found"


def _timed(
    once: Callable[[], object], frames: int, seconds: float, min_runs: int
) -> tuple[float, float, int, float]:
    """Median seconds per call, CPU seconds per frame, runs, and the first call's seconds, after two
    warm-up calls (cuDNN's algorithm search and the arena's first allocations happen there: what
    ``model.warm_up`` takes off the first live frame)."""
    t0 = time.perf_counter()
    once()
    first = time.perf_counter() - t0
    once()
    times: list[float] = []
    cpu0 = time.process_time()
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    return statistics.median(times), cpu / (len(times) * frames), len(times), first


def _window_steps(
    backend: OnnxBackend, device: DeviceFrames, size: tuple[int, int], batch: int, yuv: bool = False
) -> Callable[[], None]:
    """One output frame for each of ``batch`` streams: each uploads its new frame into its ring of the
    last T and the B windows run in one call (with ``yuv``, the frames going up and coming down as
    4:2:0 planes, as ``model.yuv420`` has them)."""
    t = backend.info.t
    frames = np.ascontiguousarray(pattern_window(1, t + 1, *size, seed=0)[0].transpose(0, 2, 3, 1))
    planes = [_planes(frame) for frame in frames] if yuv else []

    def up(k: int) -> ort.OrtValue:
        return device.upload_planes(*planes[k], HD_TV) if yuv else device.upload(frames[k])

    rings = [[up(k) for k in range(t)] for _ in range(batch)]
    fresh = iter(range(10**12))

    def step() -> None:
        for ring in rings:
            ring.append(up(next(fresh) % len(frames)))
            del ring[0]
        if yuv:
            device.run_batch_yuv(rings, None, HD_TV)
        else:
            device.run_batch(rings)

    return step


def _planes(
    frame: npt.NDArray[np.uint8],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """A frame's 4:2:0 planes in BT.709 tv range, made with numpy (this module runs without PyAV)."""
    luma, chroma, offset = matrices(HD_TV)
    rgb = frame.astype(np.float32)
    y = rgb @ luma.astype(np.float32) + offset
    h, w = frame.shape[:2]
    means = rgb.reshape(h // 2, 2, w // 2, 2, 3).mean(axis=(1, 3))
    u, v = np.moveaxis(means @ chroma.T.astype(np.float32) + 128.0, -1, 0)

    def level(plane: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
        return np.clip(np.rint(plane), 0, 255).astype(np.uint8)

    return level(y), level(u), level(v)


def _recurrent_steps(
    backend: OnnxBackend, device: DeviceFrames, size: tuple[int, int], batch: int, yuv: bool = False
) -> Callable[[], None]:
    """One step for each of ``batch`` streams of a recurrent model in one call (``step_batch``): each
    uploads its new frame, and each state stays on the device from one call to the next (with ``yuv``,
    the frames going up and coming down as 4:2:0 planes, as ``model.yuv420`` has them)."""
    t = backend.info.t
    frames = np.ascontiguousarray(pattern_window(1, t + 1, *size, seed=0)[0].transpose(0, 2, 3, 1))
    planes = [_planes(frame) for frame in frames] if yuv else []
    states = [backend.initial_state(1, size[1], size[0]) for _ in range(batch)]
    fresh = iter(range(10**12))

    def up(k: int) -> ort.OrtValue:
        return device.upload_planes(*planes[k], HD_TV) if yuv else device.upload(frames[k])

    def step() -> None:
        windows = [[up(next(fresh) % len(frames)) for _ in range(t)] for _ in states]
        if yuv:
            _, made = device.step_batch_yuv(windows, states, None, HD_TV)
        else:
            _, made = device.step_batch(windows, states)
        states[:] = made

    return step


def _failed(provider: str, variant: Variant, size: tuple[int, int], batch: int, path: str, why: str) -> Speed:
    label = f"{size[0]}x{size[1]}"
    return Speed(provider, *variant, label, batch, path, None, None, None, 0, 0, why[:300])


def _speed_row(
    backend: OnnxBackend,
    provider: str,
    variant: Variant,
    size: tuple[int, int],
    batch: int,
    path: str,
    seconds: float,
) -> Speed:
    width, height = size
    info = backend.info
    window = pattern_window(batch, info.t, width, height, seed=0)
    try:
        if path == "device":
            median, cpu, runs, first = _timed(on_device(backend, window), batch, seconds, 3)
            moved = 0
        elif path in ("frames", "frames_fresh", "frames_yuv"):
            device = backend.device_frames
            if device is None:
                return _failed(provider, variant, size, batch, path, "no device frames for this model")
            device.reuse = path != "frames_fresh"
            if info.state:
                step = _recurrent_steps(backend, device, size, batch, path == "frames_yuv")
            else:
                step = _window_steps(backend, device, size, batch, path == "frames_yuv")

            try:
                median, cpu, runs, first = _timed(step, batch, seconds, 3)
            finally:
                device.reuse = True
            per_pixel = 1.5 if path == "frames_yuv" else 3
            moved = 0 if provider == CPU else int(height * width * per_pixel * (1 + info.scale**2))
        else:
            median, cpu, runs, first = _timed(lambda: backend.infer(window), batch, seconds, 3)
            up = backend.model_input(window[:1]).nbytes
            down = 3 * height * width * info.scale**2 * (1 if info.uint8_output else 4)
            state = sum(math.prod(shape) * 4 for shape in backend.state_shapes(1, height, width))
            moved = 0 if provider == CPU else up + down + 2 * state  # a recurrent state both ways
    except Exception as err:  # a row that fails (out of device memory, say) is reported, the rest run
        line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return _failed(provider, variant, size, batch, path, line)
    fps = batch / median
    return Speed(
        provider,
        *variant,
        f"{width}x{height}",
        batch,
        path,
        fps,
        median * 1000,
        cpu * 1000,
        moved,
        runs,
        first_ms=first * 1000,
    )


def _parity(gpu: OnnxBackend, cpu: OnnxBackend, provider: str, variant: Variant) -> Parity:
    width, height = 640, 360
    window = pattern_window(1, gpu.info.t, width, height, seed=1)
    ours = gpu.infer(window).astype(np.int16)
    theirs = cpu.infer(window).astype(np.int16)
    diff = np.abs(ours - theirs)
    return Parity(provider, *variant, f"{width}x{height}", int(diff.max()), float((diff > 1).mean()))


RECURRENT_STEPS = 30
"""Steps of the recurrent parity row: a second of video at 30 fps, long enough for state drift to show."""


def recurrent_parity(gpu: OnnxBackend, cpu: OnnxBackend, provider: str, variant: Variant) -> Parity:
    """A recurrent model's output after ``RECURRENT_STEPS`` steps of a moving pattern, on ``gpu``'s
    runtime path (its state kept on the device where it has device frames), against ``cpu``'s."""
    width, height = 640, 360
    clip = pattern_window(1, RECURRENT_STEPS, width, height, seed=2)[0]
    ours, theirs = gpu.initial_state(1, height, width), cpu.initial_state(1, height, width)
    for frame in clip:
        mine, ours = gpu.step(frame[None, None], ours)
        reference, theirs = cpu.step(frame[None, None], theirs)
    diff = np.abs(mine.astype(np.int16) - reference.astype(np.int16))
    size = f"{width}x{height}"
    return Parity(provider, *variant, size, int(diff.max()), float((diff > 1).mean()), RECURRENT_STEPS)


def run_gpu_bench(
    model: Path,
    providers: Sequence[str],
    sizes: Sequence[tuple[int, int]],
    batches: Sequence[int],
    variants: Sequence[Variant],
    seconds: float,
    budget_s: float,
    cuda_options: Mapping[str, str] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    gpu_wait: GpuWait = GpuWait.BLOCKING,
) -> GpuReport:
    """Measures ``model`` on each provider that loads, in each (precision, io) variant; rows begun
    after ``budget_s`` are skipped and said so. The CPU provider, asked beside a GPU one, runs only the
    first size at batch 1, fp32. ``gpu_wait``: how the calling thread waits for a GPU (the process's
    one setting, as ``model.gpu_wait``), which the CPU ms per frame of every GPU row rests on."""
    begun = time.perf_counter()
    available = ort.get_available_providers()
    if any(p in available for p in GPU_PROVIDERS) and hasattr(ort, "preload_dlls"):
        # pip's CUDA and cuDNN live in site-packages, not on the loader's path
        ort.preload_dlls()
    run = _Run(begun, budget_s, seconds, dict(cuda_options or {}), gpu_wait, progress)
    with tempfile.TemporaryDirectory(prefix="streamer-gpu-") as folder:
        cache = Path(folder)
        loaded = loaded_providers(providers, available, model, cache, gpu_wait, run.skipped)
        any_gpu = any(p in GPU_PROVIDERS for p in loaded)
        reference = OnnxBackend(model, providers=[CPU])
        files = _variant_files(model, reference.info.value_range, variants, cache, run.skipped)
        for provider in loaded:
            chosen = variants
            rows = [(s, b) for s in sizes for b in batches]
            if provider == CPU and any_gpu:
                chosen, rows = [("fp32", "float")], [(sizes[0], 1)]
            for variant in chosen:
                _measure_variant(run, provider, variant, files, reference, rows, cache)
    return GpuReport(
        cpu=cpu_name(),
        isa=cpu_isa(),
        gpu=gpu_name(),
        onnxruntime=ort.__version__,
        available=available,
        loaded=loaded,
        skipped=run.skipped,
        cuda_options=dict(run.cuda_options),
        gpu_wait=str(gpu_wait) if any_gpu else "no GPU provider ran",
        model=model.name,
        t=reference.info.t,
        parity=run.parity,
        speeds=run.speeds,
        streams_1080p30=streams_1080p30(run.speeds),
        pinned=_pinned(any_gpu),
        wall_s=time.perf_counter() - begun,
    )


@dataclass(slots=True)
class _Run:
    """One run's time budget and settings, and what it has measured and skipped so far."""

    begun: float
    budget_s: float
    seconds: float
    cuda_options: dict[str, str]
    gpu_wait: GpuWait
    progress: Callable[[str], None]
    skipped: list[str] = field(default_factory=list)
    parity: list[Parity] = field(default_factory=list)
    speeds: list[Speed] = field(default_factory=list)

    def note(self, line: str) -> None:
        """``line`` among the skipped, once however often it comes."""
        self.skipped.extend([line] if line not in self.skipped else [])


def _measure_variant(
    run: _Run,
    provider: str,
    variant: Variant,
    files: Mapping[Variant, Path],
    reference: OnnxBackend,
    rows: Sequence[tuple[tuple[int, int], int]],
    cache: Path,
) -> None:
    """Parity with ``reference`` and a row per size, batch and path of ``provider`` in ``variant``;
    nothing where the variant cannot run on the provider or its file could not be made."""
    precision = variant[0]
    if precision == "fp16" and provider == CPU:
        run.note("fp16 on the CPU provider: not measured (no fp16 Conv kernels on the CPU)")
        return
    # TensorRT builds its own fp16 engine from the fp32 graph
    file = files.get(("fp32", variant[1]) if provider == TENSORRT else variant)
    if file is None:
        return
    options = provider_options(provider, precision, cache)
    if provider == CUDA and run.cuda_options:
        options[CUDA] = dict(run.cuda_options)
    backend = OnnxBackend(
        file,
        providers=chain(provider),
        provider_options=options,
        device_frames=not reference.info.streaming,  # frames (and a recurrent state) kept on the device
        gpu_wait=run.gpu_wait,
    )
    if provider != CPU:
        run.parity.append(_parity(backend, reference, provider, variant))
        if reference.info.state:
            run.parity.append(recurrent_parity(backend, reference, provider, variant))
        run.progress(f"parity {provider} {variant}: {run.parity[-1].max_levels} levels at most")
    paths = ["device", "host", "frames", "frames_fresh", "frames_yuv"]
    if provider == CUDA and run.cuda_options.get("enable_cuda_graph") == "1":
        paths = ["device"]
        run.note("host path with enable_cuda_graph=1: not run (CUDA graphs need IO binding)")
    for size, batch in rows:
        for path in paths:
            if path.startswith("frames") and backend.device_frames is None:
                continue
            if time.perf_counter() - run.begun > run.budget_s:
                run.speeds.append(_failed(provider, variant, size, batch, path, "skipped: time budget spent"))
                continue
            row = _speed_row(backend, provider, variant, size, batch, path, run.seconds)
            run.speeds.append(row)
            done = f"{row.fps:.1f} fps" if row.fps else f"failed: {row.error}"
            run.progress(f"{provider} {variant} {row.size} b{batch} {path}: {done}")
    backend.close()


def _pinned(any_gpu: bool) -> str:
    memory = cuda_host_memory() if any_gpu else None
    if memory is None:
        why = "no CUDA runtime in this process" if any_gpu else "no GPU provider ran"
        return f"{why}: host buffers kept, not page-locked"
    return (
        f"at most {memory.peak / 1e6:.0f} MB page-locked at once (of {memory.budget / 1e6:.0f} MB allowed)"
        + ("; cudaHostRegister refused (see the warning)" if memory.failed else "")
    )


def _variant_files(
    model: Path,
    value_range: tuple[float, float],
    variants: Sequence[Variant],
    folder: Path,
    skipped: list[str],
) -> dict[Variant, Path]:
    """The model file of each variant, made here: fp16 by onnxruntime's converter, uint8 folded."""
    files: dict[Variant, Path] = {}
    for precision, io in variants:
        try:
            file = model if precision == "fp32" else half_precision(model, folder)
            if io == "uint8":
                file = fold_uint8_io(file, folder, value_range)
        except Exception as err:  # onnx missing, or a graph a converter refuses
            skipped.append(f"{precision} {io}: making the variant failed: {err}")
            continue
        files[(precision, io)] = file
    return files


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 1 or v > 256 for v in values):
        raise ConfigError(f"{flag} {text!r}: give comma-separated whole numbers from 1 to 256, e.g. 1,4,16")
    return values


def _options(text: str | None) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in (text or "").split(","):
        key, sep, value = pair.strip().partition("=")
        if not pair.strip():
            continue
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(
                f"--cuda-options {text!r}: write KEY=VALUE pairs, comma-separated, e.g. prefer_nhwc=1"
            )
        options[key.strip()] = value.strip()
    return options


def run_from_args(args: argparse.Namespace) -> int:
    if args.providers == "auto":
        providers = [*(p for p in GPU_PROVIDERS if p in ort.get_available_providers()), CPU]
    else:
        providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    precisions = [p.strip() for p in args.precisions.split(",")]
    if not precisions or any(p not in PRECISIONS for p in precisions):
        raise ConfigError(f"--precisions {args.precisions!r}: give fp32, fp16 or fp32,fp16")
    ios = [p.strip() for p in args.io.split(",")]
    if not ios or any(p not in IOS for p in ios):
        raise ConfigError(f"--io {args.io!r}: give float, uint8 or float,uint8")
    if not math.isfinite(args.seconds) or not 0 < args.seconds <= 60:
        raise ConfigError(f"--seconds {args.seconds}: give a number of seconds above 0, at most 60")
    if not math.isfinite(args.budget_s) or not 0 < args.budget_s <= 3600:
        raise ConfigError(f"--budget-s {args.budget_s}: give a number of seconds above 0, at most 3600")
    report = run_gpu_bench(
        args.model or DEFAULT_MODEL,
        providers,
        parse_sizes(args.sizes, "--sizes"),
        _ints(args.batches, "--batches"),
        [(p, io) for p in precisions for io in ios],
        args.seconds,
        args.budget_s,
        _options(args.cuda_options),
        progress=lambda line: print(line, file=sys.stderr, flush=True),
        gpu_wait=GpuWait(args.gpu_wait),
    )
    table, markdown = format_report(report)
    return emit(table, markdown, asdict(report), args.json, args.markdown)
