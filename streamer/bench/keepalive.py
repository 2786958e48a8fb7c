"""``streamer bench keepalive``: a camera gone for half a minute behind an RTSP output, seen by a reader.

A camera (FFmpeg's ``testsrc2`` with each frame's number stamped in, libx264, paced in real time, in a
process of its own, as is the reader) publishes to the GStreamer relay; the pipeline reads it over RTSP,
enhances it within a latency budget and publishes ``/out`` to the relay; an independent reader (PyAV,
one session, never reconnecting, a read timeout as an NVR's) plays ``/out``. After ``--before-s`` the
camera leaves (TEARDOWN: the relay ends its stream), for ``--outage-s``; a new camera then publishes for
``--after-s``. What the reader saw is the result: the longest wait between two frames (overall, and from
the camera leaving until its return shows), whether its session outlived the outage, the frames it got
meanwhile (the last frame again, then the NO SIGNAL card) and the frames of the second camera, enhanced
again.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import av
import av.error
import numpy as np

from streamer.app import build_pipeline
from streamer.assets import STREAMING_LITE_MODEL
from streamer.bench.harness import Target, emit, markdown_targets, table_footer
from streamer.bench.latency_measure import Camera, Settings, parse_size
from streamer.bench.latency_rtsp import Relay, RtspCamera
from streamer.config import (
    Config,
    GateConfig,
    KeepAliveConfig,
    LatencyConfig,
    ModelConfig,
    RtspSinkConfig,
    RtspSourceConfig,
)
from streamer.engine.pipeline import Outcome
from streamer.errors import ConfigError, SourceError
from streamer.frame import Frame
from streamer.measure import rtsp_relay
from streamer.measure.machine import LoadWatch, Machine
from streamer.media import framecode

__all__ = ["KeepAliveResult", "run_keepalive"]

_CARD_MEAN = 47.0
"""Mean pixel level of the NO SIGNAL card (dark grey 40, its text 200) as decoded."""


@dataclass(frozen=True, slots=True)
class KeepAliveResult:
    width: int
    height: int
    fps: int
    outage_s: float
    reader_timeout_s: float
    frames_seen: int
    seen_during_outage: int
    """Frames the reader got from the camera leaving until the second camera's first frame."""
    cards_seen: int
    max_gap_ms: float
    """Longest wait between two frames at the reader, the whole run."""
    max_gap_outage_ms: float
    """Longest wait before, between or after the keep-alive's frames (a repeat or the card), from the camera
    leaving until the second camera's first frame: what the keep-alive controls."""
    max_gap_outage_at_s: float
    """When that wait ended, in seconds after the camera left."""
    reader_sessions_ended: int
    """Sessions of the reader that ended before the run did (it never reconnects): 0 is the aim."""
    second_camera_frames: int
    """Frames of the second camera the pipeline wrote."""
    second_camera_enhanced: int
    repeats: int
    cards: int
    stale: int
    seconds: float


class _Reader:
    """An NVR: one session of ``/out``, never reconnecting; notes each frame's arrival (when its packet is
    demuxed, before decoding), code and level. In a process of its own, so its decoding and the
    pipeline's work never wait for each other's interpreter lock: what it sees is what the RTSP output
    and the relay deliver (arrival times are the system's monotonic clock, shared by both processes)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.timeout_s = timeout_s
        self.frames: list[tuple[float, int | None, float]] = []
        self._halt = context.Event()
        self._ended = context.Value("d", 0.0)
        self._results, child = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_read, args=(url, timeout_s, self._halt, self._ended, child), daemon=True
        )

    @property
    def ended_at(self) -> float | None:
        """When its session ended before it was halted (the output went silent for its read timeout)."""
        return float(self._ended.value) or None

    def start(self) -> None:
        self._process.start()

    def halt(self) -> None:
        self._halt.set()

    def join(self, timeout: float) -> None:
        """Collects what it saw; a reader still waiting on a silent output gives up at its read timeout."""
        if self._process.pid is None:  # never started
            return
        if self._results.poll(timeout):
            self.frames = self._results.recv()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()


def _read(url: str, timeout_s: float, halt: Any, ended: Any, results: Connection) -> None:
    frames: list[tuple[float, int | None, float]] = []
    options = {"rtsp_transport": "tcp", "analyzeduration": "100000"}
    try:
        with av.open(url, options=options, timeout=(30.0, timeout_s)) as container:
            for packet in container.demux(video=0):
                arrived = time.monotonic()
                for frame in packet.decode():
                    pixels = np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)
                    frames.append((arrived, framecode.read(pixels), float(pixels.mean())))
                if halt.is_set():
                    break
    except av.error.FFmpegError:
        pass
    if not halt.is_set():
        ended.value = time.monotonic()
    results.send(frames)
    results.close()


class _CameraProcess:
    """A camera in a process of its own (a real camera is not in the sidecar): publishes until halted."""

    def __init__(self, url: str, settings: Settings) -> None:
        context = multiprocessing.get_context("spawn")
        self._halt = context.Event()
        self._process = context.Process(target=_publish, args=(url, settings, self._halt), daemon=True)

    def start(self) -> None:
        self._process.start()

    def halt(self) -> None:
        """Leave (TEARDOWN: the relay ends its stream for its players) and wait for the process."""
        self._halt.set()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


def _publish(url: str, settings: Settings, halt: Any) -> None:
    camera = RtspCamera(url, Camera(settings))
    camera.start()
    halt.wait()
    camera.halt()
    camera.join(10)
    camera.camera.close()


def _config(relay: Relay, args: argparse.Namespace) -> Config:
    return Config(
        source=RtspSourceConfig(
            url=relay.url("cam"), read_timeout_s=2.0, backoff_initial_s=0.2, backoff_max_s=1.0
        ),
        sink=RtspSinkConfig(url=relay.publish_url("out")),
        model=ModelConfig(path=Path(args.model) if args.model else STREAMING_LITE_MODEL),
        gate=GateConfig(enabled=False),
        latency=LatencyConfig(budget_ms=args.budget_ms),
        keepalive=KeepAliveConfig(card_after_s=args.card_after_s),
    )


async def _scenario(args: argparse.Namespace, width: int, height: int) -> KeepAliveResult:
    settings = Settings(width, height, args.fps, frames=10**6, warmup=0)
    relay = Relay()
    written: list[tuple[float, Outcome]] = []

    def note(source: Frame, sent: Frame, outcome: Outcome) -> None:
        written.append((time.monotonic(), outcome))

    await asyncio.to_thread(relay.start)
    pipeline = build_pipeline(_config(relay, args), on_output=note)
    reader = _Reader(relay.url("out"), args.reader_timeout_s)
    cameras: list[_CameraProcess] = []
    running = asyncio.create_task(pipeline.run())
    started = time.monotonic()
    try:
        cameras.append(_CameraProcess(relay.publish_url("cam"), settings))
        cameras[0].start()
        await asyncio.to_thread(relay.wait_for, "publish out", 60.0)
        reader.start()
        await asyncio.sleep(args.before_s)
        await asyncio.to_thread(cameras[0].halt)
        left = time.monotonic()
        await asyncio.sleep(args.outage_s)
        cameras.append(_CameraProcess(relay.publish_url("cam"), settings))
        back = time.monotonic()
        cameras[1].start()
        await asyncio.sleep(args.after_s)
        if running.done():
            raise SourceError("bench keepalive: the pipeline ended before the run did")
        ended = reader.ended_at
        pipeline.stop()
        reader.halt()
        await asyncio.wait_for(running, 30)
    finally:
        for camera in cameras:
            await asyncio.to_thread(camera.halt)
        if not running.done():
            pipeline.stop()
            await asyncio.wait_for(running, 30)
        reader.halt()
        await asyncio.to_thread(reader.join, args.reader_timeout_s + 10)
        relay.kill()
    frames = reader.frames
    if not frames:
        raise SourceError("bench keepalive: the reader got no frame from the RTSP output")
    times = [at for at, _, _ in frames]
    gaps = np.diff(np.asarray(times)) * 1000 if len(times) > 1 else np.zeros(1)
    # The outage, as the reader lived it: from the camera leaving to the second camera's first frame.
    returned = next((at for at, code, mean in frames if at > back and code is not None), times[-1])
    during = [i for i, at in enumerate(times) if left <= at <= returned]
    # The keep-alive's own waits: into, between and out of its fillers (a frame repeating the code before
    # it, or the card). The camera's last frames still leaving the pipeline keep the model's cadence.
    filler = [_is_filler(frames, i) for i in range(len(frames))]
    outage_gaps = [
        (float(gaps[i - 1]), times[i] - left) for i in during if i > 0 and (filler[i] or filler[i - 1])
    ] or [(0.0, 0.0)]
    worst, worst_at = max(outage_gaps)
    alive = pipeline.keepalive
    stats = alive.stats() if alive is not None else None
    after = [outcome for at, outcome in written if at > back]
    return KeepAliveResult(
        width=width,
        height=height,
        fps=args.fps,
        outage_s=args.outage_s,
        reader_timeout_s=args.reader_timeout_s,
        frames_seen=len(frames),
        seen_during_outage=len(during),
        cards_seen=sum(abs(frames[i][2] - _CARD_MEAN) < 8 for i in during),
        max_gap_ms=float(gaps.max()),
        max_gap_outage_ms=worst,
        max_gap_outage_at_s=worst_at,
        reader_sessions_ended=int(ended is not None),
        second_camera_frames=len(after),
        second_camera_enhanced=after.count(Outcome.ENHANCED),
        repeats=stats.repeats if stats else 0,
        cards=stats.cards if stats else 0,
        stale=stats.stale if stats else 0,
        seconds=time.monotonic() - started,
    )


def _is_filler(frames: list[tuple[float, int | None, float]], i: int) -> bool:
    """Frame ``i`` at the reader is the keep-alive's: the card, or the frame before it again."""
    _, code, mean = frames[i]
    if code is None:
        return abs(mean - _CARD_MEAN) < 8
    return i > 0 and frames[i - 1][1] == code


def check_targets(result: KeepAliveResult) -> list[Target]:
    period_ms = 1000.0 / result.fps
    return [
        Target(
            "no gap longer than two frame intervals at the reader next to the keep-alive's frames",
            result.max_gap_outage_ms <= 2 * period_ms,
            f"longest {result.max_gap_outage_ms:.0f} ms (two intervals: {2 * period_ms:.0f} ms)",
        ),
        Target(
            "the reader never reconnects",
            result.reader_sessions_ended == 0,
            f"{result.reader_sessions_ended} session ended; read timeout {result.reader_timeout_s:g} s, "
            f"outage {result.outage_s:g} s",
        ),
        Target(
            "frames resume enhanced after the camera returns",
            result.second_camera_enhanced > 0,
            f"{result.second_camera_enhanced} of {result.second_camera_frames} enhanced",
        ),
    ]


def format_table(result: KeepAliveResult, machine: Machine) -> str:
    r = result
    lines = [
        f"streamer bench keepalive: camera gone for {r.outage_s:g} s behind an RTSP output, "
        f"{r.width}x{r.height} @ {r.fps} fps; {machine.line()}",
        "",
        f"reader: {r.frames_seen} frames; {r.seen_during_outage} while the camera was gone "
        f"({r.cards_seen} of them the card); longest gap {r.max_gap_ms:.0f} ms overall, "
        f"{r.max_gap_outage_ms:.0f} ms next to the keep-alive's frames ({r.max_gap_outage_at_s:.2f} s after "
        f"the camera left); sessions ended: {r.reader_sessions_ended}",
        f"pipeline: {r.repeats} repeats, {r.cards} cards, {r.stale} stale frames held back; second camera: "
        f"{r.second_camera_enhanced} of {r.second_camera_frames} frames enhanced",
    ]
    notes = [
        "gaps are the reader's waits between frames, each timed as its packet arrives (monotonic clock); "
        "while the camera is gone, "
        "those next to a keep-alive frame (a repeat or the card): the camera's last frames still leaving "
        "the pipeline keep the model's cadence, as in the overall figure; the relay, the pipeline and the "
        "reader share this machine's cores",
    ]
    return "\n".join([*lines, *table_footer(notes, check_targets(result), r.seconds)])


def format_markdown(result: KeepAliveResult, machine: Machine) -> str:
    r = result
    lines = [
        "| outage s | reader frames | during outage (cards) | max gap ms (outage) | sessions ended | "
        "second camera enhanced |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {r.outage_s:g} | {r.frames_seen} | {r.seen_during_outage} ({r.cards_seen}) | "
        f"{r.max_gap_ms:.0f} ({r.max_gap_outage_ms:.0f}) | {r.reader_sessions_ended} | "
        f"{r.second_camera_enhanced}/{r.second_camera_frames} |",
        "",
        f"{r.width}x{r.height} @ {r.fps} fps; {machine.line()}.",
        *markdown_targets(check_targets(result)),
    ]
    return "\n".join(lines) + "\n"


def run_keepalive(args: argparse.Namespace) -> tuple[KeepAliveResult, Machine]:
    width, height = parse_size(args.size)
    for name in ("outage_s", "before_s", "after_s", "reader_timeout_s"):
        value = getattr(args, name)
        if not 0 < value <= 3600:
            raise ConfigError(f"--{name.replace('_', '-')} must be in (0, 3600] seconds; got {value}")
    if not 1 <= args.fps <= 120:
        raise ConfigError(f"--fps must be in 1..120; got {args.fps}")
    missing = rtsp_relay.unavailable()
    if missing is not None:
        raise ConfigError(
            f"bench keepalive needs the RTSP relay: {missing}; install it with: {rtsp_relay.INSTALL_HINT}"
        )
    watch = LoadWatch()
    result = asyncio.run(_scenario(args, width, height))
    return result, watch.machine()


def run_from_args(args: argparse.Namespace) -> int:
    result, machine = run_keepalive(args)
    data: dict[str, Any] = {"machine": asdict(machine), "result": asdict(result)}
    return emit(
        format_table(result, machine), format_markdown(result, machine), data, args.json, args.markdown
    )
