"""Frames larger than one model call may take are enhanced in overlapping tiles.

A model's activations grow with the frame: a 4K window through conv3d_t5 needs gigabytes, so a sidecar
that accepts one 4K camera must bound them. ``plan_tiles`` cuts a frame into tiles whose kept parts
(``paste``) cover it exactly once; the model sees each tile widened by ``overlap`` on every side
(``crop``), more than its receptive field, so every kept pixel comes out as it would from the whole
frame. Crops start on multiples of the model's pad multiple, so a strided model samples them on the
whole frame's grid.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamer.errors import ConfigError

__all__ = ["Tile", "on_grid", "plan_tiles"]


@dataclass(frozen=True, slots=True)
class Tile:
    """Boxes as (top, bottom, left, right), bottom and right exclusive: the model runs on ``crop``; of
    its output, only ``paste`` (inside ``crop``) is kept."""

    crop: tuple[int, int, int, int]
    paste: tuple[int, int, int, int]


def on_grid(start: int, end: int, multiple: int, limit: int) -> tuple[int, int]:
    """[start, end) widened to start on a multiple of ``multiple`` and span one, or end at ``limit``
    (the frame's edge): a strided model then sees it on the whole frame's sampling grid, and feature
    maps cached at 1/``multiple`` resolution can be cut at the same place."""
    return start - start % multiple, min(-(-end // multiple) * multiple, limit)


def _spans(length: int, size: int, overlap: int, multiple: int) -> list[tuple[int, int, int, int]]:
    """(crop start, crop end, paste start, paste end) along one axis."""
    if length <= size:
        return [(0, length, 0, length)]
    step = (size - 2 * overlap) // multiple * multiple
    spans = []
    for start in range(0, length, step):
        end = min(start + step, length)
        lo, hi = on_grid(max(0, start - overlap), min(length, end + overlap), multiple, length)
        spans.append((lo, hi, start, end))
    return spans


def plan_tiles(height: int, width: int, size: int, overlap: int, multiple: int = 1) -> list[Tile]:
    """Tiles of at most about ``size`` pixels a side (a crop may start up to ``multiple - 1`` pixels
    earlier and end as many later, to sit on the grid) covering a ``height`` x ``width`` frame; one
    tile when it fits."""
    if multiple < 1 or overlap < 0 or size - 2 * overlap < multiple:
        raise ConfigError(
            f"tiles of {size} pixels cannot keep an overlap of {overlap} on each side on a grid of "
            f"{multiple}; raise model.tile above {2 * overlap + multiple} or lower model.tile_overlap"
        )
    rows = _spans(height, size, overlap, multiple)
    cols = _spans(width, size, overlap, multiple)
    return [Tile((ct, cb, cl, cr), (pt, pb, pl, pr)) for ct, cb, pt, pb in rows for cl, cr, pl, pr in cols]
