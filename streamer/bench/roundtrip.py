"""A clip through libx264 and back: the damage a camera's encoder or a link does, for benches and training.

The quality bench degrades its clip this way (low bitrate, constant quality), and training data
(``export.data``, ``export.camera``) does the same, so all of them see one encoder path: an in-memory
mp4, yuv420p, the frames numbered at ``fps``.
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

__all__ = ["x264_roundtrip"]


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
