"""How much memory a stream will hold, and whether the process has room for it.

A sidecar shares its pod's memory limit with other work, and one large camera (an 8K test pattern
POSTed by mistake) could otherwise take the whole process past it and get every stream killed. Each
stream's cost is estimated from its frame size before it runs: the frames it holds (ring buffer and the
bounded queues between stages), a streaming model's cached feature maps, and the model's activations for
one call (bounded by ``model.tile``). A stream that does not fit in what the others left is refused in
one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamer.errors import BudgetError

__all__ = ["ACTIVATION_BYTES_PER_PIXEL", "FRAME_BYTES_PER_PIXEL", "MemoryBudget", "StreamCost", "stream_cost"]

ACTIVATION_BYTES_PER_PIXEL = 480
"""A model call's working memory per input pixel where its card has no measured figure
(``activation_bytes_per_pixel``, written by ``streamer bench memory``): as the shipped models measure
150-560 (one call at 1920x1080); conv3d_t5 on a 3840x2160 stream with two intra-op threads
peaked 3.23 GB higher whole-frame than in 1024-pixel tiles, 455 bytes for each pixel more per call."""


@dataclass(frozen=True, slots=True)
class StreamCost:
    """A stream's estimated memory and what it is made of, in bytes."""

    width: int
    height: int
    frames: int
    features: int
    activations: int

    @property
    def total(self) -> int:
        return self.frames + self.features + self.activations

    def describe(self) -> str:
        return (
            f"{self.width}x{self.height} needs about {self.total / 2**20:.0f} MB (frames held "
            f"{self.frames / 2**20:.0f}, feature cache {self.features / 2**20:.0f}, model activations "
            f"{self.activations / 2**20:.0f})"
        )


FRAME_BYTES_PER_PIXEL = 1.5 + 3
"""A frame held: its 4:2:0 planes and the RGB made of them for the model."""


def stream_cost(
    width: int,
    height: int,
    *,
    frames_held: int,
    feature_bytes_per_pixel: float = 0.0,
    tile: int | None = None,
    tile_overlap: int = 0,
    activation_bytes_per_pixel: int = ACTIVATION_BYTES_PER_PIXEL,
    calls: int = 1,
) -> StreamCost:
    """The cost of a ``width`` x ``height`` stream holding ``frames_held`` frames at once (each as its
    decoder's 4:2:0 planes and the RGB a model is given: :data:`FRAME_BYTES_PER_PIXEL`), with a
    streaming model's ``feature_bytes_per_pixel`` (all its cached maps) and ``calls`` model calls under
    way at once, each of at most a tile."""
    pixels = width * height
    call = pixels
    if tile is not None and max(width, height) > tile:
        side = tile + 2 * tile_overlap
        call = min(pixels, min(width, side) * min(height, side))
    return StreamCost(
        width,
        height,
        frames=round(FRAME_BYTES_PER_PIXEL * pixels * frames_held),
        features=round(feature_bytes_per_pixel * pixels),
        activations=activation_bytes_per_pixel * call * calls,
    )


class MemoryBudget:
    """The process's memory: its own ``baseline`` (what it held before any stream: the interpreter,
    libraries, servers), what it kept after streams left (:meth:`settle`: models loaded since, the
    allocator's retention), and the streams admitted by their estimates; ``admit`` raises BudgetError
    for a stream that does not fit."""

    def __init__(self, total: int, baseline: int = 0) -> None:
        self.total = total
        self.baseline = baseline
        self.retained = 0
        """Resident beyond the baseline and the streams' estimates when last measured (:meth:`settle`)."""
        self._admitted: dict[str, StreamCost] = {}

    @property
    def used(self) -> int:
        """The streams' estimates together."""
        return sum(c.total for c in self._admitted.values())

    @property
    def held(self) -> int:
        """What the process holds by this account: baseline, retained and the streams' estimates."""
        return self.baseline + self.retained + self.used

    @property
    def left(self) -> int:
        return self.total - self.held

    def settle(self, resident: int | None) -> None:
        """Take the process's measured ``resident`` bytes (after memory was given back) as the truth:
        what it holds beyond the baseline and the streams' estimates is counted from now on."""
        if resident is not None:
            self.retained = max(0, resident - self.baseline - self.used)

    def admitted(self, key: str) -> StreamCost | None:
        return self._admitted.get(key)

    def admit(self, key: str, cost: StreamCost) -> None:
        """Admit (or re-admit at a new size) the stream ``key``."""
        before = self._admitted.pop(key, None)
        if cost.total > self.left:
            if before is not None:
                self._admitted[key] = before
            raise BudgetError(
                f"{cost.describe()}, but {max(0, self.left) / 2**20:.0f} MB of the "
                f"{self.total / 2**20:.0f} MB memory budget are left (runtime.memory_budget_mb; the "
                f"process itself holds {(self.baseline + self.retained) / 2**20:.0f} MB); lower its "
                "resolution, set model.tile (e.g. 1024), or raise the budget"
            )
        self._admitted[key] = cost

    def release(self, key: str) -> None:
        self._admitted.pop(key, None)
