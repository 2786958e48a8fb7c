"""Synthetic footage the benchmarks and tests time and check on: a camera's H.264 clip of a panning,
noisy picture, and windows of a drifting pattern. numpy only at import (``bench gpu`` runs with numpy
and onnxruntime alone); the clip loads PyAV when it is made."""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from streamer.media.codecs import X264

__all__ = ["camera_clip", "pattern_window"]


def pattern_window(batch: int, t: int, width: int, height: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    """(B, T, 3, H, W) uint8: a drifting smooth pattern with noise, so outputs span the levels."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    frames = []
    for k in range(t):
        phase = 0.15 * k
        base = np.stack(
            [
                128 + 100 * np.sin(x / 37.0 + phase) * np.cos(y / 29.0),
                128 + 90 * np.sin((x + y) / 53.0 - phase),
                128 + 80 * np.cos(x / 23.0 - y / 41.0 + phase),
            ]
        )
        frames.append(base)
    clean = np.stack(frames)[None].repeat(batch, axis=0)
    noisy = clean + rng.normal(0.0, 20.0, clean.shape).astype(np.float32)
    window: npt.NDArray[np.uint8] = np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
    return window


def camera_clip(
    width: int, height: int, frames: int, fps: int, seed: int = 0
) -> tuple[bytes, list[npt.NDArray[np.uint8]]]:
    """H.264 (Annex B) of a panning picture with a sensor's noise, as a camera sends it, and its rgb24
    frames: what the decode rows read and the encode rows write."""
    import av  # only the clip needs PyAV: the GPU bench runs without it
    from av.video.stream import VideoStream

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    pixels = []
    for k in range(frames):
        shift = 6.0 * k
        base = np.stack(
            [
                127 + 100 * np.sin((x + shift) / 37.0) * np.cos(y / 53.0),
                127 + 100 * np.sin((x - y + shift) / 71.0),
                127 + 100 * np.cos((y + shift) / 29.0),
            ],
            axis=-1,
        )
        noisy = base + rng.normal(0.0, 3.0, base.shape)
        pixels.append(np.clip(noisy, 0, 255).astype(np.uint8))
    out = io.BytesIO()
    with av.open(out, "w", format="h264") as container:
        stream = container.add_stream(
            X264,
            rate=fps,
            options={"preset": "veryfast", "crf": "23", "bf": "0", "g": str(fps), "sc_threshold": "0"},
        )
        assert isinstance(stream, VideoStream)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for k, frame in enumerate(pixels):
            made = av.VideoFrame.from_ndarray(frame, format="rgb24")
            made.pts, made.time_base = k, Fraction(1, fps)
            container.mux(stream.encode(made))
        container.mux(stream.encode(None))
    return out.getvalue(), pixels
