"""Cuts one stream into hyperframe windows: fixed T, stride S, output slot center or last.

The windower deals in frame indices only and returns decisions (:class:`WindowTask`); the pipeline
gathers the pixels from the ring buffer. Its invariants, checked by property tests:

- every frame pushed gets exactly one task, in push order;
- a task's indices all lie in the target's run: no window spans a discontinuity (a flagged frame,
  an index gap, a resolution change, a PTS that goes back or jumps forward by more than ``max_gap``);
- at a run's start and end, missing neighbours are filled by the edge policy instead of dropping frames.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from streamer.errors import ConfigError
from streamer.frame import Colour, Frame

__all__ = ["EdgePolicy", "OutputPosition", "WindowTask", "Windower"]


class OutputPosition(enum.Enum):
    """Which frame of the window the model enhances."""

    CENTER = "center"
    """Slot T//2: the model sees T//2 future frames, which costs T//2 frames of lookahead latency."""
    LAST = "last"
    """Slot T-1: causal, no lookahead."""

    def slot(self, t: int) -> int:
        return t // 2 if self is OutputPosition.CENTER else t - 1


class EdgePolicy(enum.Enum):
    """How slots before a run's first frame or after its last are filled."""

    REPLICATE = "replicate"
    """Repeat the edge frame: a, a, a, b, c."""
    MIRROR = "mirror"
    """Reflect about the edge frame: c, b, a, b, c. Needs frames past the target at a run's start."""


@dataclass(frozen=True, slots=True)
class WindowTask:
    """The decision for one input frame: which frames form its window, and whether to enhance it."""

    target: int
    """Index of the frame this task outputs."""
    indices: tuple[int, ...]
    """T frame indices, in slot order, all inside the target's run."""
    slot: int
    """Position of ``target`` inside ``indices``."""
    run: int
    """Counter of runs: it grows by one at every discontinuity."""
    enhance: bool
    """False for frames off the stride grid: they leave unenhanced."""


class Windower:
    """Pure window planner for one stream; push frames in order, flush at end of stream."""

    def __init__(
        self,
        t: int,
        stride: int = 1,
        position: OutputPosition = OutputPosition.CENTER,
        edge: EdgePolicy = EdgePolicy.REPLICATE,
        max_gap: float | None = 1.0,
    ) -> None:
        if t < 1:
            raise ConfigError(f"window.t must be at least 1, got {t}")
        if stride < 1:
            raise ConfigError(f"window.stride must be at least 1, got {stride}")
        if max_gap is not None and max_gap <= 0:
            raise ConfigError(f"window.max_gap must be positive seconds or null, got {max_gap}")
        self.t = t
        self.stride = stride
        self.position = position
        self.edge = edge
        self.max_gap = max_gap
        self.slot = position.slot(t)
        self._run = -1
        self._open = False
        self._start = 0
        self._latest = -1
        self._next = 0
        self._format: tuple[int, int, Colour | None] | None = None
        self._time: float | None = None
        self.discontinuities = 0
        """Runs ended by a discontinuity (not counting the stream's first run)."""

    @property
    def lookahead(self) -> int:
        """Frames after the target a window needs in steady state: the latency the position costs."""
        return self.t - 1 - self.slot

    @property
    def history(self) -> int:
        """How many of the most recently pushed frames a ring must hold for every task to be gathered.

        A window spans at most 2T-1 frames (mirror padding at a run's start), and the tasks that close a
        run are returned by the push of the next run's first frame: one more.
        """
        return 2 * self.t

    @property
    def pending(self) -> int:
        """Frames pushed whose task has not been returned yet (waiting for lookahead)."""
        return self._latest - self._next + 1 if self._open else 0

    @property
    def oldest_needed(self) -> int:
        """The lowest frame index a task still to come may reference; older frames can be released."""
        return max(self._start, self._next - self.slot) if self._open else self._latest + 1

    def push(self, frame: Frame) -> list[WindowTask]:
        """Add the next frame of the stream; returns the tasks that became ready, in order."""
        tasks: list[WindowTask] = []
        if self._open and self._breaks_run(frame):
            tasks.extend(self._close_run())
            self.discontinuities += 1
        if not self._open:
            self._open = True
            self._run += 1
            self._start = self._next = frame.index
        self._latest = frame.index
        self._format = (frame.height, frame.width, frame.planes_colour)
        self._time = frame.time
        tasks.extend(self._emit(final=False))
        return tasks

    def flush(self) -> list[WindowTask]:
        """End of stream: the tasks still waiting for lookahead, padded by the edge policy."""
        return self._close_run() if self._open else []

    def _breaks_run(self, frame: Frame) -> bool:
        # a new size, or a picture now RGB and now 4:2:0 planes (or planes in another colour)
        if (
            frame.discontinuity
            or frame.index != self._latest + 1
            or (frame.height, frame.width, frame.planes_colour) != self._format
        ):
            return True
        now, before = frame.time, self._time
        if now is None or before is None:
            return False
        return now <= before or (self.max_gap is not None and now - before > self.max_gap)

    def _close_run(self) -> list[WindowTask]:
        tasks = self._emit(final=True)
        self._open = False
        return tasks

    def _emit(self, final: bool) -> list[WindowTask]:
        tasks: list[WindowTask] = []
        while self._next <= self._latest:
            indices = self._indices(self._next, final)
            if indices is None:
                break
            enhance = (self._next - self._start) % self.stride == 0
            tasks.append(WindowTask(self._next, indices, self.slot, self._run, enhance))
            self._next += 1
        return tasks

    def _indices(self, target: int, final: bool) -> tuple[int, ...] | None:
        """The window's frame indices, or None while a needed frame has not arrived."""
        out = []
        for v in range(target - self.slot, target - self.slot + self.t):
            i = self._fill(v, final)
            if i > self._latest:
                return None
            out.append(i)
        return tuple(out)

    def _fill(self, v: int, final: bool) -> int:
        """Map a virtual index onto the run; past the newest frame only once the run is final."""
        start, end = self._start, self._latest
        if v >= start and (v <= end or not final):
            return v
        if self.edge is EdgePolicy.REPLICATE or (final and start == end):
            return start if v < start else end
        if not final:
            return 2 * start - v
        period = 2 * (end - start)
        r = (v - start) % period
        return start + (r if r <= end - start else period - r)
