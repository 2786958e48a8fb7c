"""A clip through libx264 and back: the damage a camera's encoder or a link does, for benches and training.

The quality bench degrades its clip this way (low bitrate, constant quality), and training data
(``export.data``, ``export.camera``) does the same, so all of them see one encoder path: an in-memory
mp4, yuv420p, the frames numbered at ``fps``. :func:`crf_roundtrip` is a camera's encoder at constant
quality, :func:`h264_roundtrip` a link at a low bitrate scaled to the clip's size and rate.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt

from streamer.errors import ConfigError
from streamer.media.colour import BT601

__all__ = ["H264_BITS_PER_PIXEL", "crf_roundtrip", "h264_roundtrip", "x264_roundtrip"]

H264_BITS_PER_PIXEL = 200_000 / (640 * 272 * 25)
"""200 kbit/s for bikes.mp4 (640x272, 25 fps), inside export.data's training range once scaled by area;
other sizes and rates get the same bits per pixel."""


def x264_roundtrip(
    clip: npt.NDArray[np.uint8],
    fps: Fraction,
    options: Mapping[str, str],
    bit_rate: int | None = None,
    keep: Path | None = None,
) -> tuple[npt.NDArray[np.uint8], float]:
    """``clip`` (N, H, W, 3) RGB with even sides, encoded with ``options`` (and ``bit_rate`` when given)
    and decoded again; and the kbit/s the encode took. The stream is BT.601 tv range, tagged so (the
    matrix PyAV converts RGB with), so a reader that goes by the tags reads the RGB decoded here. With
    ``keep``, the mp4 is written there too: the stream a camera would send."""
    n, h, w = clip.shape[:3]
    if h % 2 or w % 2:
        raise ConfigError(f"x264 at 4:2:0 needs even sides; got {w}x{h}: crop the clip first")
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps, options=dict(options))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.colorspace, stream.codec_context.color_range = BT601, 1
        if bit_rate is not None:
            stream.bit_rate = bit_rate
        for i, pixels in enumerate(clip):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")
            frame.pts, frame.time_base = i, 1 / fps
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    kbps = len(buffer.getvalue()) * 8 / (n / float(fps)) / 1000
    if keep is not None:
        keep.write_bytes(buffer.getvalue())
    buffer.seek(0)
    with av.open(buffer, "r") as reader:
        decoded = np.stack([f.to_ndarray(format="rgb24") for f in reader.decode(video=0)]).astype(np.uint8)
    return decoded, kbps


def crf_roundtrip(
    clip: npt.NDArray[np.uint8], fps: Fraction, crf: int, keep: Path | None = None
) -> tuple[npt.NDArray[np.uint8], float]:
    """The clip through libx264 at constant quality ``crf`` (a camera's GOP of 2 s, no B-frames) and
    decoded again, and the kbit/s it took; with ``keep``, the stream written there too."""
    options = {"preset": "veryfast", "bf": "0", "crf": str(crf), "g": str(max(1, round(2 * float(fps))))}
    return x264_roundtrip(clip, fps, options, keep=keep)


def h264_roundtrip(
    clean: npt.NDArray[np.uint8], fps: Fraction, keep: Path | None = None
) -> tuple[npt.NDArray[np.uint8], float]:
    """The clip encoded by libx264 at the low bitrate and decoded again, and the kbit/s it really took;
    with ``keep``, the stream written there too."""
    _, h, w = clean.shape[:3]
    # A live encoder's settings (no B-frames, a fast preset), as export.data trains on.
    rate = round(H264_BITS_PER_PIXEL * w * h * float(fps))
    return x264_roundtrip(clean, fps, {"preset": "veryfast", "bf": "0"}, bit_rate=rate, keep=keep)
