"""Scaling frames up for a super-resolution model's stream."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.errors import FrameError
from streamer.media.resize import upscale


def test_a_smooth_frame_scaled_up_keeps_its_values_and_size() -> None:
    y, x = np.mgrid[0:36, 0:50]
    frame = np.stack([x * 4, y * 6, (x + y) * 2], axis=-1).astype(np.uint8)
    up = upscale(frame, 2)
    assert up.shape == (72, 100, 3)
    assert up.dtype == np.uint8
    means = up.reshape(36, 2, 50, 2, 3).astype(np.float64).mean(axis=(1, 3))
    inner = (slice(2, -2), slice(2, -2))  # the border, where bicubic has no neighbours on one side
    assert np.abs(means[inner] - frame[inner]).max() <= 2.0


def test_factor_one_is_the_frame_itself() -> None:
    frame = np.zeros((4, 6, 3), np.uint8)
    assert upscale(frame, 1) is frame


@pytest.mark.parametrize(
    ("frame", "factor"),
    [
        (np.zeros((4, 6), np.uint8), 2),
        (np.zeros((4, 6, 3), np.float32), 2),
        (np.zeros((4, 6, 3), np.uint8), 0),
    ],
)
def test_bad_input_is_a_frame_error(frame: np.ndarray, factor: int) -> None:
    with pytest.raises(FrameError, match=r"\(H, W, 3\) uint8"):
        upscale(frame, factor)
