"""The batch layout conversion: the one place T and C trade places."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.backend.base import ChannelOrder, Layout
from streamer.contract.layout import from_model_channels, to_model_layout
from streamer.errors import FrameError


def _batch() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(2, 5, 3, 4, 6), dtype=np.uint8)


def test_ntchw_is_the_batch_itself() -> None:
    batch = _batch()
    assert to_model_layout(batch, Layout.NTCHW) is batch


def test_ncthw_puts_channel_before_time_without_copying() -> None:
    batch = _batch()
    out = to_model_layout(batch, Layout.NCTHW)
    assert out.shape == (2, 3, 5, 4, 6)
    assert np.shares_memory(out, batch)
    for b, t, c in [(0, 0, 0), (1, 4, 2), (0, 2, 1), (1, 3, 0)]:
        np.testing.assert_array_equal(out[b, c, t], batch[b, t, c])


def test_ncthw_keeps_dtype() -> None:
    batch = _batch().astype(np.float32)
    assert to_model_layout(batch, Layout.NCTHW).dtype == np.float32


@pytest.mark.parametrize("shape", [(5, 3, 4, 6), (1, 2, 5, 3, 4, 6)])
def test_wrong_rank_is_a_frame_error(shape: tuple[int, ...]) -> None:
    with pytest.raises(FrameError, match=r"\(B, T, C, H, W\)"):
        to_model_layout(np.zeros(shape, np.uint8), Layout.NCTHW)


def test_stacked_puts_each_frames_channels_together_frame_by_frame() -> None:
    batch = _batch()
    out = to_model_layout(batch, Layout.STACKED)
    assert out.shape == (2, 15, 4, 6)
    assert np.shares_memory(out, batch)
    for t in range(5):
        np.testing.assert_array_equal(out[:, 3 * t : 3 * t + 3], batch[:, t])


def test_nchw_is_the_one_frame_of_a_t1_window() -> None:
    batch = _batch()[:, :1]
    out = to_model_layout(batch, Layout.NCHW)
    assert out.shape == (2, 3, 4, 6)
    np.testing.assert_array_equal(out, batch[:, 0])
    with pytest.raises(FrameError, match=r"windows of one frame; got T=5"):
        to_model_layout(_batch(), Layout.NCHW)


@pytest.mark.parametrize("layout", list(Layout))
def test_bgr_reverses_the_channels_in_every_layout(layout: Layout) -> None:
    batch = _batch()[:, :1] if layout is Layout.NCHW else _batch()
    rgb = to_model_layout(batch, layout)
    bgr = to_model_layout(batch, layout, ChannelOrder.BGR)
    flipped = to_model_layout(batch[:, :, ::-1], layout)
    np.testing.assert_array_equal(bgr, flipped)
    assert not np.array_equal(bgr, rgb)


def test_a_bgr_output_comes_back_as_rgb() -> None:
    out = np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2)
    np.testing.assert_array_equal(from_model_channels(out, ChannelOrder.BGR)[:, 0], out[:, 2])
    assert from_model_channels(out, ChannelOrder.RGB) is out
