"""Quality metrics of an enhanced clip against its clean original: PSNR, SSIM and temporal flicker.

Clips are RGB uint8 arrays shaped (N, H, W, 3). Each metric is computed per frame and averaged over
frames, so a long clip and a short one weigh their frames alike.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
from skimage.metrics import structural_similarity

from streamer.errors import FrameError

__all__ = ["Clip", "flicker_index", "psnr", "ssim", "temporal_variation"]

Clip = npt.NDArray[np.uint8]
"""Frames of one video, (N, H, W, 3) uint8 RGB."""

_PEAK = 255.0


def psnr(out: Clip, clean: Clip) -> float:
    """Mean over frames of 10 log10(255² / MSE) in dB; inf when every frame is identical to the clean one."""
    _check_pair(out, clean)
    values = []
    for a, b in zip(out, clean, strict=True):
        mse = float(np.mean(np.square(a.astype(np.float64) - b)))
        values.append(np.inf if mse == 0.0 else 10.0 * np.log10(_PEAK**2 / mse))
    return float(np.mean(values))


def ssim(out: Clip, clean: Clip) -> float:
    """Mean over frames of skimage's SSIM (7x7 uniform window, colour as channel axis, data range 255)."""
    _check_pair(out, clean)
    values = [
        structural_similarity(a, b, channel_axis=2, data_range=_PEAK)  # type: ignore[no-untyped-call]
        for a, b in zip(out, clean, strict=True)
    ]
    return float(np.mean(values))


def temporal_variation(clip: Clip) -> float:
    """Mean over t of mean |x_t - x_{t-1}| in 0..255 units: how much a clip changes frame to frame."""
    _check_clip(clip, "clip")
    if len(clip) < 2:
        raise FrameError(f"temporal variation needs at least 2 frames, got {len(clip)}; pass a longer clip")
    diffs = [np.mean(np.abs(b.astype(np.int16) - a)) for a, b in itertools.pairwise(clip)]
    return float(np.mean(diffs))


def flicker_index(out: Clip, clean: Clip) -> float:
    """Temporal variation of ``out`` minus that of ``clean``: 0 is as steady as the clean video.

    Positive means the output changes more between frames than the scene does (residual noise, shimmer);
    negative means it changes less (smoothed-away motion).
    """
    _check_pair(out, clean)
    return temporal_variation(out) - temporal_variation(clean)


def _check_clip(clip: Clip, name: str) -> None:
    if clip.dtype != np.uint8 or clip.ndim != 4 or clip.shape[3] != 3 or len(clip) == 0:
        raise FrameError(
            f"{name} has shape {clip.shape} and dtype {clip.dtype}; metrics take (N>=1, H, W, 3) uint8 RGB"
        )


def _check_pair(out: Clip, clean: Clip) -> None:
    _check_clip(out, "output")
    _check_clip(clean, "clean clip")
    if out.shape != clean.shape:
        raise FrameError(
            f"output {out.shape} and clean clip {clean.shape} differ in shape; compare the same frames at "
            "the same size"
        )
