"""The batch layout conversion: the one place T and C trade places."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.backend.base import Layout
from streamer.errors import FrameError
from streamer.layout import to_model_layout


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
