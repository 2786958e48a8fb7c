"""Keeps a live output's clock while its camera is silent: the last frame again, then a "no signal" card.

An NVR or player reading the RTSP or WHEP output times out and reconnects when frames stop; a camera
that stalls or reconnects must not take the output with it. While the output has sent nothing for
``start_periods`` frame periods *and* the source has delivered nothing for as long (a slow model alone
does not count: its frames pass through on the latency budget), a gap begins: the output repeats its
last frame every period, and after ``card_after_s`` of gap shows the card instead. The gap ends when a
real frame is sent. A frame that comes out of a gap more than ``stale_s`` after it arrived (the newest
ones a centre window was still waiting for when the camera went, released when it reconnects) is
history: the output moved past it, so it is not sent; after a short hiccup the frames held meanwhile go
out, late by a frame or two, rather than be lost. Time is passed in; nothing here waits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from streamer.errors import ConfigError

__all__ = ["Filler", "KeepAlive", "KeepAliveStats"]

_SLACK_S = 0.001
"""A filler this close to due is sent: timers wake a little early as often as late."""


class Filler(enum.Enum):
    REPEAT = "repeat"
    """The last frame sent, again."""
    CARD = "card"
    """The no-signal card."""


@dataclass(frozen=True, slots=True)
class KeepAliveStats:
    gaps: int
    """Times the source went silent long enough for the output to keep its clock alone."""
    repeats: int
    cards: int
    stale: int
    """Frames held back because they arrived before a gap that the output has already filled."""


class KeepAlive:
    """Decides when a live output sends a filler frame, and which."""

    def __init__(
        self,
        period_s: float,
        card_after_s: float | None = 10.0,
        start_periods: float = 1.5,
        stale_s: float = 1.0,
    ) -> None:
        if not period_s > 0:
            raise ConfigError(f"keep-alive frame period must be positive seconds, got {period_s}")
        if card_after_s is not None and not card_after_s >= 0:
            raise ConfigError(f"keepalive.card_after_s must be >= 0 or null, got {card_after_s}")
        if not start_periods >= 1:
            raise ConfigError(f"a keep-alive gap starts after at least one frame period, got {start_periods}")
        self.period_s = period_s
        self.card_after_s = card_after_s
        self.start_s = start_periods * period_s
        self.stale_s = stale_s
        self._sent: float | None = None
        self._received: float | None = None
        self._gap_since: float | None = None
        self._next: float | None = None
        self._gaps = 0
        self._repeats = 0
        self._cards = 0
        self._stale = 0

    @property
    def in_gap(self) -> bool:
        return self._gap_since is not None

    def received(self, now: float) -> None:
        """The source delivered a frame."""
        self._received = now

    def sent(self, now: float) -> None:
        """A real frame went out: a gap, if any, is over."""
        self._sent = now
        self._gap_since = None
        self._next = None

    def stale(self, arrival: float, now: float) -> bool:
        """Whether a frame that arrived at ``arrival``, due out at ``now``, is history (and counts it): it
        arrived before the gap being filled, more than ``stale_s`` ago."""
        if self._gap_since is None or arrival >= self._gap_since or now - arrival <= self.stale_s:
            return False
        self._stale += 1
        return True

    def due_in(self, now: float) -> float | None:
        """Seconds until a filler may be due (0: now); None before the first real frame, which a filler
        would have nothing to repeat of."""
        if self._sent is None:
            return None
        if self._next is not None:
            return max(0.0, self._next - now)
        quiet_since = max(self._sent, self._received if self._received is not None else self._sent)
        return max(0.0, quiet_since + self.start_s - now)

    def fill(self, now: float) -> Filler | None:
        """What to send at ``now``, if anything; a filler returned is taken as sent."""
        due = self.due_in(now)
        if due is None or due > _SLACK_S:
            return None
        if self._gap_since is None:
            self._gap_since = now
            self._gaps += 1
        late = self._next is None or now - self._next >= self.period_s  # behind: no burst to catch up
        self._next = (now if late or self._next is None else self._next) + self.period_s
        if self.card_after_s is not None and now - self._gap_since >= self.card_after_s:
            self._cards += 1
            return Filler.CARD
        self._repeats += 1
        return Filler.REPEAT

    def stats(self) -> KeepAliveStats:
        return KeepAliveStats(gaps=self._gaps, repeats=self._repeats, cards=self._cards, stale=self._stale)
