"""What a stream's stages hand each other: a :class:`Work` per frame from ingest to inference, an
:class:`Output` per frame from inference to egress.

Frozen values, as every hand-off between stages is, so a stage never changes what another holds.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from streamer.core.gate import Region
from streamer.engine.tally import Outcome
from streamer.frame import Frame, Hyperframe

__all__ = ["Output", "Plan", "Work"]


class Plan(enum.Enum):
    """What ingest decided for a frame's window."""

    ENHANCE = "enhance"
    """The gate wants the model to run on it (the latency budget may still refuse)."""
    SKIP = "skip"
    """The gate found too little change: the last output is reused, or the frame passes through."""
    STRIDE = "stride"
    """The windower's stride leaves it out: the frame passes through."""
    SHED = "shed"
    """The stream runs without its model for now (``Pipeline.shed``): the frame passes through."""


@dataclass(frozen=True, slots=True)
class Work:
    """One frame's plan, in the order frames arrived."""

    frame: Frame
    plan: Plan
    run: int
    """The run (between discontinuities) the frame belongs to."""
    window: Hyperframe | None = None
    region: Region | None = None
    """Set for a region run: ``window`` holds the crop, and only ``region.paste`` replaces the last output."""
    weight: float = 1.0
    """The share of the model's change the frame gets (``streamer.core.blend``)."""


@dataclass(frozen=True, slots=True)
class Output:
    """One frame to write: the source frame, the frame sent for it and how it was made."""

    source: Frame
    frame: Frame
    outcome: Outcome
    handed_on: float = field(default_factory=time.monotonic)
    """When the frame left the model's stage: the budget learns the time from here to written."""
