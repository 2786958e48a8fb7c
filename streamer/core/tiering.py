"""When a stream on ``model: auto`` moves to another tier: down when the model stops keeping up, up
when it has had room to spare for long enough, never flapping.

Tiers are numbered best quality first (0) to cheapest (``tiers - 1``). The controller is told, as
time goes on, how many frames due for the model were enhanced and how many the latency budget let
go (``observe``), and asked for a move (``decide``):

- **down** one tier once the enhanced share over the last ``window_s`` falls below ``low``, as soon
  as ``window_s`` of frames have been seen on the current tier;
- **up** one tier once the share has stayed at ``high`` or above for ``settle_s`` on the current
  tier and the better tier's estimated cost fits (``fits``: the caller's estimate, from its live
  call times and the tiers' cards); a tier left downwards within ``settle_s`` of moving up to it,
  or of starting on it, is tried again only after twice as long as the last time (up to
  ``max_wait_s``), so a tier that cannot hold never makes the stream flap;
- **down to** a given tier at once where the caller knows the stream cannot hold its own (``down_to``:
  a stream joined the others on these cores);
- **starved** where the share falls below a floor the caller gives on the cheapest tier: nowhere lower
  to go, which the caller answers by giving fewer streams the model (``streamer.serving.shedding``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["NEIGHBOUR_CORES", "NeighbourLoad", "TierController", "TierMove"]

NEIGHBOUR_CORES = 0.5
"""Other processes keeping this much of the host's cores busy hold back every move up: a better
tier's estimate reads the stream's own calls, which the cheapest tier keeps about as fast with a
neighbour as without, so only the host's CPU tells that the cores a better tier needs are taken."""


@dataclass(frozen=True, slots=True)
class TierMove:
    """A move to tier ``to``, with why."""

    to: int
    reason: str

    def down(self, current: int) -> bool:
        return self.to > current


class TierController:
    """Decides a stream's tier moves from its enhanced share; time is passed in (monotonic seconds)."""

    def __init__(
        self,
        tiers: int,
        start: int,
        now: float,
        *,
        window_s: float = 5.0,
        low: float = 0.95,
        high: float = 0.995,
        settle_s: float = 30.0,
        max_wait_s: float = 300.0,
    ) -> None:
        if not 0 <= start < tiers:
            raise ValueError(f"start tier {start} is not one of the {tiers} tiers")
        self.tiers = tiers
        self.current = start
        self.window_s = window_s
        self.low = low
        self.high = high
        self.settle_s = settle_s
        self.max_wait_s = max_wait_s
        self._moved_at = now
        self._seen: deque[tuple[float, int, int]] = deque()
        """(time, enhanced so far, missed so far), the newest last."""
        self._full_since: float | None = None
        """Since when the share has stayed at ``high`` or above on this tier."""
        self._wait: dict[int, float] = {}
        """Per tier: how long to hold before trying it again, after it could not hold."""
        self._came_up_at: float | None = now
        """When the stream started on the current tier or moved up to it (None: it came down to it): a
        start chosen from the cards is as much a guess as a move up, and as costly to repeat."""

    def observe(self, now: float, enhanced: int, missed: int) -> None:
        """Counts so far (they only grow) of frames the model enhanced and frames the budget let go."""
        self._seen.append((now, enhanced, missed))
        while len(self._seen) > 2 and self._seen[1][0] <= now - self.window_s:
            self._seen.popleft()

    def share(self, now: float) -> float | None:
        """The enhanced share of the frames due over the last ``window_s``; None before a window of
        frames has been seen on this tier, or when none was due."""
        if not self._seen or now - self._moved_at < self.window_s or now - self._seen[0][0] < self.window_s:
            return None
        _, enhanced0, missed0 = self._seen[0]
        _, enhanced1, missed1 = self._seen[-1]
        due = (enhanced1 - enhanced0) + (missed1 - missed0)
        return None if due <= 0 else (enhanced1 - enhanced0) / due

    def decide(self, now: float, fits: bool) -> TierMove | None:
        """The move to make now, if any; ``fits``: whether the next better tier's estimated cost fits
        the stream's frame period with room to spare."""
        share = self.share(now)
        if share is None:
            return None
        if share < self.low:
            self._full_since = None
            if self.current + 1 >= self.tiers:
                return None
            if self._came_up_at is not None and now - self._came_up_at < self.settle_s:
                last = self._wait.get(self.current, self.settle_s)
                self._wait[self.current] = min(self.max_wait_s, 2 * last)
            return self._move(
                self.current + 1, now, f"enhanced {share:.0%} over the last {self.window_s:g} s"
            )
        if share < self.high:
            self._full_since = None
            return None
        if self._full_since is None:
            self._full_since = now
        held = now - self._full_since
        wanted = max(self.settle_s, self._wait.get(self.current - 1, 0.0))
        if self.current == 0 or held < wanted or not fits:
            return None
        return self._move(
            self.current - 1, now, f"enhanced {share:.0%} for {held:.0f} s and the tier's cost fits"
        )

    def down_to(self, to: int, now: float, reason: str) -> TierMove | None:
        """A move down to tier ``to`` at once, for a reason the share has not shown yet (more streams
        now share the cores); None where the stream runs that tier or a cheaper one already."""
        if not 0 <= to < self.tiers:
            raise ValueError(f"tier {to} is not one of the {self.tiers} tiers")
        return self._move(to, now, reason) if to > self.current else None

    def starved(self, now: float, below: float) -> float | None:
        """The share over the last ``window_s`` where the stream runs the cheapest tier and it is under
        ``below`` (there is no tier left to move down to); else None. A window of frames is seen again
        before the next answer, so one starved window is reported once."""
        if self.current + 1 < self.tiers:
            return None
        share = self.share(now)
        if share is None or share >= below:
            return None
        self._moved_at = now  # a window from here: what follows a shed stream, not what led to it
        self._seen.clear()
        return share

    def _move(self, to: int, now: float, reason: str) -> TierMove:
        self._came_up_at = now if to < self.current else None
        self.current = to
        self._moved_at = now
        self._full_since = None
        self._seen.clear()
        return TierMove(to, reason)


class NeighbourLoad:
    """The cores other processes kept busy over the last ``window_s``: the host's busy CPU seconds
    less this process's, per second, from samples fed as time goes on (monotonic seconds)."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, float, float]] = deque()

    def observe(self, now: float, host_s: float | None, process_s: float) -> float | None:
        """The host's and this process's busy CPU seconds so far; returns :meth:`cores`. A host figure
        of None (none to read) forgets what was seen: not known."""
        if host_s is None:
            self._samples.clear()
            return None
        self._samples.append((now, host_s, process_s))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()
        return self.cores()

    def cores(self) -> float | None:
        """Other processes' busy cores over the window; None before samples span half of it."""
        if len(self._samples) < 2:
            return None
        (t0, host0, own0), (t1, host1, own1) = self._samples[0], self._samples[-1]
        if t1 - t0 < self.window_s / 2:
            return None
        return max(0.0, ((host1 - host0) - (own1 - own0)) / (t1 - t0))
