"""``streamer bench streams``: how many live cameras one machine holds, decode and encode included.

Issue 12's target is stated end to end: live 1080p30 streams per GPU with p99 latency within budget,
decode and encode included. ``bench gpu`` times the model alone and ``bench codecs`` the codecs alone;
this runs the whole service. For each count N in ``--streams`` (ascending), one :class:`Service` runs N
cameras: each reads the same H.264 clip (made first: FFmpeg's ``testsrc2`` with sensor-like noise,
libx264 with a camera's one-second GOP), paced to its timestamps on the wall clock as a live feed
(``source.realtime``), looping, decoded where ``--decode`` says. The motion gate is off, so every window
goes to the model (a busy scene everywhere: the worst case), batched across streams; each output frame
is encoded (``--encode``: libx264 ultrafast, or NVENC) into a file that is thrown away. The latency
budget is on, as live: a frame that would miss it leaves unenhanced, counted.

After ``--warmup-s`` (the models' warm-up, the first batches), the run measures ``--seconds``: the frames
that arrived then, how they left, their arrival-to-written latency, and the host CPU this process used
(cores: CPU seconds over wall seconds; decode, encode, the runtime and the model's host side). N holds
when at least ``ENHANCED_SHARE`` of each stream's frames were enhanced, p99 latency is within the budget, the
sources dropped under ``DROPPED_SHARE`` of theirs and every stream ran (admission refuses streams the
memory budget cannot hold: said, and N does not hold).

With ``--processes P`` the N cameras are split over P services, each in a process of its own with its own
event loop and model session on the same device, measured over the same wall-clock window: every
stream's frames pass through its service's one event loop, which one process can saturate before a
GPU is busy.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import multiprocessing
import tempfile
import time
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from streamer.assets import DEFAULT_MODEL
from streamer.bench.harness import Target, emit, markdown_targets, parse_size, percentiles, table_footer
from streamer.config import Config, load_config
from streamer.engine.pipeline import Outcome
from streamer.errors import ConfigError
from streamer.frame import Frame
from streamer.measure.machine import LoadWatch, Machine
from streamer.serving.service import Service

__all__ = [
    "DROPPED_SHARE",
    "ENHANCED_SHARE",
    "StreamsReport",
    "StreamsRun",
    "camera_clip",
    "format_table",
    "run_from_args",
    "run_streams",
]

ENHANCED_SHARE = 0.99
"""Of the frames that arrived while measured, the share that must leave enhanced for N to hold."""
DROPPED_SHARE = 0.01
"""The share of frames the sources may drop (a stream falling behind its camera) for N to hold."""
MAX_STREAMS = 256
MAX_PROCESSES = 64
CLIP_SECONDS = 2
SPAWN_S = 6.0
"""Seconds a process of its own is given to start (imports, its service) before its warm-up counts."""


@dataclass(frozen=True, slots=True)
class StreamsRun:
    """N streams, measured."""

    streams: int
    ran: int
    """Streams that ran to the end; the others failed or were refused (``errors``)."""
    arrived: int
    """Frames that arrived while measured, over all streams."""
    outcomes: dict[str, int]
    source_dropped: int
    """Frames the sources dropped over the whole run (behind their cameras), over all streams."""
    decoded: int
    """Frames the sources decoded over the whole run, over all streams."""
    p50_ms: float | None
    p99_ms: float | None
    p99_by_outcome_ms: dict[str, float]
    """p99 of the frames that left each way: an enhanced frame waits for its call, a passed-through
    one was refused because it was already old, and leaves in order behind the calls before it."""
    cores: float
    """Host CPU over the measured seconds: CPU seconds of this process per wall second."""
    loop_cores: float
    """Of those, the event loop's thread (the busiest process's, with several): every stream of a
    service passes through that one thread (queues, windows, admission, hand-on), so at 1.0 it, not the
    cores, is what holds N back."""
    calls: int
    windows: int
    late: int
    """Windows the scheduler did not run over the whole run: a call of them, started when the model
    was free for them, would have ended past their deadline (their frames passed through)."""
    provider: str
    errors: list[str]
    processes: int = 1
    by_stream: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per stream: frames that arrived while measured, and of those the frames enhanced."""

    @property
    def enhanced_share(self) -> float:
        return self.outcomes.get(Outcome.ENHANCED.value, 0) / self.arrived if self.arrived else 0.0

    @property
    def least_enhanced_share(self) -> float:
        """The enhanced share of the stream that got the least: N holds only if every stream does."""
        shares = [enhanced / arrived for arrived, enhanced in self.by_stream.values() if arrived]
        return min(shares) if shares else 0.0

    @property
    def dropped_share(self) -> float:
        return self.source_dropped / self.decoded if self.decoded else 0.0

    @property
    def mean_batch(self) -> float:
        return self.windows / self.calls if self.calls else 0.0

    def holds(self, budget_ms: float) -> bool:
        return (
            self.ran == self.streams
            and self.arrived > 0
            and self.least_enhanced_share >= ENHANCED_SHARE
            and self.p99_ms is not None
            and self.p99_ms <= budget_ms
            and self.dropped_share < DROPPED_SHARE
        )


@dataclass(frozen=True, slots=True)
class StreamsReport:
    size: tuple[int, int]
    fps: int
    seconds: float
    warmup_s: float
    budget_ms: float
    max_batch: int | None
    """``runtime.max_batch``; None: the runtime's own (1 on the CPU provider, 8 on a GPU's)."""
    decode: str
    encode: str
    model: str
    clip_kbps: float
    runs: list[StreamsRun]
    machine: Machine
    wall_s: float
    processes: int = 1
    """Services each count's cameras were split over, each in a process of its own."""

    @property
    def most_held(self) -> int:
        """The most streams that held, 0 where none did."""
        return max((r.streams for r in self.runs if r.holds(self.budget_ms)), default=0)

    def targets(self) -> list[Target]:
        w, h = self.size
        return [
            Target(
                f"live {w}x{h}@{self.fps} streams held (each >= {ENHANCED_SHARE:.0%} enhanced, p99 within "
                f"{self.budget_ms:g} ms, decode and encode included)",
                self.most_held > 0 if self.runs else None,
                f"{self.most_held} of the counts tried ({', '.join(str(r.streams) for r in self.runs)})",
            )
        ]


def camera_clip(path: Path, size: tuple[int, int], fps: int, seconds: int = CLIP_SECONDS) -> float:
    """An H.264 clip as a camera sends it: FFmpeg's testsrc2 (it moves everywhere), Gaussian noise of
    sigma 4 as a sensor's, libx264 at CRF 23 with a GOP of one second and no B-frames. Returns its
    kbit/s."""
    width, height = size
    rng = np.random.default_rng(0)
    options = {"preset": "veryfast", "crf": "23", "g": str(fps), "bf": "0"}
    spec = f"testsrc2=size={width}x{height}:rate={fps}"
    with av.open(spec, format="lavfi") as pattern, av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index, frame in enumerate(pattern.decode(video=0)):
            if index >= fps * seconds:
                break
            pixels = frame.to_ndarray(format="rgb24").astype(np.float32)
            noisy = np.clip(np.rint(pixels + rng.normal(0.0, 4.0, pixels.shape)), 0, 255)
            made = av.VideoFrame.from_ndarray(noisy.astype(np.uint8), format="rgb24")
            made.pts, made.time_base = index, Fraction(1, fps)
            out.mux(stream.encode(made))
        out.mux(stream.encode(None))
    return path.stat().st_size * 8 / seconds / 1000


@dataclass(frozen=True, slots=True)
class _Part:
    """What one service measured: raw, so that several services' parts merge into one run."""

    streams: int
    ran: int
    latencies: dict[str, list[float]]
    by_stream: dict[str, tuple[int, int]]
    source_dropped: int
    decoded: int
    cores: float
    loop_cores: float
    calls: int
    windows: int
    late: int
    provider: str
    errors: list[str] = field(default_factory=list)


async def _part(config: Config, start: float, end: float) -> _Part:
    """Runs ``config``'s service, measuring the frames that arrive between ``start`` and ``end``
    (monotonic seconds), then stops it."""
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    arrived: collections.Counter[str] = collections.Counter()
    enhanced: collections.Counter[str] = collections.Counter()

    def hook(source: Frame, sent: Frame, outcome: Outcome) -> None:
        if start <= source.arrival < end:
            latencies[outcome.value].append((time.monotonic() - source.arrival) * 1000.0)
            arrived[source.stream_id] += 1
            enhanced[source.stream_id] += outcome is Outcome.ENHANCED

    service = Service(config, on_output=hook, log_failures=False)
    service.prepare()
    running = asyncio.create_task(service.run())
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    cpu, loop = time.process_time(), time.thread_time()  # this coroutine runs on the loop's thread
    await asyncio.sleep(max(0.0, end - time.monotonic()))
    seconds = end - start
    cores = (time.process_time() - cpu) / seconds
    loop_cores = (time.thread_time() - loop) / seconds
    service.request_stop()
    results = await running
    reports = [r.report for r in results if r.report is not None]
    calls = windows = late = 0
    provider = ""
    for scheduler in service.schedulers():
        stats = scheduler.stats()
        calls, windows, late = calls + stats.calls, windows + stats.windows, late + stats.late
        provider = stats.provider
    return _Part(
        streams=len(results),
        ran=len(reports),
        latencies=dict(latencies),
        by_stream={sid: (count, enhanced[sid]) for sid, count in arrived.items()},
        source_dropped=sum(r.source_dropped for r in reports),
        decoded=sum(r.frames_in + r.source_dropped for r in reports),
        cores=cores,
        loop_cores=loop_cores,
        calls=calls,
        windows=windows,
        late=late,
        provider=provider,
        errors=[f"{r.stream_id}: {r.error}" for r in results if r.report is None],
    )


@dataclass(frozen=True, slots=True)
class _Setup:
    """Every service's cameras but their number: what a process of its own needs to make its config."""

    clip: Path
    folder: Path
    fps: int
    frames: int
    budget_ms: float
    max_batch: int | None
    decode: str
    encode: str
    model: dict[str, Any]

    def config(self, streams: int, first: int = 0) -> Config:
        """``streams`` cameras from number ``first`` (several services share a run: numbers differ)."""
        return load_config(
            None,
            {
                "streams": [
                    {
                        "id": f"cam{i}",
                        "source": {
                            "kind": "file",
                            "path": str(self.clip),
                            "realtime": True,
                            "loop": True,
                            "max_frames": self.frames,
                            "decode": self.decode,
                        },
                        "sink": {
                            "kind": "file",
                            "path": str(self.folder / f"cam{i}.mp4"),
                            "codec": self.encode,
                            "preset": "ultrafast",
                            "crf": 23,
                            "gop": self.fps,
                        },
                    }
                    for i in range(first, first + streams)
                ],
                "gate.enabled": False,
                "latency.budget_ms": self.budget_ms,
                "runtime.max_batch": self.max_batch,  # None: the runtime's own for the provider
                "model.blend": "off",  # the model on every frame, whatever the clip's quantizer
                **{f"model.{key}": value for key, value in self.model.items()},
            },
        )


def _part_in_process(setup: _Setup, streams: int, first: int, start_at: float, seconds: float) -> _Part:
    """A process's share of a run: ``streams`` cameras from number ``first``, measured from ``start_at``
    (wall-clock seconds, the same for every process) for ``seconds``."""
    start = time.monotonic() + (start_at - time.time())
    return asyncio.run(_part(setup.config(streams, first), start, start + seconds))


def _merged(parts: list[_Part]) -> StreamsRun:
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    for part in parts:
        for outcome, each in part.latencies.items():
            latencies[outcome] += each
    p50, _, p99 = percentiles([ms for each in latencies.values() for ms in each])
    by_outcome = {key: percentiles(each)[2] for key, each in latencies.items()}
    return StreamsRun(
        streams=sum(p.streams for p in parts),
        ran=sum(p.ran for p in parts),
        arrived=sum(len(each) for each in latencies.values()),
        outcomes={key: len(each) for key, each in latencies.items()},
        source_dropped=sum(p.source_dropped for p in parts),
        decoded=sum(p.decoded for p in parts),
        p50_ms=p50,
        p99_ms=p99,
        p99_by_outcome_ms={key: ms for key, ms in by_outcome.items() if ms is not None},
        cores=sum(p.cores for p in parts),
        loop_cores=max(p.loop_cores for p in parts),
        calls=sum(p.calls for p in parts),
        windows=sum(p.windows for p in parts),
        late=sum(p.late for p in parts),
        provider=next((p.provider for p in parts if p.provider), ""),
        errors=[e for p in parts for e in p.errors],
        processes=len(parts),
        by_stream={sid: counts for p in parts for sid, counts in p.by_stream.items()},
    )


def _shares(streams: int, processes: int) -> list[tuple[int, int]]:
    """(first camera, cameras) of each process: as even as may be, no process without a camera."""
    count = min(streams, processes)
    sizes = [streams // count + (1 if i < streams % count else 0) for i in range(count)]
    return [(sum(sizes[:i]), size) for i, size in enumerate(sizes)]


def run_streams(
    counts: list[int],
    size: tuple[int, int] = (1920, 1080),
    fps: int = 30,
    seconds: float = 20.0,
    warmup_s: float = 8.0,
    budget_ms: float = 250.0,
    max_batch: int | None = None,
    decode: str = "auto",
    encode: str = "auto",
    model: dict[str, Any] | None = None,
    processes: int = 1,
) -> StreamsReport:
    """Each count of streams in turn, ascending, in a service of its own (or split over ``processes``
    services, each in a process of its own); ``model``: ``model.*`` settings (path, providers) for
    every stream."""
    if not counts or any(not 1 <= n <= MAX_STREAMS for n in counts):
        raise ConfigError(f"--streams {counts}: give counts from 1 to {MAX_STREAMS}, e.g. 16,32,64")
    if not 1 <= processes <= MAX_PROCESSES:
        raise ConfigError(
            f"--processes {processes}: give 1 to {MAX_PROCESSES} services to split the streams over"
        )
    if not 1 <= fps <= 240:
        raise ConfigError(f"--fps {fps}: give a camera frame rate from 1 to 240")
    if size[0] % 2 or size[1] % 2:
        raise ConfigError(f"--size {size[0]}x{size[1]}: H.264 at 4:2:0 needs even sides, e.g. 1920x1080")
    if not 0 < seconds <= 3600 or not 0 <= warmup_s <= 600:
        raise ConfigError(f"--seconds {seconds} and --warmup-s {warmup_s}: give 0 < seconds <= 3600, 0..600")
    watch = LoadWatch()
    begun = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory(prefix="streamer-streams-") as folder:
        clip = Path(folder) / "camera.mp4"
        kbps = camera_clip(clip, size, fps)
        setup = _Setup(
            clip=clip,
            folder=Path(folder),
            fps=fps,
            frames=int((warmup_s + seconds + 5 + SPAWN_S) * fps),  # stopped first: no stream ends early
            budget_ms=budget_ms,
            max_batch=max_batch,
            decode=decode,
            encode=encode,
            model=model or {},
        )
        for n in sorted(set(counts)):
            if processes == 1:
                start = time.monotonic() + warmup_s
                runs.append(_merged([asyncio.run(_part(setup.config(n), start, start + seconds))]))
                continue
            shares = _shares(n, processes)
            start_at = time.time() + SPAWN_S + warmup_s
            spawn = multiprocessing.get_context("spawn")  # no fork of a process holding threads
            with concurrent.futures.ProcessPoolExecutor(len(shares), mp_context=spawn) as pool:
                parts = [
                    pool.submit(_part_in_process, setup, cameras, first, start_at, seconds)
                    for first, cameras in shares
                ]
                runs.append(_merged([part.result() for part in parts]))
    return StreamsReport(
        size=size,
        fps=fps,
        seconds=seconds,
        warmup_s=warmup_s,
        budget_ms=budget_ms,
        max_batch=max_batch,
        decode=decode,
        encode=encode,
        model=str((model or {}).get("path") or "the shipped default"),
        clip_kbps=kbps,
        runs=runs,
        machine=watch.machine(),
        wall_s=time.perf_counter() - begun,
        processes=processes,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _rows(report: StreamsReport) -> list[list[str]]:
    rows = []
    for r in report.runs:
        passed = sum(
            r.outcomes.get(o.value, 0) for o in (Outcome.BUDGET_PASSTHROUGH, Outcome.SHED_PASSTHROUGH)
        )
        rows.append(
            [
                str(r.streams),
                f"{r.ran}",
                str(r.arrived),
                f"{100 * r.enhanced_share:.1f}",
                f"{100 * r.least_enhanced_share:.1f}",
                str(passed),
                f"{100 * r.dropped_share:.2f}",
                _ms(r.p50_ms),
                _ms(r.p99_ms),
                f"{r.cores:.2f}",
                f"{r.loop_cores:.2f}",
                f"{r.mean_batch:.1f}",
                "yes" if r.holds(report.budget_ms) else "no",
            ]
        )
    return rows


_COLUMNS = (
    "streams",
    "ran",
    "frames measured",
    "% enhanced",
    "least % of a stream",
    "passed through",
    "% dropped at source",
    "p50 ms",
    "p99 ms",
    "host cores",
    "event loop cores",
    "windows per call",
    "holds",
)


def _notes(report: StreamsReport) -> list[str]:
    w, h = report.size
    provider = next((r.provider for r in report.runs if r.provider), "none")
    notes = [
        f"{w}x{h}@{report.fps} cameras reading one H.264 clip ({report.clip_kbps:.0f} kbit/s, GOP 1 s), "
        f"decode {report.decode}, encode {report.encode} (ultrafast); model {report.model} on {provider}, "
        f"gate off, runtime.max_batch {report.max_batch or 'as the provider sets it'}, "
        f"latency.budget_ms {report.budget_ms:g}; "
        f"{report.seconds:g} s measured after {report.warmup_s:g} s",
        f"machine: {report.machine.line()}",
    ]
    if report.processes > 1:
        notes.append(
            f"each count's cameras split over {report.processes} services (fewer where there are fewer "
            "cameras), each in a process of its own with its own model session; host cores are theirs "
            "summed, event loop cores the busiest one's"
        )
    notes += [
        f"{r.streams} streams, p99 by how frames left: "
        + ", ".join(f"{key} {ms:.0f} ms" for key, ms in sorted(r.p99_by_outcome_ms.items()))
        for r in report.runs
        if len(r.p99_by_outcome_ms) > 1
    ]
    notes += [
        f"{r.streams} streams: {r.late} windows not run where their call was formed (it would have ended "
        "past their deadline)"
        for r in report.runs
        if r.late
    ]
    notes += [f"{r.streams} streams: {e}" for r in report.runs for e in r.errors[:3]]
    return notes


def format_table(report: StreamsReport) -> str:
    rows = [list(_COLUMNS), *_rows(report)]
    widths = [max(len(row[k]) for row in rows) for k in range(len(_COLUMNS))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(
        ["streamer bench streams", *lines, *table_footer(_notes(report), report.targets(), report.wall_s)]
    )


def format_markdown(report: StreamsReport) -> str:
    lines = [
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---:|" * len(_COLUMNS),
        *("| " + " | ".join(row) + " |" for row in _rows(report)),
        "",
        *(f"- {n}" for n in _notes(report)),
        *markdown_targets(report.targets()),
    ]
    return "\n".join(lines) + "\n"


def run_from_args(args: argparse.Namespace) -> int:
    try:
        counts = [int(n) for n in args.streams.split(",")]
    except ValueError:
        raise ConfigError(f"--streams {args.streams!r}: give comma-separated counts, e.g. 16,32,64") from None
    model: dict[str, Any] = {"path": str(args.model or DEFAULT_MODEL)}
    if args.providers != "auto":
        model["providers"] = [p.strip() for p in args.providers.split(",") if p.strip()]
    report = run_streams(
        counts,
        size=parse_size(args.size, "--size"),
        fps=args.fps,
        seconds=args.seconds,
        warmup_s=args.warmup_s,
        budget_ms=args.budget_ms,
        max_batch=args.max_batch,
        decode=args.decode,
        encode=args.encode,
        model=model,
        processes=args.processes,
    )
    data: dict[str, Any] = asdict(report)
    data["most_held"] = report.most_held
    data["targets"] = [asdict(t) for t in report.targets()]
    return emit(format_table(report), format_markdown(report), data, args.json, args.markdown)
