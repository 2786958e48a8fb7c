"""The output clock of live outputs: strictly increasing 90 kHz timestamps that follow media time.

RTSP players and recorders want timestamps that never go back; a camera's restart after a reconnect
does not get to break that. The RTSP sink and the shared encoder (:mod:`streamer.sinks.encoder`) both
stamp frames with it.
"""

from __future__ import annotations

from fractions import Fraction

from streamer.frame import Frame

__all__ = ["MAX_STEP_S", "TIME_BASE", "OutputClock"]

TIME_BASE = Fraction(1, 90_000)
MAX_STEP_S = 1.0
"""A gap in media time longer than this between two frames is written as one frame period."""


class OutputClock:
    """Strictly increasing output PTS (in :data:`TIME_BASE`) that follow the frames' media time.

    Each frame advances the clock by its distance in media time from the frame before, or by one frame
    period when that distance is unknown, not positive, longer than :data:`MAX_STEP_S` or across a
    discontinuity: the input's PTS may restart or jump, the output's never do.
    """

    def __init__(self, fps: Fraction) -> None:
        self.period = 1 / float(fps) if fps > 0 else 1 / 30
        self._pts = -1
        self._last: float | None = None

    def advance(self, frame: Frame) -> int:
        now, before = frame.time, self._last
        step = self.period
        if (
            now is not None
            and before is not None
            and not frame.discontinuity
            and 0 < now - before <= MAX_STEP_S
        ):
            step = now - before
        self._last = now
        self._pts = 0 if self._pts < 0 else self._pts + max(1, round(step / TIME_BASE))
        return self._pts
