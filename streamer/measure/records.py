"""Figures written as JSON: benchmark results and the measured parts of a model card.

JSON has no inf or nan, and a measurement can be either (the PSNR of an output identical to its
original is inf); :func:`finite` writes them as null, so every file loads in any JSON reader.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite"]


def finite(value: Any) -> Any:
    """``value`` with every inf and nan float, at any depth of dicts, lists and tuples, made None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
