"""A recording played as a camera would send it: on the wall clock, and over and over.

:class:`Pacer` says when each frame is due, from its media time, so a file stands in for a live camera
(variable frame rates included: the timestamps set the pace, not a nominal rate). :class:`LoopTimeline`
shifts the timestamps of every pass after the first by the length of the passes before it, so a file
played in a loop gives sinks one timeline that only moves forward. Time is passed in; nothing here
waits or reads a file.
"""

from __future__ import annotations

from streamer.errors import ConfigError

__all__ = ["LoopTimeline", "Pacer"]


class Pacer:
    """When each frame of a recording is due on the wall clock.

    The first frame is due at once, each later one when as much wall time has passed as media time.
    A camera never sends a backlog, so a frame already later than ``max_late_s`` restarts the clock on
    itself; and it never goes silent because of a timestamp, so a frame due more than ``max_wait_s``
    after now does too.
    """

    def __init__(self, max_late_s: float = 1.0, max_wait_s: float = 10.0) -> None:
        if not max_late_s > 0 or not max_wait_s > 0:
            raise ConfigError(f"pacer limits must be positive seconds, got {max_late_s} and {max_wait_s}")
        self.max_late_s = max_late_s
        self.max_wait_s = max_wait_s
        self._offset: float | None = None
        """Wall time minus media time: a frame of media time t is due at t + offset."""

    def due(self, media_s: float, now: float) -> float:
        """The wall-clock time (the clock ``now`` is read from) at which the frame at ``media_s`` goes."""
        if self._offset is None:
            self._offset = now - media_s
        due = media_s + self._offset
        if -self.max_late_s <= due - now <= self.max_wait_s:
            return due
        self._offset = now - media_s
        return now


class LoopTimeline:
    """Timestamps of a recording played over and over, continuing across every restart.

    :meth:`place` takes each frame's PTS (and duration, in the same time base) in the order decoded and
    returns the PTS to send; after :meth:`restart` the next pass's first frame lands where the last
    pass ended (its latest PTS plus that frame's duration; without one, the step between the last two
    frames, else ``default_step``). A frame without PTS stays without.
    """

    def __init__(self, default_step: int) -> None:
        if default_step < 1:
            raise ConfigError(f"a loop's default frame step must be at least 1 tick, got {default_step}")
        self.default_step = default_step
        self._offset = 0
        self._end: int | None = None
        """Where the pass so far ends on the output timeline: its latest PTS plus one frame."""
        self._last: int | None = None
        self._resume: int | None = None
        """Set by ``restart``: where the next frame with a PTS goes."""
        self.frames = 0
        """Frames placed in the current pass."""
        self.passes = 1

    def place(self, pts: int | None, duration: int | None = None) -> int | None:
        self.frames += 1
        if pts is None:
            return None
        if self._resume is not None:
            self._offset, self._resume, self._last = self._resume - pts, None, None
        shifted = pts + self._offset
        if duration is not None and duration > 0:
            step = duration
        elif self._last is not None and shifted > self._last:
            step = shifted - self._last
        else:
            step = self.default_step
        self._end = shifted + step if self._end is None else max(self._end, shifted + step)
        self._last = shifted
        return shifted

    def restart(self) -> None:
        """The file starts again from its beginning."""
        if self._end is not None:
            self._resume = self._end
        self.frames = 0
        self.passes += 1
