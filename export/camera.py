"""What a camera and its link do to a clean clip, for training models that help real feeds (issue 14).

Real surveillance video is not a clean picture plus Gaussian noise: the optics blur it a little, the
sensor adds noise whose variance grows with the light (shot noise) over a floor (read noise), the
demosaicing and the camera's own processing spread that noise over neighbouring pixels, a sub-stream
or a digital zoom rescales it, and the encoder (H.264 at a constant quality, with the GOP and B-frames
cameras use) quantises all of it into blocks and ringing. :class:`CameraModel` draws one such chain
per clip (:class:`CameraDamage`, seeded), and :func:`damage` applies it in that order, the whole clip
through libx264 at once so motion compensation and rate control act as they do on a camera. A share
of draws leaves the clip untouched, so a model also learns to leave good frames alone. (Real-ESRGAN's
high-order degradation model is the pattern; this is a first order of it, for video.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from fractions import Fraction

import cv2
import numpy as np
import numpy.typing as npt

from streamer.errors import ConfigError
from streamer.measure.roundtrip import x264_roundtrip

__all__ = ["CameraDamage", "CameraModel", "damage"]

Frames = npt.NDArray[np.uint8]
"""(N, H, W, 3) uint8 RGB."""


@dataclass(frozen=True, slots=True)
class CameraDamage:
    """One draw of what a camera and its link do; every field 0 (and ``crf`` None) is no damage."""

    blur: float
    """Gaussian blur of the picture (pixels of sigma): optics and focus."""
    scale: float
    """Down by this factor and back up (1: not rescaled): a sub-stream or a digital zoom."""
    read_sigma: float
    """Read noise, 0..255 units."""
    shot: float
    """Shot noise: variance added per level of the picture."""
    spread: float
    """Blur of the noise field alone (pixels of sigma; 0: white): demosaicing and in-camera processing."""
    crf: int | None
    """libx264 constant quality; None: not compressed."""
    gop: int
    bframes: int

    def describe(self) -> str:
        return ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in asdict(self).items()
        )


NO_DAMAGE = CameraDamage(0.0, 1.0, 0.0, 0.0, 0.0, None, 0, 0)


@dataclass(frozen=True, slots=True)
class CameraModel:
    """The ranges each draw comes from; the defaults describe a range of surveillance cameras."""

    clean: float = 0.1
    """Share of draws that leave the clip as it is."""
    blur: tuple[float, float] = (0.0, 1.0)
    rescale: float = 0.2
    """Share of draws that rescale, by a factor in ``scale``."""
    scale: tuple[float, float] = (0.5, 0.85)
    read_sigma: tuple[float, float] = (1.0, 15.0)
    shot: tuple[float, float] = (0.0, 1.0)
    spread: float = 0.5
    """Share of draws whose noise is spread (demosaiced), by a sigma in ``spread_sigma``."""
    spread_sigma: tuple[float, float] = (0.5, 1.2)
    compressed: float = 0.9
    """Share of damaged draws that go through the encoder."""
    noiseless: float = 0.0
    """Share of damaged draws with no sensor noise, always encoded: a camera in good light, whose stream
    shows the encoder's damage alone (the quality bench's compressed-only track). 0 draws as before it
    existed, so earlier runs' data is made again as it was."""
    crf: tuple[int, int] = (23, 40)
    gop: tuple[int, int] = (25, 60)
    bframes: tuple[int, int] = (0, 2)

    def draw(self, rng: np.random.Generator) -> CameraDamage:
        if rng.random() < self.clean:
            return NO_DAMAGE
        how = CameraDamage(
            blur=float(rng.uniform(*self.blur)),
            scale=float(rng.uniform(*self.scale)) if rng.random() < self.rescale else 1.0,
            read_sigma=float(rng.uniform(*self.read_sigma)),
            shot=float(rng.uniform(*self.shot)),
            spread=float(rng.uniform(*self.spread_sigma)) if rng.random() < self.spread else 0.0,
            crf=int(rng.integers(self.crf[0], self.crf[1] + 1)) if rng.random() < self.compressed else None,
            gop=int(rng.integers(self.gop[0], self.gop[1] + 1)),
            bframes=int(rng.integers(self.bframes[0], self.bframes[1] + 1)),
        )
        if self.noiseless > 0 and rng.random() < self.noiseless:
            crf = how.crf if how.crf is not None else int(rng.integers(self.crf[0], self.crf[1] + 1))
            how = replace(how, read_sigma=0.0, shot=0.0, spread=0.0, crf=crf)
        return how


def damage(clip: Frames, how: CameraDamage, rng: np.random.Generator, fps: int = 25) -> Frames:
    """``clip`` as the camera of ``how`` would deliver it; the noise is drawn from ``rng``."""
    if clip.ndim != 4 or clip.shape[3] != 3 or clip.dtype != np.uint8:
        raise ConfigError(f"damage takes an (N, H, W, 3) uint8 RGB clip; got {clip.shape} {clip.dtype}")
    n, h, w, _ = clip.shape
    if how.crf is not None and (h % 2 or w % 2):
        raise ConfigError(f"an encoded clip needs even sides (4:2:0); got {w}x{h}: crop it first")
    out = clip.astype(np.float32)
    for i in range(n):
        frame: npt.NDArray[np.float32] = out[i]
        if how.blur > 0:
            frame = np.asarray(cv2.GaussianBlur(frame, (0, 0), how.blur), dtype=np.float32)
        if how.scale < 1.0:
            small = (max(2, round(w * how.scale)), max(2, round(h * how.scale)))
            shrunk = np.asarray(cv2.resize(frame, small, interpolation=cv2.INTER_AREA), dtype=np.float32)
            frame = np.asarray(cv2.resize(shrunk, (w, h), interpolation=cv2.INTER_CUBIC), dtype=np.float32)
        if how.read_sigma > 0 or how.shot > 0:
            level = np.clip(frame, 0.0, 255.0)
            noise = rng.standard_normal(frame.shape, dtype=np.float32)
            if how.spread > 0:
                # Spreading lowers the field's deviation; scaled back so the sigma drawn is the sigma seen.
                spread = np.asarray(cv2.GaussianBlur(noise, (0, 0), how.spread), dtype=np.float32)
                noise = spread / np.float32(max(float(spread.std()), 1e-6))
            frame = frame + np.sqrt(np.float32(how.read_sigma**2) + np.float32(how.shot) * level) * noise
        out[i] = frame
    damaged = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return damaged if how.crf is None else _encode(damaged, how, fps)


def _encode(clip: Frames, how: CameraDamage, fps: int) -> Frames:
    """The clip through libx264 at constant quality, decoded again."""
    options = {"preset": "veryfast", "crf": str(how.crf), "g": str(how.gop), "bf": str(how.bframes)}
    return x264_roundtrip(clip, Fraction(fps), options)[0]
