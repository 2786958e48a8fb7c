"""``streamer bench motion``: what the motion gate saves on a surveillance-like scene, and what it costs.

The scene is made of real pictures bundled with scikit-image: a static background (``rocket``: a
launch pad under the sky, cropped to the frame's aspect) and a small real patch (the head of
``chelsea``, the cat, an eighth of the frame wide) that crosses the frame from left to right during
``--moving`` of the clip (10% by default), in the middle of it. The clean clip is written once with
PyAV (H.264, crf 12) and decoded again: those decoded frames are the clean reference. The pipeline reads
the file with seeded Gaussian sensor noise added on read (``source.noise_sigma``), so the model has
something to do and the gate must ride over noise.

The same pipeline (default config, default model, null sink) runs three times on the same noisy input:
gate off (every window through the model), gate on (``gate.*`` from the config, ``on_skip: reuse``)
and tiles (gate on with ``gate.tile``: only the box of the changed tiles, with its halo, goes through
the model). Each frame written is scored against its clean frame: PSNR over the frames where the object
is in view (*moving*) and over the rest (*static*). The tiles run also counts the pixels the model ran
on, against the whole-frame gate's, and its seam: the mean difference from the gate-off output on the
pixels next to a tile border, against the mean difference elsewhere.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
from av.video.stream import VideoStream
from skimage import data as skdata

from streamer.app import build_backend, build_gate, build_pipeline
from streamer.bench.harness import (
    Target,
    emit,
    markdown_targets,
    overrides,
    parse_size,
    run_for,
    table_footer,
    wrapped,
)
from streamer.config import Config, load_config
from streamer.engine.pipeline import Outcome
from streamer.errors import ConfigError
from streamer.frame import Frame, Pixels
from streamer.measure.machine import LoadWatch, Machine
from streamer.sources.noise import GaussianNoise

__all__ = [
    "GateRun",
    "MotionReport",
    "Scene",
    "check_targets",
    "format_markdown",
    "format_table",
    "make_scene",
    "run_from_args",
    "run_motion",
]

MIN_REDUCTION = 0.80
"""Model calls the gate must save on the scene, against the gate off."""
MAX_PSNR_LOSS_DB = 0.1
"""How much lower PSNR on the moving frames may be with the gate on."""
MIN_PIXEL_SAVING = 3.0
"""How many times fewer pixels the tiles run must put through the model than the whole-frame gate."""
MAX_SEAM_RATIO = 1.2
"""Tile-border difference from the gate-off output, over the difference elsewhere: 1 is no seam."""


@dataclass(frozen=True, slots=True)
class Scene:
    width: int
    height: int
    fps: int
    frames: int
    moving: tuple[int, int]
    """First and last frame index (inclusive) with the object in view."""
    object_size: tuple[int, int]
    noise_sigma: float
    seed: int


@dataclass(frozen=True, slots=True)
class GateRun:
    gate: str
    frames: int
    model_windows: int
    """Windows that went through the model (outcome enhanced)."""
    model_calls: int
    """Backend calls: batches of up to runtime.max_batch windows."""
    reused: int
    psnr_moving: float
    psnr_static: float
    psnr_all: float
    fps: float
    outcomes: dict[str, int]
    pixels_enhanced: int
    """Pixels the model ran on (a region run counts its crop, halo included)."""
    seam_border: float | None = None
    """Tiles run: mean |output - gate-off output| within 2 px of a tile border, 0..255."""
    seam_interior: float | None = None
    """The same away from tile borders."""


@dataclass(frozen=True, slots=True)
class MotionReport:
    machine: Machine
    scene: Scene
    model: str
    provider: str
    gate_settings: dict[str, Any]
    input_psnr_moving: float
    input_psnr_static: float
    runs: tuple[GateRun, ...]
    reduction: float
    """1 - gate-on model windows / gate-off model windows."""
    tile: int
    pixel_saving: float
    """Pixels the whole-frame gate put through the model over those the tiles run did."""
    targets: tuple[Target, ...]
    notes: tuple[str, ...]
    wall_s: float


# The scene


def _cover(image: Pixels, width: int, height: int) -> Pixels:
    """``image`` scaled to cover width x height, then cropped to it around its centre."""
    h, w = image.shape[:2]
    scale = max(width / w, height / h)
    size = (max(width, round(w * scale)), max(height, round(h * scale)))
    scaled = cv2.resize(image, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)
    top, left = (size[1] - height) // 2, (size[0] - width) // 2
    return np.ascontiguousarray(scaled[top : top + height, left : left + width])


def make_scene(
    width: int, height: int, frames: int, moving: float, noise_sigma: float, seed: int, fps: int
) -> tuple[Scene, list[Pixels]]:
    """The scene's clean frames before encoding: a static real background, a real patch crossing it."""
    rocket = np.asarray(skdata.rocket(), dtype=np.uint8)  # type: ignore[no-untyped-call]
    background = _cover(rocket, width, height)
    chelsea = np.asarray(skdata.chelsea(), dtype=np.uint8)  # type: ignore[no-untyped-call]
    cat = chelsea[20:230, 110:340]  # the head
    ow, oh = max(4, width // 8 // 2 * 2), max(4, round(width // 8 * cat.shape[0] / cat.shape[1]))
    patch = cv2.resize(cat, (ow, oh), interpolation=cv2.INTER_AREA)
    count = max(2, round(frames * moving))
    first = (frames - count) // 2
    y = round((height - oh) * 0.6)
    out = []
    for i in range(frames):
        frame = background.copy()
        k = i - first
        if 0 <= k < count:
            x = round(-ow + (width + ow) * (k + 0.5) / count)  # in view, if only partly, on every frame
            left, right = max(0, x), min(width, x + ow)
            frame[y : y + oh, left:right] = patch[:, left - x : right - x]
        out.append(frame)
    scene = Scene(width, height, fps, frames, (first, first + count - 1), (ow, oh), noise_sigma, seed)
    return scene, out


def _write(frames: Sequence[Pixels], fps: int, path: Path) -> list[Pixels]:
    """Encodes the clean frames (H.264 crf 12) and returns them as decoded: the clean reference."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(
            "libx264", rate=fps, options={"preset": "veryfast", "crf": "12", "bf": "0"}
        )
        assert isinstance(stream, VideoStream)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        for i, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with av.open(str(path)) as container:
        return [np.ascontiguousarray(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]


def _psnr(a: Pixels, b: Pixels) -> float:
    mse = float(np.mean(np.square(a.astype(np.float64) - b)))
    return float("inf") if mse == 0 else 10.0 * float(np.log10(255.0**2 / mse))


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


# The runs


def _run(
    config: Config,
    label: str,
    clean: Sequence[Pixels],
    scene: Scene,
    written: dict[int, Pixels],
    reference: dict[int, Pixels] | None = None,
) -> GateRun:
    """One run; ``written`` receives its output frames, ``reference`` (the gate-off run's) measures a seam."""

    def hook(source: Frame, sent: Frame, outcome: Outcome) -> None:
        written[source.index] = sent.pixels

    pipeline = build_pipeline(config, on_output=hook)
    try:
        report = run_for(pipeline)
    finally:
        pipeline.backend.close()
    first, last = scene.moving
    scores = {i: _psnr(pixels, clean[i]) for i, pixels in written.items()}
    moving = [s for i, s in scores.items() if first <= i <= last]
    static = [s for i, s in scores.items() if not first <= i <= last]
    border = interior = None
    if reference is not None and config.gate.tile is not None:
        border, interior = _seam(written, reference, config.gate.tile)
    return GateRun(
        gate=label,
        frames=report.frames_out,
        model_windows=report.windows_enhanced,
        model_calls=report.model_calls,
        reused=report.outcomes.get(Outcome.REUSED.value, 0),
        psnr_moving=_mean(moving),
        psnr_static=_mean(static),
        psnr_all=_mean(list(scores.values())),
        fps=report.fps,
        outcomes={k: v for k, v in report.outcomes.items() if v},
        pixels_enhanced=pipeline.pixel_stats()[1],
        seam_border=border,
        seam_interior=interior,
    )


def _seam(written: dict[int, Pixels], reference: dict[int, Pixels], tile: int) -> tuple[float, float]:
    """Mean |written - reference| on pixels within 2 px of a tile border, and on the others."""
    h, w = next(iter(written.values())).shape[:2]
    near = np.zeros((h, w), dtype=bool)
    for k in range(tile, h, tile):
        near[max(0, k - 2) : k + 2] = True
    for k in range(tile, w, tile):
        near[:, max(0, k - 2) : k + 2] = True
    border = interior = 0.0
    for i, pixels in written.items():
        diff = np.abs(pixels.astype(np.int16) - reference[i]).mean(axis=2)
        border += float(diff[near].mean())
        interior += float(diff[~near].mean())
    return border / len(written), interior / len(written)


def check_targets(off: GateRun, on: GateRun, tiles: GateRun) -> list[Target]:
    reduction = 1 - on.model_windows / off.model_windows if off.model_windows else 0.0
    loss = off.psnr_moving - on.psnr_moving
    saving = on.pixels_enhanced / tiles.pixels_enhanced if tiles.pixels_enhanced else 0.0
    tile_loss = off.psnr_moving - tiles.psnr_moving
    border, interior = tiles.seam_border or 0.0, tiles.seam_interior or 0.0
    seam = border / interior if interior else 1.0
    return [
        Target(
            f"model calls cut by >= {MIN_REDUCTION:.0%} against the gate off",
            reduction >= MIN_REDUCTION,
            f"{reduction:.1%} ({on.model_windows} vs {off.model_windows} windows through the model)",
        ),
        Target(
            f"PSNR on the moving frames within {MAX_PSNR_LOSS_DB} dB of always running the model",
            bool(loss <= MAX_PSNR_LOSS_DB),
            f"{on.psnr_moving:.2f} vs {off.psnr_moving:.2f} dB ({-loss:+.2f} dB)",
        ),
        Target(
            f"tiles: >= {MIN_PIXEL_SAVING:g}x fewer pixels through the model than the whole-frame gate",
            saving >= MIN_PIXEL_SAVING,
            f"{saving:.2f}x ({tiles.pixels_enhanced:,} vs {on.pixels_enhanced:,} pixels)",
        ),
        Target(
            f"tiles: PSNR on the moving frames within {MAX_PSNR_LOSS_DB} dB of always running the model",
            bool(tile_loss <= MAX_PSNR_LOSS_DB),
            f"{tiles.psnr_moving:.2f} vs {off.psnr_moving:.2f} dB ({-tile_loss:+.2f} dB)",
        ),
        Target(
            f"tiles: no seam (difference from gate off at tile borders <= {MAX_SEAM_RATIO:g}x elsewhere)",
            seam <= MAX_SEAM_RATIO,
            f"{seam:.2f}x ({border:.2f} vs {interior:.2f} levels)",
        ),
    ]


def run_motion(scene_args: dict[str, Any], extra: dict[str, Any], tile: int = 32) -> MotionReport:
    watch = LoadWatch()
    started = time.monotonic()
    scene, frames = make_scene(**scene_args)
    with tempfile.TemporaryDirectory(prefix="streamer-bench-") as tmp:
        path = Path(tmp) / "scene.mp4"
        clean = _write(frames, scene.fps, path)
        del frames
        noise = GaussianNoise(scene.noise_sigma, scene.seed)  # as the file source draws it
        first, last = scene.moving
        noisy = [_psnr(noise(c), c) for c in clean]
        runs = []
        reference: dict[int, Pixels] = {}
        config = load_config(None, extra)
        for label, gate in (("off", {"gate.enabled": False}), ("on", {}), ("tiles", {"gate.tile": tile})):
            config = load_config(
                None,
                {
                    "source.kind": "file",
                    "source.path": str(path),
                    "source.noise_sigma": scene.noise_sigma,
                    "source.seed": scene.seed,
                    "sink.kind": "null",
                    **extra,
                    "gate.enabled": True,
                    **gate,
                },
            )
            written = reference if label == "off" else {}
            runs.append(_run(config, label, clean, scene, written, None if label == "off" else reference))
            del written
        reference.clear()
    off, on, tiles = runs
    backend = build_backend(config.model)
    model, provider = backend.info, backend.info.provider
    backend.close()
    gate_settings = config.gate.model_dump(mode="json", exclude={"enabled", "tile"})
    if gate_settings["halo"] is None:  # what the gate took: the model's reach, rounded up
        made = build_gate(config.gate)
        made.fit_reach(model.reach_px)
        gate_settings["halo"] = (
            f"{made.halo} (the default: no reach in the model's card)"
            if model.reach_px is None
            else f"{made.halo} (the model's reach, {model.reach_px} px, rounded up)"
        )
    notes = [
        f"scene: scikit-image's rocket (background) and chelsea's head ({scene.object_size[0]}x"
        f"{scene.object_size[1]} px) crossing during frames {first}-{last} of {scene.frames} "
        f"({(last - first + 1) / scene.frames:.0%}); Gaussian noise sigma {scene.noise_sigma:g} (seed "
        f"{scene.seed}) added on read; PSNR against the clean decoded frames, mean over frames",
        "model windows: windows that went through the model; calls: backend calls (runtime.max_batch "
        f"{config.runtime.batch_for(provider)} windows each at most); fps: frames written / wall time, "
        "file read as fast as the pipeline goes",
        "gate " + ", ".join(f"{k}={v}" for k, v in gate_settings.items()) + f"; tiles: gate.tile={tile}",
        "Mpx: pixels through the model (a tiles run counts each crop, halo included); seam: mean "
        "|output - gate-off output| within 2 px of a tile border / elsewhere, 0..255",
    ]
    return MotionReport(
        machine=watch.machine(),
        scene=scene,
        model=f"{model.name} (T={model.t}, {model.output_position.value})",
        provider=provider,
        gate_settings=gate_settings,
        input_psnr_moving=_mean(noisy[first : last + 1]),
        input_psnr_static=_mean(noisy[:first] + noisy[last + 1 :]),
        runs=(off, on, tiles),
        reduction=1 - on.model_windows / off.model_windows if off.model_windows else 0.0,
        tile=tile,
        pixel_saving=on.pixels_enhanced / tiles.pixels_enhanced if tiles.pixels_enhanced else 0.0,
        targets=tuple(check_targets(off, on, tiles)),
        notes=tuple(notes),
        wall_s=time.monotonic() - started,
    )


def format_table(report: MotionReport) -> str:
    s = report.scene
    header = (
        f"streamer bench motion: {s.width}x{s.height} @ {s.fps} fps, {s.frames} frames, object in view "
        f"{s.moving[1] - s.moving[0] + 1}; {report.model} on {report.provider}; {report.machine.line()}"
    )
    lines = [wrapped(header), ""]
    head = (
        f"{'gate':<6}  {'model windows':>13}  {'calls':>5}  {'reused':>6}  {'Mpx':>7}  {'PSNR moving':>11}  "
        f"{'PSNR static':>11}  {'PSNR all':>8}  {'seam':>11}  {'fps':>6}"
    )
    lines += [head, "-" * len(head)]
    lines.append(
        f"{'input':<6}  {'—':>13}  {'—':>5}  {'—':>6}  {'—':>7}  {report.input_psnr_moving:>11.2f}  "
        f"{report.input_psnr_static:>11.2f}  {'':>8}  {'—':>11}  {'—':>6}"
    )
    for r in report.runs:
        lines.append(
            f"{r.gate:<6}  {r.model_windows:>13}  {r.model_calls:>5}  {r.reused:>6}  "
            f"{r.pixels_enhanced / 1e6:>7.1f}  {r.psnr_moving:>11.2f}  {r.psnr_static:>11.2f}  "
            f"{r.psnr_all:>8.2f}  {_seam_text(r):>11}  {r.fps:>6.1f}"
        )
    lines += [
        "",
        f"model windows cut by {report.reduction:.1%}; tiles: {report.pixel_saving:.2f}x fewer pixels "
        "through the model than the whole-frame gate",
    ]
    lines += table_footer(report.notes, report.targets, report.wall_s)
    return "\n".join(lines)


def _seam_text(run: GateRun) -> str:
    if run.seam_border is None or run.seam_interior is None:
        return "—"
    return f"{run.seam_border:.2f}/{run.seam_interior:.2f}"


def format_markdown(report: MotionReport) -> str:
    s = report.scene
    lines = [
        "| gate | model windows | backend calls | reused | Mpx through the model | PSNR moving (dB) | "
        "PSNR static (dB) | seam border/elsewhere | fps |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| noisy input | — | — | — | — | {report.input_psnr_moving:.2f} | "
        f"{report.input_psnr_static:.2f} | — | — |",
    ]
    for r in report.runs:
        lines.append(
            f"| {r.gate} | {r.model_windows} | {r.model_calls} | {r.reused} | "
            f"{r.pixels_enhanced / 1e6:.1f} | {r.psnr_moving:.2f} | {r.psnr_static:.2f} | {_seam_text(r)} | "
            f"{r.fps:.1f} |"
        )
    lines += [
        "",
        f"Model windows cut by {report.reduction:.1%}; tiles ({report.tile} px): {report.pixel_saving:.2f}x "
        "fewer pixels through the model than the whole-frame gate.",
        "",
        *markdown_targets(report.targets),
        "",
        f"{s.width}x{s.height} @ {s.fps} fps, {s.frames} frames, {report.model} on {report.provider}; "
        f"{report.notes[0]}; {report.notes[2]}; {report.machine.line()}.",
    ]
    return "\n".join(lines) + "\n"


def run_from_args(args: argparse.Namespace) -> int:
    """The ``bench motion`` handler: prints the table, writes --json / --markdown when asked."""
    width, height = parse_size(args.size, "--size")
    if args.frames < 20:
        raise ConfigError(f"--frames {args.frames} is too few; use at least 20")
    if not 0.0 < args.moving < 1.0:
        raise ConfigError(f"--moving {args.moving} must be a fraction of the clip between 0 and 1")
    if not 0.0 <= args.noise <= 64.0:
        raise ConfigError(f"--noise {args.noise} must be a sigma in 0..64 (0..255 pixel units)")
    if not 1 <= args.fps <= 120:
        raise ConfigError(f"--fps {args.fps} is out of range; use 1..120")
    extra = overrides(args.set, args.model)
    scene = {
        "width": width,
        "height": height,
        "frames": args.frames,
        "moving": args.moving,
        "noise_sigma": args.noise,
        "seed": args.seed,
        "fps": args.fps,
    }
    if not 8 <= args.tile <= 1024:
        raise ConfigError(f"--tile {args.tile} must be 8..1024 pixels")
    report = run_motion(scene, extra, args.tile)
    return emit(format_table(report), format_markdown(report), asdict(report), args.json, args.markdown)
