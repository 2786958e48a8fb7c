"""Decides per window whether the model must run, and on which region, from frame differencing on
downscaled luma.

Surveillance scenes are static most of the time; re-enhancing an unchanged picture wastes the model.
The gate compares the window's target frame with its *reference* (the last target the model ran on):
when few enough pixels changed, the reference's enhanced output is still right and is reused. Comparing
against the reference, not the previous frame, means slow drift accumulates until it triggers a run.

With ``tile`` set, the same comparison is made per tile, each tile against the frame it was last
enhanced from: a person crossing a parked-car scene changes a few tiles, and only the box around them
(plus a ``halo`` of context wider than the model's receptive field, so the box's pixels come out as
they would from the whole frame) goes through the model; the other tiles keep their enhanced pixels.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamer.core.luma import full_scale, luma_int
from streamer.core.tiling import on_grid
from streamer.errors import ConfigError
from streamer.frame import Frame, Hyperframe, Picture, Yuv420

__all__ = [
    "GateDecision",
    "GateReason",
    "GateStats",
    "MotionGate",
    "Region",
    "SceneCutDetector",
    "SkipAction",
    "luma_thumbnail",
]

_THUMBS_KEPT = 32
"""Thumbnails kept for the tile gate: more than any window's frames."""


def luma_thumbnail(picture: Picture, width: int) -> npt.NDArray[np.float32]:
    """Luma at about ``width`` columns, each sample the mean of a 2x2 spread inside its block.

    Sampling a few pixels per block instead of averaging all of them keeps a 1080p frame's thumbnail
    a small part of the frame's cost on the event loop, while the 4-sample mean still halves the sensor
    noise the threshold must ride over.
    4:2:0 planes give their Y plane, on the same 0..255 scale (tv range stretched), not converted.
    """
    if not isinstance(picture, Yuv420):
        return _spread_mean(picture, width, luma_int)
    return full_scale(_spread_mean(picture.y, width, lambda sample: sample), picture.colour.limited)


def _spread_mean(
    image: npt.NDArray[np.uint8],
    width: int,
    luma: Callable[[npt.NDArray[np.uint8]], npt.NDArray[Any]],
) -> npt.NDArray[np.float32]:
    h, w = image.shape[:2]
    step = max(1, min(w // max(1, width), h))  # at least one row, however wide and short the frame
    half = step // 2
    offsets = [(0, 0)] if step == 1 else [(0, 0), (0, half), (half, 0), (half, half)]
    rows, cols = h // step, w // step
    acc = np.zeros((rows, cols), dtype=np.float32)
    for dy, dx in offsets:
        acc += luma(image[dy : dy + rows * step : step, dx : dx + cols * step : step])
    acc /= len(offsets)
    return acc


class SkipAction(enum.Enum):
    """What a frame whose window the gate skipped becomes."""

    REUSE = "reuse"
    """The enhanced output of the gate's reference frame: right for a scene that has not changed."""
    PASSTHROUGH = "passthrough"
    """The original frame."""


class GateReason(enum.Enum):
    DISABLED = "disabled"
    FIRST = "first"
    """No reference yet: the start of a run."""
    MOTION = "motion"
    STATIC = "static"
    REFRESH = "refresh"
    """Static, but the reference is older than ``refresh_s``: run anyway to bound staleness."""


@dataclass(frozen=True, slots=True)
class Region:
    """Where a region run works, in full-resolution pixels: the model sees ``crop`` (``paste`` and its
    halo), and only ``paste`` (whole tiles) replaces the previous output. Boxes are (top, bottom, left,
    right), bottom and right exclusive."""

    crop: tuple[int, int, int, int]
    paste: tuple[int, int, int, int]

    @property
    def crop_pixels(self) -> int:
        top, bottom, left, right = self.crop
        return (bottom - top) * (right - left)

    def aligned(self, multiple: int, height: int, width: int) -> Region:
        """The crop put on the model's grid (``on_grid``), the paste unchanged."""
        top, bottom, left, right = self.crop
        return Region(
            (*on_grid(top, bottom, multiple, height), *on_grid(left, right, multiple, width)), self.paste
        )


@dataclass(frozen=True, slots=True)
class GateDecision:
    run_model: bool
    score: float
    """Fraction of thumbnail pixels whose luma moved more than the threshold since the reference."""
    reason: GateReason
    region: Region | None = None
    """Set when only part of the frame must be enhanced (``tile`` mode); None: the whole frame."""


@dataclass(frozen=True, slots=True)
class GateStats:
    windows: int
    runs: int
    skipped: int

    @property
    def skip_ratio(self) -> float:
        return self.skipped / self.windows if self.windows else 0.0


DEFAULT_HALO = 32
"""The halo where none is set and the model's reach is not known: more than conv3d_t5's 27 pixels."""


class MotionGate:
    """Pure and per stream; call ``reset`` at every discontinuity so no reference crosses it.

    Hysteresis: a moving scene turns static only after ``hold`` consecutive windows scored below
    ``area_off``; a static one turns moving as soon as one scores at or above ``area_on``.
    """

    def __init__(
        self,
        enabled: bool = True,
        downscale_width: int = 160,
        pixel_threshold: float = 12.0,
        area_on: float = 0.005,
        area_off: float = 0.0025,
        hold: int = 3,
        refresh_s: float | None = 2.0,
        tile: int | None = None,
        halo: int | None = None,
        max_region: float = 0.5,
        tile_area: float = 0.05,
    ) -> None:
        if not 0.0 <= area_off <= area_on <= 1.0:
            raise ConfigError(
                f"gate needs 0 <= area_off <= area_on <= 1, got area_off={area_off}, area_on={area_on}"
            )
        if downscale_width < 1 or hold < 1 or pixel_threshold < 0:
            raise ConfigError(
                f"gate.downscale_width and gate.hold must be >= 1 and gate.pixel_threshold >= 0, got "
                f"{downscale_width}, {hold}, {pixel_threshold}"
            )
        if refresh_s is not None and refresh_s <= 0:
            raise ConfigError(f"gate.refresh_s must be positive seconds or null, got {refresh_s}")
        if (
            (tile is not None and tile < 8)
            or (halo is not None and halo < 0)
            or not 0.0 < max_region <= 1.0
            or not 0 < tile_area <= 1
        ):
            raise ConfigError(
                f"gate.tile must be >= 8 pixels or null, gate.halo >= 0, gate.max_region and gate.tile_area "
                f"in (0, 1]; got {tile}, {halo}, {max_region}, {tile_area}"
            )
        self.enabled = enabled
        self.downscale_width = downscale_width
        self.pixel_threshold = pixel_threshold
        self.area_on = area_on
        self.area_off = area_off
        self.hold = hold
        self.refresh_s = refresh_s
        self.tile = tile
        self._halo_setting = halo
        self.halo = DEFAULT_HALO if halo is None else halo
        self.max_region = max_region
        self.tile_area = tile_area
        self._reference: npt.NDArray[np.float32] | None = None
        self._thumbs: dict[tuple[int, int, int], npt.NDArray[np.float32]] = {}
        self._reference_time = 0.0
        self._moving = True
        self._quiet = 0
        self._windows = 0
        self._runs = 0

    def fit_reach(self, reach: int | None) -> None:
        """The model's reach (``ModelInfo.reach_px``) sets the halo where none was set: rounded up to a
        multiple of 4 (the models' pad multiple, so the crop stays on their grid); unknown, the default."""
        if self._halo_setting is None:
            self.halo = DEFAULT_HALO if reach is None else -(-reach // 4) * 4

    def reset(self) -> None:
        """Forget the reference: the next window runs the model."""
        self._reference = None
        self._thumbs.clear()
        self._moving = True
        self._quiet = 0

    def decide(self, window: Hyperframe, now: float) -> GateDecision:
        decision = self._decide(window, now)
        self._windows += 1
        self._runs += decision.run_model
        return decision

    def stats(self) -> GateStats:
        return GateStats(windows=self._windows, runs=self._runs, skipped=self._windows - self._runs)

    def _decide(self, window: Hyperframe, now: float) -> GateDecision:
        if not self.enabled:
            return GateDecision(True, 1.0, GateReason.DISABLED)
        target = window.target_frame
        # In tile mode every frame of the window is compared: the target's thumbnail comes from that cache.
        thumb = (
            self._thumb(target)
            if self.tile is not None
            else luma_thumbnail(target.picture, self.downscale_width)
        )
        reference = self._reference
        if reference is None or reference.shape != thumb.shape:
            return self._run(thumb, now, 1.0, GateReason.FIRST)
        if self.tile is not None:
            # Every frame of the window counts: a temporal model's output at a pixel moves when a
            # neighbour frame changes there, even where the target frame did not.
            masks = [np.abs(self._thumb(f) - reference) > self.pixel_threshold for f in window.frames]
            return self._decide_tiles(thumb, masks, (target.height, target.width), now)
        score = float(np.count_nonzero(np.abs(thumb - reference) > self.pixel_threshold)) / thumb.size
        if score >= self.area_on:
            self._moving, self._quiet = True, 0
        elif self._moving:
            self._quiet = self._quiet + 1 if score < self.area_off else 0
            self._moving = self._quiet < self.hold
        if self._moving:
            return self._run(thumb, now, score, GateReason.MOTION)
        if self.refresh_s is not None and now - self._reference_time >= self.refresh_s:
            return self._run(thumb, now, score, GateReason.REFRESH)
        return GateDecision(False, score, GateReason.STATIC)

    def _thumb(self, frame: Frame) -> npt.NDArray[np.float32]:
        """A frame's thumbnail, computed once though the frame stands in T windows."""
        key = (frame.index, frame.height, frame.width)
        thumb = self._thumbs.get(key)
        if thumb is None:
            thumb = self._thumbs[key] = luma_thumbnail(frame.picture, self.downscale_width)
            while len(self._thumbs) > _THUMBS_KEPT:
                del self._thumbs[next(iter(self._thumbs))]
        return thumb

    def _decide_tiles(
        self,
        thumb: npt.NDArray[np.float32],
        masks: list[npt.NDArray[np.bool_]],
        size: tuple[int, ...],
        now: float,
    ) -> GateDecision:
        """Per tile, against what each tile was last enhanced from: nothing changed -> reuse, some tiles
        -> their bounding box, most of the frame or a due refresh -> the whole frame. ``masks``: the
        moved thumbnail samples of each frame of the window."""
        assert self.tile is not None
        assert self._reference is not None
        height, width = size[0], size[1]
        step = height / thumb.shape[0], width / thumb.shape[1]
        moved = np.logical_or.reduce(masks)
        score = float(np.count_nonzero(moved)) / moved.size
        if self.refresh_s is not None and now - self._reference_time >= self.refresh_s:
            return self._run(thumb, now, score, GateReason.REFRESH)
        rows, cols = -(-height // self.tile), -(-width // self.tile)
        per_tile = max(1.0, (self.tile / step[0]) * (self.tile / step[1]))
        # A tile changed when, in one frame of the window, more than tile_area of it moved: per frame,
        # so sensor noise scattered over T frames does not add up to a change.
        changed = np.zeros((rows, cols), dtype=bool)
        for mask in masks:
            changed |= self._tile_counts(mask, step, rows, cols) / per_tile >= self.tile_area
        if not changed.any():
            return GateDecision(False, score, GateReason.STATIC)
        # The model's output moves wherever a change is within its reach (``halo``), even in a tile that
        # did not change: the box takes the changed samples' extent plus the halo, out to whole tiles.
        ys, xs = np.nonzero(moved)
        keep = changed[self._tile_of(ys, step[0], rows), self._tile_of(xs, step[1], cols)]
        ys, xs = ys[keep], xs[keep]
        tile, halo = self.tile, self.halo
        paste = (
            max(0, int(ys.min() * step[0]) - halo) // tile * tile,
            min(height, -(-(int((ys.max() + 1) * step[0]) + halo) // tile) * tile),
            max(0, int(xs.min() * step[1]) - halo) // tile * tile,
            min(width, -(-(int((xs.max() + 1) * step[1]) + halo) // tile) * tile),
        )
        crop = (
            max(0, paste[0] - halo),
            min(height, paste[1] + halo),
            max(0, paste[2] - halo),
            min(width, paste[3] + halo),
        )
        region = Region(crop, paste)
        if region.crop_pixels >= self.max_region * height * width:
            return self._run(thumb, now, score, GateReason.MOTION)
        # The pasted tiles are re-enhanced from this frame: that is their reference now.
        top, bottom, left, right = (
            int(paste[0] / step[0]),
            int(-(-paste[1] // step[0])),
            int(paste[2] / step[1]),
            int(-(-paste[3] // step[1])),
        )
        updated = self._reference.copy()
        updated[top:bottom, left:right] = thumb[top:bottom, left:right]
        self._reference = updated
        return GateDecision(True, score, GateReason.MOTION, region)

    def _tile_of(self, samples: npt.NDArray[np.intp], step: float, count: int) -> npt.NDArray[np.intp]:
        """The tile each thumbnail sample's centre falls in, along one axis."""
        assert self.tile is not None
        return np.minimum(((samples + 0.5) * step // self.tile).astype(np.intp), count - 1)

    def _tile_counts(
        self, mask: npt.NDArray[np.bool_], step: tuple[float, float], rows: int, cols: int
    ) -> npt.NDArray[np.int64]:
        ys, xs = np.nonzero(mask)
        counts = np.zeros((rows, cols), dtype=np.int64)
        np.add.at(counts, (self._tile_of(ys, step[0], rows), self._tile_of(xs, step[1], cols)), 1)
        return counts

    def _run(
        self, thumb: npt.NDArray[np.float32], now: float, score: float, reason: GateReason
    ) -> GateDecision:
        self._reference = thumb
        self._reference_time = now
        return GateDecision(True, score, reason)


class SceneCutDetector:
    """Flags a frame whose luma thumbnail differs from the previous frame's by more than ``threshold``.

    A temporal model fed frames from both sides of an editing cut blends two scenes; marking the cut a
    discontinuity makes the windower end the run there, as it does at a reconnect. The threshold is
    the mean absolute luma change (0..255): fast pans measure about 15-25, cuts 50 and more.
    """

    def __init__(self, threshold: float | None = 40.0, downscale_width: int = 64) -> None:
        if threshold is not None and not 0.0 < threshold <= 255.0:
            raise ConfigError(f"window.scene_cut must be in (0, 255] or null, got {threshold}")
        self.threshold = threshold
        self.downscale_width = downscale_width
        self._previous: npt.NDArray[np.float32] | None = None
        self.cuts = 0

    def is_cut(self, picture: Picture) -> bool:
        """Whether this frame starts a new scene; the first frame of a stream is not a cut."""
        if self.threshold is None:
            return False
        thumb = luma_thumbnail(picture, self.downscale_width)
        previous, self._previous = self._previous, thumb
        if previous is None or previous.shape != thumb.shape:
            return False
        cut = float(np.mean(np.abs(thumb - previous))) > self.threshold
        self.cuts += cut
        return cut
