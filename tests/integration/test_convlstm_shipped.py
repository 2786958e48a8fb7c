"""The shipped recurrent model on what its training data lacked: pixels that change abruptly on a still
background (an on-screen clock, a light switched on). Its learned blend with the previous frame once
left such a block halfway between its two values; the guard must keep it as the per-frame model does."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.assets import ASSETS
from streamer.backend.onnx import OnnxBackend


def _flipping_blocks(rng: np.random.Generator) -> np.ndarray:
    """(1, 1, 3, 64, 160) uint8: mid-grey with a strip of eight 16x16 blocks, each black or white."""
    frame = np.full((3, 64, 160), 120, np.uint8)
    for k, white in enumerate(rng.integers(0, 2, 8)):
        frame[:, 8:24, 8 + 16 * k : 24 + 16 * k] = 255 if white else 0
    return frame[None, None]


@pytest.mark.parametrize("name", ["convlstm", "convlstm_strength"])
def test_a_block_that_flips_between_black_and_white_is_not_blended_with_its_last_value(name: str) -> None:
    backend = OnnxBackend(ASSETS / f"{name}.onnx")
    try:
        rng = np.random.default_rng(0)
        state = backend.initial_state(1, 64, 160)
        worst = 0.0
        for _ in range(12):
            frame = _flipping_blocks(rng)
            out, state = backend.step(frame, state)
            # The inner 8x8 of each block: its edges are the model's to soften.
            error = np.abs(out[0].astype(np.int16) - frame[0, 0].astype(np.int16))[:, 12:20]
            blocks = error[:, :, 8:136].reshape(3, 8, 8, 16)[:, :, :, 4:12]
            worst = max(worst, float(blocks.mean(axis=(0, 1, 3)).max()))
        assert worst < 3.0, f"a block came out {worst:.1f} levels off on average: the previous frame ghosts"
    finally:
        backend.close()
