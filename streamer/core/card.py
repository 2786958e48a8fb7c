"""The "no signal" card a live output shows while its camera is gone, drawn at any frame size.

Dim grey with NO SIGNAL in block letters across the middle third: unmistakable on a wall of monitors,
cheap for any encoder, and drawn from a 5x7 glyph table so no font or imaging library is needed.
"""

from __future__ import annotations

import numpy as np

from streamer.frame import Pixels

__all__ = ["no_signal_card"]

_GLYPHS = {
    "N": ("10001", "11001", "10101", "10011", "10001", "10001", "10001"),
    "O": ("01110", "10001", "10001", "10001", "10001", "10001", "01110"),
    "S": ("01111", "10000", "10000", "01110", "00001", "00001", "11110"),
    "I": ("11111", "00100", "00100", "00100", "00100", "00100", "11111"),
    "G": ("01111", "10000", "10000", "10111", "10001", "10001", "01110"),
    "A": ("01110", "10001", "10001", "11111", "10001", "10001", "10001"),
    "L": ("10000", "10000", "10000", "10000", "10000", "10000", "11111"),
    " ": ("00000",) * 7,
}
_TEXT = "NO SIGNAL"
_BACKGROUND = 40
_INK = 200


def _bitmap(text: str) -> np.ndarray:
    """The text as a 7-row boolean bitmap, one blank column between letters."""
    rows = ["0".join(_GLYPHS[c][r] for c in text) for r in range(7)]
    return np.array([[bit == "1" for bit in row] for row in rows], dtype=bool)


def no_signal_card(width: int, height: int) -> Pixels:
    """(height, width, 3) uint8 RGB, read-only; the text as large as fits in 80% of the width."""
    card = np.full((height, width, 3), _BACKGROUND, dtype=np.uint8)
    bitmap = _bitmap(_TEXT)
    scale = max(1, min(int(width * 0.8) // bitmap.shape[1], height // 3 // bitmap.shape[0]))
    text = np.kron(bitmap, np.ones((scale, scale), dtype=bool))
    th, tw = text.shape
    if th <= height and tw <= width:
        top, left = (height - th) // 2, (width - tw) // 2
        card[top : top + th, left : left + tw][text] = _INK
    card.flags.writeable = False
    return card
