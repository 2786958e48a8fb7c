"""Between a stream's YUV and the frames' RGB, with the stream's own matrix and range.

An encoder fed RGB converts it as BT.601 tv range and writes no tags: a BT.709 or full-range input would come
out shifted (through an identity model a BT.709 tv-range input's Y would become about 0.87 Y + 15, up to 22
levels off). Sources decode each frame with the matrix and range it is tagged with; sinks encode with the
stream's :class:`~streamer.frame.Colour` and tag their output the same way. Each conversion is the one swscale
call PyAV makes anyway, told the matrix and range.

What a stream leaves unspecified, or states as a matrix swscale cannot apply, is assumed the way
players commonly guess it: BT.709 from :data:`HD_LINES` lines up, BT.601 below; tv range, except for
FFmpeg's full-range ``yuvj`` pixel formats. A sink tags its output with what it assumed, so an untagged
input comes out with the same YUV, tagged as such a player reads it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from av.video.codeccontext import VideoCodecContext
from av.video.frame import VideoFrame
from av.video.reformatter import ColorRange

from streamer.frame import Colour, Frame, Pixels, Yuv420
from streamer.media.planes import SWSCALE, convert, frame_planes, planes_frame, rgb_frame

__all__ = [
    "BT601",
    "BT709",
    "HD_LINES",
    "colour_of",
    "encoder_frame",
    "from_rgb",
    "resolve",
    "rgb_frame",
    "tag",
    "to_rgb",
    "yuv_frame",
    "yuv_of",
]

HD_LINES = 720
"""An unspecified matrix is BT.709 from this height up, BT.601 below."""

BT601, BT709 = 6, 1
"""AVColorSpace codes of the matrices an unspecified one is taken for (6 is SMPTE 170M: BT.601)."""

_RANGES = (ColorRange.MPEG, ColorRange.JPEG)


def colour_of(tagged: VideoFrame | VideoCodecContext) -> Colour:
    """What a decoded frame, or a decoder's stream, says of its colour; a ``yuvj`` format means pc range."""
    pix_fmt = tagged.format.name if isinstance(tagged, VideoFrame) else tagged.pix_fmt
    colour_range = tagged.color_range
    if colour_range not in _RANGES and pix_fmt is not None and pix_fmt.startswith("yuvj"):
        colour_range = int(ColorRange.JPEG)
    return Colour(tagged.colorspace, colour_range, tagged.color_primaries, tagged.color_trc)


def resolve(colour: Colour, height: int, unstated: int | None = None) -> Colour:
    """``colour`` with a matrix swscale applies and a range: where not stated (or not applicable),
    the ``unstated`` matrix, or by default BT.709 from :data:`HD_LINES` up and BT.601 below; tv range."""
    by_height = BT709 if height >= HD_LINES else BT601
    matrix = colour.matrix if colour.matrix in SWSCALE else unstated or by_height
    colour_range = colour.range if colour.range in _RANGES else ColorRange.MPEG
    return dataclasses.replace(colour, matrix=matrix, range=int(colour_range))


def to_rgb(frame: VideoFrame, unstated: int | None = None) -> Pixels:
    """A decoded frame as rgb24, read with its own matrix and range (:func:`resolve`d)."""
    colour = resolve(colour_of(frame), frame.height, unstated)
    rgb = convert(
        frame,
        format="rgb24",
        src_colorspace=SWSCALE[colour.matrix],
        src_color_range=colour.range,
        dst_color_range=ColorRange.JPEG,
    ).to_ndarray()
    pixels: Pixels = np.ascontiguousarray(rgb, dtype=np.uint8)
    return pixels


def from_rgb(pixels: Pixels, codec: VideoCodecContext) -> VideoFrame:
    """rgb24 pixels as a frame in the encoder's pixel format, made with the matrix and range it is
    tagged with (:func:`tag`), so players read back the RGB that went in."""
    colour = resolve(colour_of(codec), codec.height)
    return convert(
        rgb_frame(pixels),
        format=codec.pix_fmt,
        dst_colorspace=SWSCALE[colour.matrix],
        dst_color_range=colour.range,
    )


def planes_fit(pix_fmt: str | None, width: int, height: int) -> bool:
    """Whether decoded frames of this format and size hand on as 4:2:0 planes (:func:`yuv_of`)."""
    return pix_fmt in ("yuv420p", "yuvj420p") and not (width % 2 or height % 2)


def yuv_of(frame: VideoFrame, unstated: int | None = None) -> Yuv420 | None:
    """A decoded yuv420p (or yuvj420p) frame's planes as they lie in it, views and no copy, with its
    matrix and range (:func:`resolve`d): what a source hands a model that takes planes
    (``model.yuv420``) instead of :func:`to_rgb`'s conversion. None for other formats and odd sizes."""
    if not planes_fit(frame.format.name, frame.width, frame.height):
        return None
    y, u, v = frame_planes(frame)
    return Yuv420(y, u, v, resolve(colour_of(frame), frame.height, unstated))


def yuv_frame(yuv: Yuv420) -> VideoFrame:
    """4:2:0 planes as a yuv420p frame tagged with their matrix and range, the planes copied in."""
    return planes_frame(yuv.y, yuv.u, yuv.v, yuv.colour.matrix, yuv.colour.range)


def encoder_frame(frame: Frame, codec: VideoCodecContext) -> VideoFrame:
    """A frame for ``codec``: the 4:2:0 planes the frame leaves as (``Frame.planes``: a decoder's, or
    a model's change carried onto them) where they are in the encoder's format, size, matrix and range
    (a copy, no conversion); otherwise its RGB, converted (:func:`from_rgb`)."""
    colour = frame.planes_out
    if colour is not None and codec.pix_fmt == "yuv420p":
        made = resolve(colour_of(codec), codec.height)
        if (frame.width, frame.height, colour.matrix, colour.range) == (
            codec.width,
            codec.height,
            made.matrix,
            made.range,
        ):
            planes = frame.planes
            assert planes is not None
            return yuv_frame(planes)
    return from_rgb(frame.pixels, codec)


def tag(codec: VideoCodecContext, colour: Colour) -> None:
    """Tag an encoder (H.264's VUI, the container's colour box) with ``colour``, its matrix and range
    resolved for the encoder's height; call it once the size is set and before encoding starts."""
    resolved = resolve(colour, codec.height)
    codec.colorspace = resolved.matrix
    codec.color_range = resolved.range
    codec.color_primaries = resolved.primaries
    codec.color_trc = resolved.transfer
