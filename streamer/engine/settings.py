"""How one stream runs, fixed for its life: the pipeline's tuning keywords as one frozen value.

The pipeline takes them as keyword arguments and hands this one value to the parts that read them
(the model binding, the inference stage), so a new setting is a field here, not a parameter threaded
through each part.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamer.core.gate import SkipAction

__all__ = ["PipelineSettings"]


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """A stream's settings; the defaults are the pipeline's keyword defaults."""

    on_skip: SkipAction = SkipAction.REUSE
    """What a frame whose window the gate skips shows: the last output, or itself."""
    max_batch: int = 1
    """Windows of this stream one model call may take (at least one)."""
    queue_size: int = 8
    """Capacity of each hand-off between the stages (work, output)."""
    ring_capacity: int | None = None
    """Frames the ring keeps; None: as many as a window can span."""
    tile: int | None = None
    """Frames larger than this on a side run on overlapping tiles of this size; None: whole."""
    tile_overlap: int = 32
    warm_up: bool | None = None
    """Run the model once at the stream's size before the first frame; None: on GPU providers."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_batch", max(1, self.max_batch))
