"""``streamer bench latency``: per-frame end-to-end latency through RTSP and WebRTC, on loopback.

A camera draws each frame's number into its pixels (:mod:`streamer.media.framecode`) and notes when it handed
the frame to its encoder; an independent player at the far end decodes the numbers and notes when each
frame came out of its decoder. The difference is what a viewer waits: camera encode, transport, the
streamer's decode, window, model and encode, transport again and the player's decode, measured on the
frames that really came out rather than on timestamps a server may rewrite. The paths, run one after
the other in one run, each through a service (``streamer.serving.service``) as ``streamer run`` serves a
stream, ``model: auto`` included (its calibration before the source opens, its tier moves):

- ``rtsp``: PyAV camera -> GStreamer relay ``/cam`` -> RtspSource -> Pipeline -> RtspSink -> relay
  ``/out`` -> PyAV reader. The relay is :mod:`streamer.measure.rtsp_relay`, a process of Debian's python3;
  the path is skipped, saying why, when that interpreter cannot import GstRtspServer.
- ``webrtc``: aiortc publisher -> WHIP -> WhipSource -> Pipeline -> WhepSink -> WHEP -> aiortc player.

A center window enhances frame n only once frame n + T//2 has arrived, so T//2 frame periods of every
frame's latency are the window's lookahead, fixed by the model and the frame rate; the rest is
processing and transport. The pipeline's own arrival-to-written latency, per measured frame and as its
PipelineReport gives it over the whole run, tells what happens inside streamer from the encodes,
transports and decodes around it.

With the gate on and ``on_skip: reuse``, a skipped window's frame leaves with the last enhanced frame's
pixels, frame number included; the player cannot tell it from that earlier frame. Latency is therefore
measured only on numbers seen for the first time; repeats count as received, not as measured.

Frames before the measured ones warm up encoders, bitrate control and the model; frames after them let
the measured ones leave the window and the parsers. Every path stops by itself: the camera sends a fixed
number of frames, and a wall-clock cap stops whatever is still running.

This module runs the paths in turn and reads the flags; the paths are :mod:`streamer.bench.latency_rtsp`
and :mod:`streamer.bench.latency_webrtc`, what they share (settings, camera, figures)
:mod:`streamer.bench.latency_measure`, and the table :mod:`streamer.bench.latency_report`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from streamer.app import build_backend, build_windower
from streamer.bench.latency_measure import PATHS, PathResult, Settings, Skipped, parse_model, parse_size
from streamer.bench.latency_report import LatencyReport, format_markdown, format_table
from streamer.bench.latency_rtsp import run_rtsp
from streamer.bench.latency_webrtc import run_webrtc
from streamer.config import WindowConfig
from streamer.engine.tiers import AUTO
from streamer.errors import ConfigError
from streamer.measure.machine import cpu_name, isa_text
from streamer.media import framecode

__all__ = ["run_from_args", "run_latency"]


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def _machine() -> str:
    return f"{cpu_name()} ({isa_text()}), {os.cpu_count()} cores"


async def _run(settings: Settings) -> tuple[list[PathResult], list[Skipped]]:
    measured = range(settings.warmup, settings.warmup + settings.frames)
    rows: list[PathResult] = []
    skipped: list[Skipped] = []
    for path in settings.paths:
        result = await (run_rtsp(settings, measured) if path == "rtsp" else run_webrtc(settings, measured))
        if isinstance(result, Skipped):
            skipped.append(result)
        else:
            rows.append(result)
    return rows, skipped


def run_latency(settings: Settings) -> LatencyReport:
    """Runs each path of ``settings`` in turn on loopback; see the module docstring."""
    started = time.monotonic()
    load_before = _load()
    config = settings.config()
    backend = build_backend(config.model)
    model = backend.info
    backend.close()
    lookahead = build_windower(WindowConfig(), model.t, model.output_position).lookahead
    rows, skipped = asyncio.run(_run(settings))
    on_skip = config.gate.on_skip.value if settings.gate else "gate off"
    reuse = (
        f"with the gate on and on_skip {on_skip}, a skipped window's frame repeats the last enhanced frame, "
        "number included: it counts as received, not as measured"
        if on_skip == "reuse"
        else f"gate policy {on_skip}: every frame leaves with its own number"
    )
    notes = [
        "frames: sent = measured frames the camera sent; recv = decoded frames carrying their numbers, "
        "repeats included; lost = sent - recv; new = numbers seen for the first time, the latency samples",
        f"latency is measured only on numbers seen for the first time; {reuse}",
        f"lookahead: a {model.output_position.value} window of T={model.t} enhances a frame once {lookahead} "
        f"later frames have arrived, {lookahead} x 1000/{settings.fps} ms; rest = p50 - lookahead "
        "(processing + transport)",
        "pipeline: arrival -> written inside streamer, per measured frame, as its PipelineReport records "
        "it (RtspSink encodes before 'written'; WhepSink's players are encoded after it, once for those "
        "sharing H.264); the "
        "report's own figures, over every frame written, warm-up included, are on each path's line; "
        "outside: per measured frame, end to end minus pipeline: encode, transport and decode around it",
        "RtspSource, WhipSource and both players decode each frame as its last packet arrives (the RTP "
        "marker bit; source.reader auto for RTSP); FFmpeg's RTSP reader and aiortc's own jitter buffer "
        "would wait a frame period for the next one to begin",
        "camera and players run in this process (own threads; the WebRTC peers on their own event loop) "
        "and share its CPUs with the streamer; all traffic is loopback; "
        + (
            "the camera's frames were encoded before the run (H.264 for RTSP, VP8 for WebRTC)"
            if settings.camera_ahead
            else "the camera encodes each frame as it sends it"
        ),
        f"load average {load_before} at start, {_load()} at end: other work on the machine inflates the "
        "tails",
    ]
    return LatencyReport(
        machine=_machine(),
        settings=settings,
        model=(
            f"auto (each path's tier on its line; T={model.t}, {model.output_position.value})"
            if settings.model == AUTO
            else f"{model.name} (T={model.t}, {model.output_position.value})"
        ),
        provider=model.provider,
        on_skip=on_skip,
        rows=tuple(rows),
        skipped=tuple(skipped),
        notes=tuple(notes),
        wall_s=time.monotonic() - started,
    )


def _parse_paths(text: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in paths if p not in PATHS]
    if not paths or unknown or len(set(paths)) != len(paths):
        raise ConfigError(f"--paths {text!r}: list each of {', '.join(PATHS)} at most once, comma-separated")
    return paths


def run_from_args(args: argparse.Namespace) -> int:
    """The ``bench latency`` handler: prints the table, writes --json / --markdown when asked."""
    width, height = parse_size(args.size)
    if args.frames < 1 or args.warmup < 0:
        raise ConfigError(
            f"--frames must be at least 1 and --warmup at least 0, got {args.frames}, {args.warmup}"
        )
    if not 1 <= args.fps <= 120:
        raise ConfigError(f"--fps {args.fps} is out of range; use 1..120")
    if args.warmup + args.frames > framecode.MAX_VALUE:
        raise ConfigError(
            f"--warmup + --frames must stay below {framecode.MAX_VALUE}, the largest frame number"
        )
    if args.budget_ms is not None and args.budget_ms <= 0:
        raise ConfigError(f"--budget-ms must be positive, got {args.budget_ms}")
    settings = Settings(
        width,
        height,
        args.fps,
        args.frames,
        args.warmup,
        args.gate,
        _parse_paths(args.paths),
        model=AUTO if args.model is None else parse_model(args.model),
        budget_ms=args.budget_ms,
        camera_ahead=args.camera == "ahead",
    )
    report = run_latency(settings)
    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(report), indent=2, default=str) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(report))
    return 0
