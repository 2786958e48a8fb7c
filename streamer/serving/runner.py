"""Running a config to its end: every stream served until it ends or a signal stops it, with a
progress bar for one stream, and the summary printed for each.

The entry points (``streamer run``, ``streamer demo``) share these; they import this module, never each
other.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from streamer.config import Config, webrtc_name
from streamer.engine.pipeline import Outcome, Pipeline, PipelineReport
from streamer.engine.tally import MISSED
from streamer.errors import StreamerError
from streamer.frame import Frame
from streamer.serving.control import ControlServer
from streamer.serving.service import Service, StreamResult

START = logging.getLogger(f"{__name__}.start")
"""The start-up lines in JSON logs: at info level, shown whatever ``runtime.log_level`` says."""

__all__ = ["EXIT_FAILED", "format_report", "run_config", "run_streams"]

EXIT_FAILED = 1
"""Exit code of a run in which a stream failed, or whose sinks are stuck."""


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
        say = _say(service.config.runtime.log_format == "text")
        if service.server is not None:
            await service.server.start()
            say(f"WHIP/WHEP on {service.server.url}")
            for stream in service.config.stream_configs():
                wheps = (webrtc_name(sink, "whep") for sink in stream.outputs())
                name = webrtc_name(stream.source, "whip") or next((n for n in wheps if n), None)
                if name is not None:
                    say(f"stream {stream.id}: viewer {service.server.viewer_url}/view/{name}")
        if control is not None:
            await control.start()
            say(f"operations endpoint {control.url} (/healthz /readyz /metrics /streams)")
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


def _say(text: bool) -> Callable[[str], None]:
    """Where the start-up lines go: stderr beside the progress bar in text logs; a log record each in
    JSON logs, so a log collector (the compose recipe's) shows the viewer's address too."""
    if text:
        return lambda line: print(f"streamer: {line}", file=sys.stderr)
    START.setLevel(logging.INFO)
    return lambda line: START.info("%s", line)


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


def run_config(config: Config, progress: bool) -> PipelineReport | None:
    """Run a one-stream config; its report, None when it was stopped before its source opened (a WHIP
    stream nobody published to, a camera not reached yet), or the error that stopped it raised."""
    results = run_streams(config, progress, log_failures=False)
    if len(results) != 1:
        raise StreamerError(f"expected one stream, {len(results)} ran; use run_streams for several")
    result = results[0]
    if result.error is not None:
        raise result.error
    return result.report


def format_report(report: PipelineReport, output: Path | None, unpaced_file: bool = False) -> str:
    """The run's summary; ``unpaced_file``: the source was a file read as fast as it decodes, so
    frames the latency budget left unenhanced get the setting that enhances them all."""
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
    missed = sum(report.outcomes.get(outcome.value, 0) for outcome in MISSED)
    if missed:
        why = (
            "; a file read unpaced (source.realtime: false) arrives faster than a model runs: "
            "latency.budget_ms: null enhances every frame"
            if unpaced_file
            else ""
        )
        lines.append(
            f"budget      {missed} of {report.frames_in} frames left unenhanced to stay within "
            f"latency.budget_ms{why}"
        )
    if output is not None:
        lines.append(f"output      {output}")
    return "\n".join(lines)
