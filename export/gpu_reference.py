"""``python -m export.gpu_reference``: the shipped window model's torch twin on a GPU, a yardstick for
onnxruntime's CUDA provider (issue 12).

The same layers, rebuilt from the ONNX file by :mod:`export.recover` (which checks them equal to it),
run by PyTorch's cuDNN with what makes small-channel convolutions use tensor cores: channels-last
memory, fp16 or bf16, ``cudnn.benchmark``, and the whole forward replayed as one CUDA graph, so no
launch gaps. Where this is far faster than ``streamer bench gpu``'s device path, onnxruntime's kernels
or launches are what to change; where it is not, the model's own shape is. Its top kernels by GPU time
at one setting say where the time goes. Torch is for export and training only: nothing here enters the
runtime, and the GPU check itself (``streamer bench gpu``) needs no torch.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import torch

from export.objective import count_macs
from export.recover import conv3d_from_onnx
from streamer.assets import DEFAULT_MODEL

__all__ = ["Row", "main", "measure"]

M = TypeVar("M", bound=torch.nn.Module)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class Row:
    size: str
    batch: int
    dtype: str
    layout: str
    graph: bool
    fps: float
    ms: float
    """Median milliseconds per call."""
    tflops: float
    """Achieved, at the model's counted MACs (two FLOPs each)."""
    levels: float
    """Largest difference from fp32's output on the same input, in levels of 255."""


def _size(text: str) -> tuple[int, int]:
    width, _, height = text.partition("x")
    return int(width), int(height)


def _placed(model: M, dtype: torch.dtype, memory: torch.memory_format) -> M:
    """``model`` on the GPU in ``dtype``, its 4-D weights in ``memory`` order (channels-last: cuDNN's
    tensor-core kernels then take and give NHWC activations, with no transposes between layers)."""
    model.to("cuda", dtype)
    for parameter in model.parameters():
        if parameter.dim() == 4:
            parameter.data = parameter.data.contiguous(memory_format=memory)
    return model


def _median_ms(call: Callable[[], object], seconds: float) -> float:
    """Median of per-call GPU times from CUDA events, after three warm-up calls."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < 5 or time.perf_counter() - started < seconds:
        begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        begin.record()
        call()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def _as_graph(model: torch.nn.Module, x: torch.Tensor) -> tuple[Callable[[], object], torch.Tensor]:
    """The forward on ``x`` captured once as a CUDA graph: replaying it launches every kernel at once."""
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = model(x)
    return graph.replay, y


def measure(
    path: Path,
    sizes: Sequence[tuple[int, int]],
    batches: Sequence[int],
    dtypes: Sequence[str],
    layouts: Sequence[str],
    seconds: float,
    progress: Callable[[str], None] = print,
) -> list[Row]:
    torch.backends.cudnn.benchmark = True
    base = conv3d_from_onnx(path).eval()
    rows: list[Row] = []
    with torch.inference_mode():
        for width, height in sizes:
            macs = count_macs(base, (torch.zeros(1, base.t, 3, height, width),))
            for batch in batches:
                x32 = torch.rand(batch, base.t, 3, height, width, device="cuda")
                reference = copy.deepcopy(base).to("cuda")(x32)
                for dtype in dtypes:
                    for layout in layouts:
                        memory = torch.channels_last if layout == "nhwc" else torch.contiguous_format
                        model = _placed(copy.deepcopy(base), DTYPES[dtype], memory)
                        x = x32.to(DTYPES[dtype])
                        for graphed in (False, True):
                            try:
                                if graphed:
                                    call, y = _as_graph(model, x)
                                    call()
                                else:
                                    y = model(x)
                                    call = functools.partial(model, x)
                                levels = float((y.float() - reference).abs().max()) * 255
                                ms = _median_ms(call, seconds)
                            except torch.cuda.OutOfMemoryError:
                                progress(f"{width}x{height} b{batch} {dtype} {layout}: out of memory")
                                torch.cuda.empty_cache()
                                continue
                            fps = batch * 1000 / ms
                            row = Row(
                                f"{width}x{height}",
                                batch,
                                dtype,
                                layout,
                                graphed,
                                fps,
                                ms,
                                fps * 2 * macs / 1e12,
                                levels,
                            )
                            rows.append(row)
                            progress(
                                f"{row.size} b{batch} {dtype} {layout} {'graph' if graphed else 'eager'}: "
                                f"{fps:.0f} fps ({ms:.2f} ms, {row.tflops:.1f} TFLOP/s, {levels:.2f} levels)"
                            )
                        del model
                torch.cuda.empty_cache()
    return rows


def _profiled(run: Callable[[], object], calls: int) -> dict[str, float]:
    """Microseconds of GPU time by kernel over ``calls`` runs, after three unprofiled ones. CUPTI sees
    every kernel of the process, onnxruntime's CUDA provider's as well as torch's."""
    from torch.profiler import DeviceType, ProfilerActivity, profile

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:  # the kernels themselves, not the ops that launched them
            totals[event.name] = totals.get(event.name, 0.0) + event.device_time_total
    return totals


def _table(title: str, totals: dict[str, float], calls: int, count: int) -> str:
    lines = [f"top kernels, {title}, GPU ms per call:"]
    whole = sum(totals.values()) / calls / 1000
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[:count]:
        lines.append(f"  {us / calls / 1000:8.3f}  {100 * us / calls / 1000 / whole:5.1f}%  {name[:110]}")
    lines.append(f"  {whole:8.3f}  100.0%  all {len(totals)} kernels")
    return "\n".join(lines)


def top_kernels(
    path: Path, size: tuple[int, int], batch: int, dtype: str, layout: str, count: int = 15
) -> str:
    """The kernels that took the most GPU time over 20 forward calls at one setting, per call."""
    torch.backends.cudnn.benchmark = True
    memory = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    model = _placed(conv3d_from_onnx(path).eval(), DTYPES[dtype], memory)
    width, height = size
    x = torch.rand(batch, model.t, 3, height, width, device="cuda", dtype=DTYPES[dtype])
    with torch.inference_mode():
        totals = _profiled(lambda: model(x), 20)
    return _table(f"torch, {width}x{height} b{batch} {dtype} {layout}", totals, 20, count)


def onnxruntime_kernels(path: Path, size: tuple[int, int], batch: int, count: int = 15) -> str:
    """The same table for onnxruntime's CUDA provider running the file as ``streamer bench gpu``'s
    device path does (fp16 by onnxruntime's converter, uint8 in and out, IO binding)."""
    import onnxruntime as ort

    from streamer.backend.onnx import OnnxBackend
    from streamer.measure.synthetic import pattern_window
    from streamer.measure.variants import fold_uint8_io, half_precision, on_device

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    width, height = size
    with tempfile.TemporaryDirectory(prefix="streamer-ref-") as folder:
        value_range = OnnxBackend(path, providers=["CPUExecutionProvider"]).info.value_range
        file = fold_uint8_io(half_precision(path, Path(folder)), Path(folder), value_range)
        backend = OnnxBackend(file, providers=["CUDAExecutionProvider"], device_frames=False)
    if backend.info.provider != "CUDAExecutionProvider":
        return f"onnxruntime kernels: not measured (the model runs on {backend.info.provider})"
    totals = _profiled(on_device(backend, pattern_window(batch, backend.info.t, width, height)), 20)
    return _table(
        f"onnxruntime {ort.__version__} CUDA, {width}x{height} b{batch} fp16 uint8", totals, 20, count
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.gpu_reference", description=__doc__)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="a window model's ONNX file")
    parser.add_argument("--sizes", default="1280x720,1920x1080", help="frame sizes, WxH, comma-separated")
    parser.add_argument("--batches", default="1,8,16", help="windows per call, comma-separated")
    parser.add_argument("--dtypes", default="fp32,fp16,bf16", help=f"of {', '.join(DTYPES)}")
    parser.add_argument(
        "--layouts", default="nchw,nhwc", help="nchw (contiguous) and/or nhwc (channels-last)"
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per row")
    parser.add_argument(
        "--profile",
        default="1280x720:8:fp16:nhwc",
        help="SIZE:BATCH:DTYPE:LAYOUT of the kernel table; '' for none",
    )
    parser.add_argument(
        "--onnxruntime",
        default="",
        help="SIZE:BATCH: also the kernel table of onnxruntime's CUDA provider on the model (fp16, uint8)",
    )
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA device for torch here; this yardstick runs on a GPU machine", file=sys.stderr)
        return 2
    dtypes = args.dtypes.split(",")
    if unknown := set(dtypes) - set(DTYPES):
        parser.error(f"--dtypes: unknown {sorted(unknown)}; choose from {', '.join(DTYPES)}")
    cudnn = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {cudnn}")
    rows = measure(
        args.model,
        [_size(s) for s in args.sizes.split(",")],
        [int(b) for b in args.batches.split(",")],
        dtypes,
        args.layouts.split(","),
        args.seconds,
    )
    if args.profile:
        size, batch, dtype, layout = args.profile.split(":")
        print(top_kernels(args.model, _size(size), int(batch), dtype, layout))
    if args.onnxruntime:
        size, batch = args.onnxruntime.split(":")
        print(onnxruntime_kernels(args.model, _size(size), int(batch)))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
