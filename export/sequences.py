"""Training sequences made on the training device from a data pack: moving crops, cuts, camera noise.

Once the pack's images are on the device (``SequenceSampler``), every sequence is made there: a crop
of a real clip at a random scale, speed (every frame or every other) and direction (time reversed,
flipped, transposed), or a camera pan over a photograph along a smooth random path with sub-pixel
steps, zoom and rotation (or a camera that stands still), sometimes with a second photograph moving
across it, so that objects move against a background and not only the camera. Part way through, a
sequence may cut to another one: the model's state is not reset there, so it learns to notice.

Noise (``degrade``) is drawn per sequence and added frame by frame: Gaussian read noise of sigma 5..50
(0..255 units), or Poisson shot noise with a little read noise, as ``export.data`` draws them;
rounded to 8 bits as a camera delivers them. Unlike ``export.data`` there is no H.264 here (that needs
an encoder on the device). The CPU only picks numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from export.datapack import DataPack
from streamer.errors import ConfigError

__all__ = ["DEGRADATION", "Motion", "Noise", "SequenceSampler"]


@dataclass(frozen=True, slots=True)
class Motion:
    """How sequences move: shares of each kind and the fastest motion, in output pixels per frame."""

    clip: float = 0.4
    """Share of sequences cropped from the real clips; the rest are photographs moved."""
    still: float = 0.2
    """Share of photograph sequences whose camera stands still (noise alone changes)."""
    sprite: float = 0.4
    """Share of photograph sequences with a second photograph moving across them."""
    cut: float = 0.3
    """Share of sequences that cut to another sequence part way through."""
    max_speed: float = 6.0


@dataclass(frozen=True, slots=True)
class Noise:
    """Per-sequence camera noise: Gaussian ``sigma`` (0..255 units), and where ``peak`` > 0, Poisson shot
    noise of ``peak`` photo-electrons at white on top (``sigma`` is then the read noise)."""

    sigma: torch.Tensor
    peak: torch.Tensor


DEGRADATION = (
    "per sequence: Gaussian read noise of sigma 5..50 (0..255 units; 80% of sequences) or Poisson shot "
    "noise of 10..200 photo-electrons at white plus read noise of sigma 0..5 (20%), rounded to 8 bits; "
    "no H.264 (export.data's CPU training has it, the device has no encoder)"
)
"""What ``degrade`` does, in words: recorded in checkpoints and model cards."""

_SIGMA_RANGE = (5.0, 50.0)
_POISSON = 0.2
"""export.data's share of shot noise (0.15) once its H.264 share (0.15) is left out."""
_PEAK_RANGE = (10.0, 200.0)
_READ_MAX = 5.0


class SequenceSampler:
    """Makes clean (B, L, 3, crop, crop) uint8 sequences and their noise on ``device``."""

    def __init__(
        self, pack: DataPack, device: torch.device, crop: int, motion: Motion | None = None, seed: int = 0
    ) -> None:
        if crop < 16 or crop % 4:
            raise ConfigError(f"crop must be a multiple of 4 and >= 16, got {crop}")
        self.device = device
        self.crop = crop
        self.motion = motion or Motion()
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.clips = [
            torch.from_numpy(c).to(device).permute(0, 3, 1, 2).contiguous() for c in pack.clips.values()
        ]
        self.photos = [torch.from_numpy(p).to(device).permute(2, 0, 1).float() for p in pack.photos.values()]
        self.clip_frames = [int(c.shape[0]) for c in self.clips]
        if not self.photos or not self.clips:
            raise ConfigError("a data pack needs at least one clip and one photograph to train on")

    def clean(self, batch: int, length: int) -> torch.Tensor:
        """``batch`` sequences of ``length`` frames, uint8 (B, L, 3, crop, crop)."""
        if length > min(self.clip_frames):
            raise ConfigError(
                f"sequences of {length} frames need clips at least that long; the pack's clips have "
                f"{self.clip_frames} frames: shorten the curriculum's sequences"
            )
        out = torch.empty((batch, length, 3, self.crop, self.crop), dtype=torch.uint8, device=self.device)
        for b in range(batch):
            frames = self._sequence(length)
            if self.rng.random() < self.motion.cut:
                at = int(self.rng.integers(length // 4, 3 * length // 4 + 1))
                frames = torch.cat([frames[:at], self._sequence(length - at)])
            out[b] = frames.round().clamp(0, 255).to(torch.uint8)
        return out

    def noise(self, batch: int) -> Noise:
        """Each sequence's camera: Gaussian noise, or (a share ``_POISSON``) shot noise with read noise."""
        shot = torch.from_numpy(self.rng.random(batch) < _POISSON)
        lo, hi = _SIGMA_RANGE
        sigma = torch.from_numpy(self.rng.uniform(lo, hi, batch))
        sigma = torch.where(shot, torch.from_numpy(self.rng.uniform(0.0, _READ_MAX, batch)), sigma)
        low, high = (math.log(v) for v in _PEAK_RANGE)
        peak = torch.from_numpy(np.exp(self.rng.uniform(low, high, batch)))
        peak = torch.where(shot, peak, torch.zeros_like(peak))
        return Noise(sigma.float().to(self.device), peak.float().to(self.device))

    def degrade(self, clean: torch.Tensor, noise: Noise) -> torch.Tensor:
        """``clean`` (B, L, 3, H, W) in [0, 1] with each sequence's noise, rounded to 8 bits, in [0, 1].

        Shot noise is drawn for every sequence and kept where ``peak`` > 0: choosing rows would make the
        host wait for the device.
        """
        shape = (-1, 1, 1, 1, 1)
        peak = noise.peak.view(shape)
        read = noise.sigma.view(shape) * torch.randn(
            clean.shape, generator=self.generator, device=clean.device
        )
        electrons = torch.poisson(clean * peak.clamp(min=1.0), generator=self.generator)
        signal = torch.where(peak > 0, electrons / peak.clamp(min=1.0), clean)
        return (signal * 255.0 + read).round().clamp(0.0, 255.0) / 255.0

    def _sequence(self, length: int) -> torch.Tensor:
        """One clean sequence, float (L, 3, crop, crop) in 0..255."""
        if self.rng.random() < self.motion.clip:
            return self._clip(length)
        photo = self.photos[int(self.rng.integers(len(self.photos)))]
        still = self.rng.random() < self.motion.still
        speed = 0.0 if still else self.rng.uniform(0.3, self.motion.max_speed)
        frames, _ = self._pan(photo, length, speed, spin=not still)
        if self.rng.random() < self.motion.sprite:
            frames = self._sprite(frames)
        return frames

    def _clip(self, length: int) -> torch.Tensor:
        """A crop of a real clip: random start, step 1 or 2, scale, flips, transpose and time direction."""
        index = int(self.rng.integers(len(self.clips)))
        clip, n = self.clips[index], self.clip_frames[index]
        step = 2 if self.rng.random() < 0.25 and 2 * (length - 1) < n else 1
        t0 = int(self.rng.integers(0, n - step * (length - 1)))
        _, _, h, w = clip.shape
        # Scale < 1 takes a larger region down to the crop (more detail per pixel); a clip smaller than the
        # crop is scaled up just enough.
        least = self.crop / min(h, w)
        scale = self.rng.uniform(max(0.6, least), max(1.0, least))
        region = min(h, w, max(1, round(self.crop / scale)))
        y0, x0 = int(self.rng.integers(0, h - region + 1)), int(self.rng.integers(0, w - region + 1))
        frames = clip[t0 : t0 + step * (length - 1) + 1 : step, :, y0 : y0 + region, x0 : x0 + region].float()
        if region != self.crop:
            frames = F.interpolate(frames, size=(self.crop, self.crop), mode="bilinear", antialias=True)
        if self.rng.random() < 0.5:
            frames = frames.flip(0)
        if self.rng.random() < 0.5:
            frames = frames.flip(-1)
        if self.rng.random() < 0.5:
            frames = frames.flip(-2)
        if self.rng.random() < 0.5:
            frames = frames.transpose(-1, -2)
        return frames

    def _pan(
        self,
        photo: torch.Tensor,
        length: int,
        speed: float,
        spin: bool = True,
        direction: float | None = None,
    ) -> tuple[torch.Tensor, float]:
        """A camera moving over ``photo`` at ``speed`` output pixels per frame along ``direction`` (radians;
        random if None), zooming and turning a little unless ``spin`` is off: float (L, 3, crop, crop), and
        the speed it moved at (lower where the photograph has no room for the path)."""
        p = self.crop
        # The photograph at a random scale first (antialiased), so the pan itself samples near 1:1.
        scale = self.rng.uniform(0.5, 1.0)
        if scale < 0.999:
            photo = F.interpolate(photo[None], scale_factor=scale, mode="bilinear", antialias=True)[0]
        _, h, w = photo.shape
        angle = self.rng.uniform(0, 2 * math.pi) if direction is None else direction
        zoom_rate = self.rng.uniform(-0.004, 0.004) if spin else 0.0
        spin_rate = self.rng.uniform(-0.004, 0.004) if spin else 0.0
        reach = p / 2 * math.sqrt(2) * (1 + abs(zoom_rate) * length)  # the crop's corners, turned and zoomed
        room = max(0.0, min(h, w) - 2 * reach)
        speed = min(speed, room / max(1, length - 1))
        velocity = speed * np.array([math.cos(angle), math.sin(angle)])
        travel = np.abs(velocity) * (length - 1) / 2
        low, high = reach + travel, np.array([w, h]) - reach - travel
        centre = [
            self.rng.uniform(a, b) if b > a else size / 2
            for a, b, size in zip(low, high, (w, h), strict=True)
        ]
        k = torch.arange(length, device=self.device, dtype=torch.float32) - (length - 1) / 2
        zoom = 1.0 + zoom_rate * k
        theta = spin_rate * k
        cos, sin = torch.cos(theta) / zoom, torch.sin(theta) / zoom
        u = torch.arange(p, device=self.device, dtype=torch.float32) + 0.5 - p / 2
        uy, ux = torch.meshgrid(u, u, indexing="ij")
        cx = float(centre[0]) + float(velocity[0]) * k
        cy = float(centre[1]) + float(velocity[1]) * k
        x = cx[:, None, None] + cos[:, None, None] * ux - sin[:, None, None] * uy
        y = cy[:, None, None] + sin[:, None, None] * ux + cos[:, None, None] * uy
        # The L frames' grids stacked into one tall grid: one sampling call over the one photograph.
        grid = torch.stack([x * (2.0 / w) - 1.0, y * (2.0 / h) - 1.0], dim=-1).reshape(1, length * p, p, 2)
        frames = F.grid_sample(
            photo[None], grid, mode="bicubic", padding_mode="reflection", align_corners=False
        )
        return frames.reshape(3, length, p, p).transpose(0, 1).clamp(0.0, 255.0), speed

    def _sprite(self, frames: torch.Tensor) -> torch.Tensor:
        """``frames`` with an ellipse of another photograph moving across them, its content moving with it."""
        length, p = frames.shape[0], self.crop
        photo = self.photos[int(self.rng.integers(len(self.photos)))]
        angle = self.rng.uniform(0, 2 * math.pi)
        # The photograph slides one way under a still window, so its content moves the other way: point
        # the pan against the ellipse's motion.
        inside, speed = self._pan(
            photo, length, self.rng.uniform(0.5, self.motion.max_speed), spin=False, direction=angle + math.pi
        )
        radius = self.rng.uniform(0.12, 0.35, 2) * p
        start = self.rng.uniform(0.2, 0.8, 2) * p
        k = torch.arange(length, device=self.device, dtype=torch.float32)
        mx = float(start[0]) + speed * math.cos(angle) * k
        my = float(start[1]) + speed * math.sin(angle) * k
        u = torch.arange(p, device=self.device, dtype=torch.float32) + 0.5
        d = torch.sqrt(
            ((u[None, None, :] - mx[:, None, None]) / float(radius[0])) ** 2
            + ((u[None, :, None] - my[:, None, None]) / float(radius[1])) ** 2
        )
        # A soft edge about 1.5 pixels wide, as a lens draws one.
        mask = (0.5 - (d - 1.0) * float(radius.min()) / 1.5).clamp(0.0, 1.0)[:, None]
        return mask * inside + (1.0 - mask) * frames
