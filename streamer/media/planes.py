"""swscale between 4:2:0 planes and rgb24, told the planes' matrix and range, and a model's change to
a frame's RGB carried onto the planes it was made from.

Apart from :mod:`streamer.media.colour` so that a frame carrying planes (``streamer.frame.Yuv420``) can make
its RGB on first use without the two modules importing each other: nothing here imports streamer.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt
from av.video.frame import VideoFrame
from av.video.reformatter import ColorRange, Colorspace, VideoReformatter

__all__ = [
    "SWSCALE",
    "changed_planes",
    "convert",
    "frame_planes",
    "planes_frame",
    "planes_rgb",
    "rgb_frame",
    "rgb_planes",
]

SWSCALE: dict[int, Colorspace] = {
    1: Colorspace.ITU709,
    4: Colorspace.FCC,
    5: Colorspace.ITU601,  # BT.470BG
    6: Colorspace.SMPTE170M,
    7: Colorspace.SMPTE240M,
    9: Colorspace.BT2020,  # BT.2020 non-constant luminance
}
"""The AVColorSpace matrices swscale applies, as PyAV names them (its own SWS_CS_* codes)."""

Plane = npt.NDArray[np.uint8]

KEPT_CONVERSIONS = 8
"""How many conversions (sizes, formats, colours) each thread keeps a swscale context for."""


_GREY = 128
"""The level a change is carried on: a picture of it is mid-grey where nothing changed."""


class _Reformatters(threading.local):
    """Each thread's swscale reformatters, one per conversion, the least recently used dropped first."""

    def __init__(self) -> None:
        self.by_conversion: OrderedDict[tuple[Any, ...], VideoReformatter] = OrderedDict()


_REFORMATTERS = _Reformatters()


def convert(frame: VideoFrame, **settings: Any) -> VideoFrame:
    """``frame.reformat(**settings)`` through this thread's reformatter for the conversion, which keeps
    its swscale context (filters and tables) from frame to frame. A frame's own reformatter is new with
    each frame, so it builds the context again every time, at a cost beside the conversion's own; one
    reformatter asked for conversions in turn builds it again each turn. The conversion runs on the
    calling thread alone: a kept context with slice threads would keep them too, in every thread that
    converts, where the streams' own threads already share the cores."""
    key = (frame.format.name, frame.width, frame.height, *sorted(settings.items()))
    kept = _REFORMATTERS.by_conversion
    reformatter = kept.pop(key, None) or VideoReformatter()
    kept[key] = reformatter
    if len(kept) > KEPT_CONVERSIONS:
        kept.popitem(last=False)
    return reformatter.reformat(frame, threads=1, **settings)


def planes_frame(y: Plane, u: Plane, v: Plane, matrix: int, colour_range: int) -> VideoFrame:
    """4:2:0 planes as a yuv420p frame tagged with their AVColorSpace ``matrix`` and AVColorRange, each
    plane copied in row by row (the frame's rows may be padded)."""
    height, width = y.shape
    frame = VideoFrame(width, height, "yuv420p")
    for plane, source in zip(frame.planes, (y, u, v), strict=True):
        rows, columns = source.shape
        dest = np.frombuffer(memoryview(plane), np.uint8).reshape(-1, plane.line_size)
        dest[:rows, :columns] = source
    frame.colorspace = matrix
    frame.color_range = colour_range
    return frame


def planes_rgb(y: Plane, u: Plane, v: Plane, matrix: int, colour_range: int) -> Plane:
    """4:2:0 planes as (H, W, 3) rgb24, read with their own matrix and range."""
    rgb = convert(
        planes_frame(y, u, v, matrix, colour_range),
        format="rgb24",
        src_colorspace=SWSCALE[matrix],
        src_color_range=colour_range,
        dst_color_range=ColorRange.JPEG,
    ).to_ndarray()
    pixels: Plane = np.ascontiguousarray(rgb, dtype=np.uint8)
    return pixels


def frame_planes(frame: VideoFrame) -> tuple[Plane, Plane, Plane]:
    """A yuv420p frame's planes as (rows, columns) views without the row padding."""
    h, w = frame.height, frame.width
    sizes = ((h, w), (h // 2, w // 2), (h // 2, w // 2))
    y, u, v = (
        np.frombuffer(memoryview(plane), np.uint8).reshape(-1, plane.line_size)[:rows, :columns]
        for plane, (rows, columns) in zip(frame.planes, sizes, strict=True)
    )
    return y, u, v


def rgb_frame(pixels: Plane) -> VideoFrame:
    """rgb24 pixels as a frame that reads them in place, to be converted at once: a copy into a new
    frame (``from_ndarray``) costs more than the conversion to yuv420p. Rows must be contiguous; other
    views are copied first."""
    if pixels.strides[1:] != (3, 1):
        pixels = np.ascontiguousarray(pixels)
    return VideoFrame.from_numpy_buffer(pixels, format="rgb24")


def rgb_planes(rgb: Plane, matrix: int, colour_range: int) -> tuple[Plane, Plane, Plane]:
    """(H, W, 3) rgb24 pixels, H and W even, as 4:2:0 planes in the AVColorSpace ``matrix`` and
    AVColorRange: views of a new frame's planes."""
    frame = convert(
        rgb_frame(rgb), format="yuv420p", dst_colorspace=SWSCALE[matrix], dst_color_range=colour_range
    )
    return frame_planes(frame)


def changed_planes(
    planes: tuple[Plane, Plane, Plane],
    matrix: int,
    colour_range: int,
    before: Plane,
    after: Plane,
    weight: float = 1.0,
) -> tuple[Plane, Plane, Plane]:
    """``planes`` (Y, U, V in ``matrix`` and ``colour_range``) with the change a model made from
    ``before``, their RGB, to ``after`` (times ``weight``, rounded): each plane plus that change's own
    planes, clipped. Where ``after`` equals ``before`` the planes come back exactly, so a model that
    changes nothing changes no sample; elsewhere the change is what swscale's conversion makes of it,
    its chroma filtered as swscale filters chroma, and nothing else of the planes is resampled.

    The conversion is linear but for its offsets, so the change is converted once, as a picture of
    mid-grey plus the change, and the planes of mid-grey taken off again; a change beyond what such a
    picture holds (more than 127 levels in a channel) is converted as the difference of both
    pictures' planes instead."""
    shifted = _shifted(before, after, weight)
    if shifted is None:
        toward = after if weight == 1.0 else np.clip(_weighted(before, after, weight) + before, 0, 255)
        return _changed_by_both(planes, matrix, colour_range, before, toward.astype(np.uint8, copy=False))
    converted = rgb_planes(shifted, matrix, colour_range)
    return _carried(planes, converted, _grey_planes(*before.shape[:2], matrix, colour_range))


def _shifted(before: Plane, after: Plane, weight: float) -> Plane | None:
    """The change from ``before`` to ``after`` (times ``weight``, rounded) on mid-grey, as uint8 RGB;
    None where some channel changes by more than such a picture holds."""
    if weight == 1.0:
        shifted = np.subtract(after, before)
        shifted += np.uint8(_GREY)  # wraps where the change is out of range: then the signs disagree
        if np.any(np.greater_equal(after, before) != np.greater_equal(shifted, _GREY)):
            return None
        return shifted
    change = _weighted(before, after, weight)
    if int(change.min()) < -_GREY or int(change.max()) > 255 - _GREY:
        return None
    change += _GREY
    return change.astype(np.uint8)


def _weighted(before: Plane, after: Plane, weight: float) -> npt.NDArray[np.int16]:
    """``weight`` times the change from ``before`` to ``after``, rounded."""
    return np.rint(np.subtract(after, before, dtype=np.int16) * np.float32(weight)).astype(np.int16)


@functools.lru_cache(maxsize=KEPT_CONVERSIONS)
def _grey_planes(height: int, width: int, matrix: int, colour_range: int) -> tuple[Plane, Plane, Plane]:
    """The planes swscale makes of mid-grey RGB of this size in ``matrix`` and ``colour_range``: not
    one level each, as its chroma rounds one level lower in places (full range)."""
    grey = rgb_planes(np.full((height, width, 3), _GREY, np.uint8), matrix, colour_range)
    for plane in grey:
        plane.flags.writeable = False
    return grey


def _changed_by_both(
    planes: tuple[Plane, Plane, Plane], matrix: int, colour_range: int, before: Plane, after: Plane
) -> tuple[Plane, Plane, Plane]:
    """The planes with a change too large for one picture: both RGB pictures converted, and the
    difference of their planes added."""
    made = rgb_planes(after, matrix, colour_range)
    were = rgb_planes(before, matrix, colour_range)
    out = []
    for plane, new, old in zip(planes, made, were, strict=True):
        sums = np.subtract(new, old, dtype=np.int16)
        sums += plane
        np.clip(sums, 0, 255, out=sums)
        out.append(sums.astype(np.uint8))
    return out[0], out[1], out[2]


def _carried(
    planes: tuple[Plane, Plane, Plane],
    converted: tuple[Plane, Plane, Plane],
    grey: tuple[Plane, Plane, Plane],
) -> tuple[Plane, Plane, Plane]:
    """Each plane plus its converted change less the planes of no change, clipped."""
    out = []
    for plane, change, unchanged in zip(planes, converted, grey, strict=True):
        sums = np.add(plane, change, dtype=np.int16)
        sums -= unchanged
        np.clip(sums, 0, 255, out=sums)
        out.append(sums.astype(np.uint8))
    return out[0], out[1], out[2]
