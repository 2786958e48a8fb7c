"""swscale between 4:2:0 planes and rgb24, told the planes' matrix and range.

Apart from :mod:`streamer.colour` so that a frame carrying planes (``streamer.frame.Yuv420``) can make
its RGB on first use without the two modules importing each other: nothing here imports streamer.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from av.video.frame import VideoFrame
from av.video.reformatter import ColorRange, Colorspace

__all__ = ["SWSCALE", "planes_frame", "planes_rgb"]

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
    rgb = planes_frame(y, u, v, matrix, colour_range).to_ndarray(
        format="rgb24",
        src_colorspace=SWSCALE[matrix],
        src_color_range=colour_range,
        dst_color_range=ColorRange.JPEG,
    )
    pixels: Plane = np.ascontiguousarray(rgb, dtype=np.uint8)
    return pixels
