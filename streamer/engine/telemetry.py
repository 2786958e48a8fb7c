"""The stages a frame passes through, timed per stream; the pipeline reports to a plain callable.

The default observer discards everything, so library users and tests pay nothing; the service binds
one per stream that feeds its Prometheus histograms.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

__all__ = ["Stage", "StageObserver", "ignore"]


class Stage(enum.Enum):
    DECODE = "decode"
    """Decode and conversion to RGB of one frame, in the source's thread."""
    WINDOW_WAIT = "window_wait"
    """From a frame's arrival to its window being complete: the lookahead a center window waits for."""
    GATE = "gate"
    """The motion gate's decision on one window."""
    INFERENCE = "inference"
    """From a window's submission to the shared model to its enhanced frame: batching wait included."""
    ENCODE = "encode"
    """One write to the sink (encode and mux, or hand-off to the players)."""
    END_TO_END = "end_to_end"
    """From a frame's arrival to its write returning."""


StageObserver = Callable[[Stage, float], None]
"""Told how many seconds one frame (or window) spent in a stage."""


def ignore(stage: Stage, seconds: float) -> None:
    """The observer that records nothing."""
