"""The ``streamer bench`` commands that run live streams against a service, the RTSP relay or WebRTC
players: ``streams``, ``live``, ``keepalive``, ``whep`` and ``admission``.

Each ``add_NAME`` adds one command's flags; its handler imports the benchmark only when the command
runs, so building the CLI loads none of their dependencies."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_admission", "add_keepalive", "add_live", "add_streams", "add_whep"]


def add_streams(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench streams``."""
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


def add_live(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench live``."""
    live = kinds.add_parser(
        "live",
        help="can each model tier keep up with a live RTSP or WebRTC camera here: %% enhanced, latency, CPU",
        description=(
            "For each path, size and model: a camera paced at --fps publishes (RTSP: through the real "
            "GStreamer RTSP relay; WebRTC: over WHIP), streamer enhances it under --budget-ms and sends it "
            "on (RTSP: back to the relay; WebRTC: to a WHEP player), a player reads it. Prints "
            "the share of frames enhanced, passed through and lost, p50/p99 glass-to-glass latency, the "
            "model's own fps on that size, CPU used, and the CPU model with its ISA flags."
        ),
    )
    live.add_argument(
        "--sizes", default="640x360,1280x720", metavar="WxH,...", help="frame sizes (640x360,1280x720)"
    )
    live.add_argument(
        "--paths",
        default="rtsp",
        metavar="P,...",
        help="rtsp (the README's quick start: RTSP in, RTSP out) and/or webrtc (configs/webrtc.yaml: WHIP "
        "in, WHEP out), comma-separated (rtsp)",
    )
    live.add_argument("--fps", type=int, default=30, help="camera frame rate (30)")
    live.add_argument("--seconds", type=float, help="measured seconds per run (60; 90 with --load)")
    live.add_argument(
        "--budget-ms", type=float, default=250.0, help="latency.budget_ms of the pipeline (250)"
    )
    live.add_argument(
        "--model",
        action="append",
        metavar="ONNX",
        help="a model tier to run, or auto (the tier model.path auto chooses), repeatable (default: auto, "
        "what a live stream runs when no model is named)",
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
        "--reader",
        default="auto",
        metavar="R,...",
        help="how streamer's RTSP source and the player read RTSP, to compare: auto (each frame as its last "
        "packet arrives, source.reader's default) and/or ffmpeg (FFmpeg's reader, a frame period later) "
        "(auto)",
    )
    live.add_argument(
        "--camera",
        choices=("ahead", "live"),
        default="ahead",
        help="ahead: the camera encodes its frames before each run and only sends them during it, as an "
        "IP camera or a browser encodes on its own chip, so the cores measured are streamer's (and the "
        "player's); "
        "live: it encodes each frame on these cores as it sends it (ahead)",
    )
    live.add_argument(
        "--headroom",
        type=float,
        help="model.headroom for auto: how many times the camera's rate a tier must serve, beside the "
        "stream's decode and encode, to be started on or moved up to (default: model.headroom's own)",
    )
    live.add_argument(
        "--load",
        action="store_true",
        help="another process takes one core from 30 to 60 s after the camera starts, as a neighbour on "
        "the host would; the table lists model auto's tier moves with their times",
    )
    live.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    live.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    live.set_defaults(func=_live)


def _live(args: argparse.Namespace) -> int:
    from streamer.bench.live import run_from_args

    return run_from_args(args)


def add_keepalive(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench keepalive``."""
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


def _keepalive(args: argparse.Namespace) -> int:
    from streamer.bench.keepalive import run_from_args

    return run_from_args(args)


def add_whep(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench whep``."""
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
    whep.add_argument(
        "--shared-h264",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="webrtc.shared_h264: the players share one H.264 encode (the default), or each gets its own",
    )
    whep.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    whep.add_argument("--markdown", metavar="PATH", help="also write the table as markdown here")
    whep.set_defaults(func=_whep)


def _whep(args: argparse.Namespace) -> int:
    from streamer.bench.whep import run_from_args

    return run_from_args(args)


def add_admission(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench admission``."""
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


def _admission(args: argparse.Namespace) -> int:
    from streamer.bench.admission import run_from_args

    return run_from_args(args)
