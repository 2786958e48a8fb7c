"""``streamer bench live``: can a model tier keep up with a live camera on this machine, and at what cost?

For each path, frame size and model (tier), a camera paced at its frame rate publishes (its frames encoded
before the run by default, as an IP camera or a browser encodes on its own chip, so the cores measured
are the sidecar's; ``--camera live`` encodes on them during the run); streamer reads it, enhances with a
latency budget and sends it on; a player reads the result, and the frame numbers in its pixels give
glass-to-glass latency. ``rtsp``: H.264 through the real GStreamer RTSP relay
(:mod:`streamer.bench.latency_rtsp`), as the README's quick start runs; ``webrtc``: VP8 published over
WHIP, played over WHEP by an aiortc player (:mod:`streamer.bench.latency_webrtc`), as
``configs/webrtc.yaml`` runs. Per run: the share of measured frames enhanced, passed through unenhanced and
lost, p50/p99 latency, the model's own frames per second on that size (timed alone just before, in the
stream's steady state), and the CPU this process used over the run (camera, relay client, streamer and
player together: one process; the relay is another and is not counted). The machine line names the CPU
and its ISA flags, since CPU inference speed follows them.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from streamer.app import build_backend
from streamer.assets import AUTO_TIERS
from streamer.bench.harness import Target, emit, parse_sizes, table_footer
from streamer.bench.latency import run_latency
from streamer.bench.latency_measure import PATHS, Settings, TierShift, parse_model, parse_size
from streamer.config import ModelConfig
from streamer.engine.tiers import AUTO, model_fps
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine, process_busy_s
from streamer.sources.rtsp import Reader

__all__ = ["LOAD_SECONDS", "LOAD_WINDOW", "LiveRow", "check_targets", "run_from_args", "run_live_bench"]

LOAD_SECONDS = 90.0
"""``--load``'s run length: half a minute before the load, half a minute of it, half a minute after."""
LOAD_WINDOW = (30.0, 60.0)
"""``--load``: when another process takes a core, in seconds after the camera starts."""

_SHARE_TARGETS = {(640, 360): 0.99, (1280, 720): 0.95}
"""Issue targets: the share of frames enhanced live at 30 fps on two cores."""


@dataclass(frozen=True, slots=True)
class LiveRow:
    size: str
    path: str
    """``rtsp`` or ``webrtc``."""
    model: str
    sent: int
    enhanced: int
    passed_through: int
    lost: int
    source_dropped: int
    p50_ms: float | None
    p99_ms: float | None
    budget_ms: float
    model_fps: float
    cpu_percent: float
    """CPU seconds of this process over the run per wall second, in % of one core."""
    seconds: float
    threads: int | None = None
    """model.threads (onnxruntime intra-op); None: its default."""
    encoder_threads: int | None = None
    """The RTSP sink's libx264 threads; None: libx264's choice."""
    workers: int | None = None
    """model.workers; None: its default."""
    camera: str = "ahead"
    """``ahead``: the camera's frames were encoded before the run; ``live``: on these cores during it."""
    reader: str = "auto"
    """How streamer's RTSP source and the player read (``source.reader``); ``-`` for WebRTC."""
    load: tuple[float, float] | None = None
    """Seconds after the camera started between which another process kept one core busy."""
    headroom: float | None = None
    """``model.headroom`` (None: its default)."""
    moves: tuple[TierShift, ...] = ()
    """``model: auto``'s tier moves during the run."""
    pipeline_p50_ms: float | None = None
    pipeline_p99_ms: float | None = None
    """Arrival to written inside streamer, over the measured frames: what ``latency.budget_ms`` bounds."""
    stages_ms: dict[str, float] = field(default_factory=dict)
    """Mean ms per frame (or window) in each of the pipeline's stages."""

    @property
    def thread_counts(self) -> str:
        """'workers/model threads/x264 threads', 'd' where the default chose."""
        counts = (self.workers, self.threads, self.encoder_threads)
        return "/".join("d" if n is None else str(n) for n in counts)

    @property
    def enhanced_share(self) -> float:
        return self.enhanced / self.sent if self.sent else 0.0


def _alone(model: Path | str, chosen: str, width: int, height: int) -> float:
    """The model's own fps on this size; for ``auto``, the fps of the tier it chose."""
    paths = AUTO_TIERS if model == AUTO else (Path(model),)
    for path in paths:
        backend = build_backend(ModelConfig(path=path))
        try:
            if backend.info.name == chosen:
                return model_fps(backend, width, height)
        finally:
            backend.close()
    raise ConfigError(f"bench live: the pipeline ran {chosen!r}, which is none of {[str(p) for p in paths]}")


def _row(
    model: Path | str,
    width: int,
    height: int,
    fps: int,
    seconds: float,
    budget_ms: float,
    threads: tuple[int | None, int | None, int | None] = (None, None, None),
    camera: str = "ahead",
    load: tuple[float, float] | None = None,
    headroom: float | None = None,
    reader: Reader = "auto",
    path: str = "rtsp",
) -> LiveRow:
    frames = round(seconds * fps)
    settings = Settings(
        width,
        height,
        fps,
        frames,
        warmup=2 * fps,
        gate=False,
        paths=(path,),
        model=AUTO if model == AUTO else Path(model),
        budget_ms=budget_ms,
        workers=threads[0],
        threads=threads[1],
        encoder_threads=threads[2],
        camera_ahead=camera == "ahead",
        load=load,
        headroom=headroom,
        reader=reader,
    )
    cpu_start, wall_start = process_busy_s(), time.monotonic()
    report = run_latency(settings)
    cpu_end, wall = process_busy_s(), time.monotonic() - wall_start
    if not report.rows:
        reasons = "; ".join(s.reason for s in report.skipped) or "no result"
        raise ConfigError(f"bench live needs the {path} path: {reasons}")
    row = report.rows[0]
    cpu = cpu_end - cpu_start
    alone = _alone(model, row.model, width, height)
    return LiveRow(
        size=f"{width}x{height}",
        path=path,
        model=f"auto: {row.model}" if model == AUTO else row.model,
        sent=row.sent,
        enhanced=row.outcomes.get("enhanced", 0),
        passed_through=row.outcomes.get("budget_passthrough", 0)
        + row.outcomes.get("unavailable_passthrough", 0),
        lost=row.lost + row.outcomes.get("budget_drop", 0),
        source_dropped=row.source_dropped,
        p50_ms=row.p50_ms,
        p99_ms=row.p99_ms,
        budget_ms=budget_ms,
        model_fps=alone,
        cpu_percent=100.0 * cpu / wall if wall > 0 else 0.0,
        seconds=wall,
        workers=threads[0],
        threads=threads[1],
        encoder_threads=threads[2],
        camera=camera,
        reader=reader if path == "rtsp" else "-",
        load=load,
        headroom=headroom,
        moves=row.moves,
        pipeline_p50_ms=row.pipeline_p50_ms,
        pipeline_p99_ms=row.pipeline_p99_ms,
        stages_ms=row.stages_ms,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _meets(row: LiveRow, share: float) -> bool:
    return row.enhanced_share >= share and row.lost == 0 and (row.p99_ms or 0) <= row.budget_ms


def check_targets(rows: list[LiveRow]) -> list[Target]:
    targets: list[Target] = []
    for path in dict.fromkeys(r.path for r in rows) or ["rtsp"]:
        for (w, h), share in _SHARE_TARGETS.items():
            _check(targets, [r for r in rows if r.path == path], path, f"{w}x{h}", share)
    return targets


def _check(targets: list[Target], rows: list[LiveRow], path: str, size: str, share: float) -> None:
    mine = [r for r in rows if r.size == size]
    # A tier that meets all three, else the one enhancing most.
    best = max(mine, key=lambda r: (_meets(r, share), r.enhanced_share), default=None)
    if best is None:
        name = f">= {share:.0%} enhanced at {size} ({path})"
        targets.append(Target(name, None, "not measured in this run"))
        return
    targets.append(
        Target(
            f">= {share:.0%} enhanced at {size} ({path}), 0 lost, p99 <= budget (in one tier)",
            _meets(best, share),
            f"{best.model}: {best.enhanced_share:.1%} enhanced, {best.lost} lost, "
            f"p99 {_ms(best.p99_ms)} ms vs budget {best.budget_ms:g} ms",
        )
    )


def _moves(rows: list[LiveRow]) -> list[str]:
    """One line per run that had a load or tier moves: when the load came and went, and each move."""
    lines = []
    for r in rows:
        if r.load is None and not r.moves:
            continue
        load = f"one core taken {r.load[0]:g}-{r.load[1]:g} s" if r.load is not None else "no load"
        moves = "; ".join(f"{m.after_s:.1f} s {m.tier_from} -> {m.tier_to} ({m.reason})" for m in r.moves)
        headroom = f", headroom {r.headroom:g}" if r.headroom is not None else ""
        lines.append(f"{r.path} {r.size} {r.model}: {load}{headroom}; moves: {moves or 'none'}")
    return lines


def _camera(rows: list[LiveRow]) -> str:
    kinds = {r.camera for r in rows}
    if kinds == {"ahead"}:
        return "camera frames encoded before each run (an IP camera's own encoder)"
    if kinds == {"live"}:
        return "camera encoding each frame on these cores"
    return "camera encoding ahead or live, per row"


_ROUTES = {
    "rtsp": "RTSP camera -> GStreamer relay -> streamer -> relay -> player (H.264)",
    "webrtc": "WHIP publisher (VP8) -> streamer -> WHEP -> aiortc player",
}


def _routes(rows: list[LiveRow]) -> str:
    return "; ".join(f"{p}: {_ROUTES[p]}" for p in dict.fromkeys(r.path for r in rows)) or _ROUTES["rtsp"]


_NOTES = (
    "enhanced / passed / lost: of the measured frames the camera sent; passed = left unenhanced because "
    "the model would have missed the budget (or could not answer); lost = never reached the player or "
    "dropped by the budget",
    "p50/p99: camera capture -> player decode (glass to glass), including the centre window's lookahead",
    "reader: how streamer's RTSP source and the player read RTSP (source.reader): auto decodes each "
    "frame as its last packet arrives, ffmpeg (FFmpeg's reader) when the next frame begins; over "
    "WebRTC both ends take a frame on its last packet (the RTP marker bit), as browsers do",
    "w/threads: model.workers / model.threads / the RTSP sink's libx264 threads (d = the default: "
    "for threads, the library's choice)",
    "model fps: the model alone on this size at batch 1 in a stream's steady state (a streaming model "
    "encodes one frame and fuses T cached maps), timed just after the run with default threads",
    "CPU %: this process (camera, streamer, player) per wall second, 100 = one core; the relay process "
    "is not counted, nor a camera's encoding done before the run (--camera ahead)",
)
"""The table's notes, under it."""


def format_table(rows: list[LiveRow], machine: Machine, fps: int, seconds: float, wall_s: float) -> str:
    header = (
        f"streamer bench live: camera paced at {fps} fps, {_routes(rows)}; {seconds:g} s measured per "
        f"run, gate off, {_camera(rows)}; {machine.line()}"
    )
    names = (
        "path",
        "size",
        "model",
        "reader",
        "w/threads",
        "sent",
        "enhanced",
        "passed",
        "lost",
        "p50 ms",
        "p99 ms",
        "budget",
        "model fps",
        "CPU %",
    )
    cells = [
        (
            r.path,
            r.size,
            r.model,
            r.reader,
            r.thread_counts,
            str(r.sent),
            f"{r.enhanced_share:.1%}",
            f"{r.passed_through / r.sent:.1%}" if r.sent else "-",
            str(r.lost),
            _ms(r.p50_ms),
            _ms(r.p99_ms),
            f"{r.budget_ms:g}",
            f"{r.model_fps:.1f}",
            f"{r.cpu_percent:.0f}",
        )
        for r in rows
    ]
    widths = [max(len(n), *(len(c[i]) for c in cells)) for i, n in enumerate(names)]
    line = "  ".join(
        n.ljust(w) if i < 3 else n.rjust(w) for i, (n, w) in enumerate(zip(names, widths, strict=True))
    )
    body = [
        "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
    moves = _moves(rows)
    shifts = ["", "tier moves (seconds after the camera started):", *moves] if moves else []
    inside = ["", "inside streamer (arrival to written, what the budget bounds; stages: mean ms per frame):"]
    inside += [_inside(r) for r in rows]
    return "\n".join(
        [
            header,
            "",
            line,
            "-" * len(line),
            *body,
            *shifts,
            *inside,
            *table_footer(list(_NOTES), check_targets(rows), wall_s),
        ]
    )


def _inside(row: LiveRow) -> str:
    """One row's time inside streamer: its p50/p99 and each stage's mean."""
    stages = ", ".join(f"{name.replace('_', ' ')} {ms:.1f}" for name, ms in row.stages_ms.items())
    inside = f"p50 {_ms(row.pipeline_p50_ms)}, p99 {_ms(row.pipeline_p99_ms)} ms"
    return f"{row.path} {row.size} {row.model}: {inside}" + (f"; {stages}" if stages else "")


def format_markdown(rows: list[LiveRow], machine: Machine, fps: int, seconds: float) -> str:
    lines = [
        "| path | size | model | reader | workers/threads/x264 | enhanced | passed through | lost | p50 ms "
        "| p99 ms | budget ms | model fps | CPU % |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        passed = f"{r.passed_through / r.sent:.1%}" if r.sent else "-"
        lines.append(
            f"| {r.path} | {r.size} | {r.model} | {r.reader} | {r.thread_counts} | {r.enhanced_share:.1%} "
            f"| {passed} "
            f"| {r.lost} "
            f"| {_ms(r.p50_ms)} | {_ms(r.p99_ms)} | {r.budget_ms:g} | {r.model_fps:.1f} "
            f"| {r.cpu_percent:.0f} |"
        )
    lines += ["", f"{_routes(rows)}; {fps} fps, {seconds:g} s per run, gate off, {_camera(rows)}; "]
    lines[-1] += f"{machine.line()}."
    moves = _moves(rows)
    if moves:
        lines += ["", "Tier moves (seconds after the camera started):", *(f"- {m}" for m in moves)]
    lines += [f"- {t.verdict} {t.name}: {t.detail}" for t in check_targets(rows)]
    return "\n".join(lines) + "\n"


def run_live_bench(
    sizes: list[tuple[int, int]],
    models: list[Path | str],
    fps: int,
    seconds: float,
    budget_ms: float,
    threads: list[tuple[int | None, int | None, int | None]] | None = None,
    camera: str = "ahead",
    load: tuple[float, float] | None = None,
    headroom: float | None = None,
    readers: list[Reader] | None = None,
    paths: list[str] | None = None,
) -> tuple[list[LiveRow], Machine, float]:
    """One row per path, size, model, (model workers, model threads, encoder threads) and reader, in
    that nesting; the reader only varies the RTSP path."""
    watch = LoadWatch()
    started = time.monotonic()
    pairs = threads or [(None, None, None)]
    default: list[Reader] = ["auto"]  # the only reader of a WebRTC row, which reads no RTSP
    rows = [
        _row(m, w, h, fps, seconds, budget_ms, t, camera, load, headroom, r, path)
        for path in paths or ["rtsp"]
        for w, h in sizes
        for m in models
        for t in pairs
        for r in ((readers or default) if path == "rtsp" else default)
    ]
    return rows, watch.machine(), time.monotonic() - started


def _paths(text: str) -> list[str]:
    paths = [item.strip() for item in text.split(",")]
    for path in paths:
        if path not in PATHS:
            raise ConfigError(f"--paths {text!r}: give {' and/or '.join(PATHS)}, comma-separated")
    return list(dict.fromkeys(paths))


def _reader(item: str) -> Reader:
    if item.strip() == "auto":
        return "auto"
    if item.strip() == "ffmpeg":
        return "ffmpeg"
    raise ConfigError(f"--reader {item!r}: give auto, ffmpeg or both, comma-separated")


def _counts(text: str, flag: str) -> list[int | None]:
    """'default,1,2' -> [None, 1, 2]: thread or worker counts."""
    out: list[int | None] = []
    for item in text.split(","):
        if item.strip() == "default":
            out.append(None)
        elif item.strip().isdigit() and 1 <= int(item) <= 64:
            out.append(int(item))
        else:
            raise ConfigError(f"{flag} takes counts 1..64 or 'default', comma-separated; got {text!r}")
    return out


def run_from_args(args: argparse.Namespace) -> int:
    sizes = parse_sizes(args.sizes, "--sizes")
    for w, h in sizes:
        parse_size(f"{w}x{h}")  # the frame number must fit: even sides, a minimum size
    seconds = args.seconds if args.seconds is not None else LOAD_SECONDS if args.load else 60.0
    load = LOAD_WINDOW if args.load else None
    if load is not None and seconds < load[1] + 10:
        raise ConfigError(
            f"--load takes a core {load[0]:g}-{load[1]:g} s into the run; give --seconds of at least "
            f"{load[1] + 10:g} (or leave it out: {LOAD_SECONDS:g})"
        )
    if args.headroom is not None and not 1.0 <= args.headroom <= 10.0:
        raise ConfigError(f"--headroom {args.headroom:g}: give model.headroom's range, 1 to 10")
    if seconds <= 0 or not 1 <= args.fps <= 120 or args.budget_ms <= 0:
        raise ConfigError(
            f"--seconds and --budget-ms must be positive and --fps in 1..120; got {seconds}, "
            f"{args.budget_ms}, {args.fps}"
        )
    models: list[Path | str] = [parse_model(m) for m in args.model] if args.model else [AUTO]
    pairs = [
        (w, t, e)
        for w in _counts(args.workers, "--workers")
        for t in _counts(args.threads, "--threads")
        for e in _counts(args.encoder_threads, "--encoder-threads")
    ]
    readers = [_reader(item) for item in args.reader.split(",")]
    paths = _paths(args.paths)
    rows, machine, wall = run_live_bench(
        sizes,
        models,
        args.fps,
        seconds,
        args.budget_ms,
        pairs,
        args.camera,
        load,
        args.headroom,
        readers,
        paths,
    )
    data: dict[str, Any] = {"machine": asdict(machine), "rows": [asdict(r) for r in rows]}
    return emit(
        format_table(rows, machine, args.fps, seconds, wall),
        format_markdown(rows, machine, args.fps, seconds),
        data,
        args.json,
        args.markdown,
    )
