"""``model: auto`` re-chosen as the load changes: each auto stream's moves between the shipped tiers.

The tier chosen when the source opened is where a stream starts; from then on its enhanced share
decides (``streamer.core.tiering``): it moves down a tier when the model stops keeping up (another
process took a core, more streams arrived), and tries the next better tier once it has had room to
spare for long enough, no other process holds the cores, and that tier's estimated cost fits. The
estimate scales the stream's own measured call time by the two tiers' cards, so trying a tier costs no
frame; a tier that then cannot
hold is left again, and tried only after ever longer waits. The service applies a move between calls
(``Pipeline.move_to``); each is logged once with its reason and shown in ``/streams`` and the metrics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from streamer.assets import AUTO_TIERS
from streamer.core.tiering import NEIGHBOUR_CORES, TierController, TierMove
from streamer.engine.tally import MISSED, Outcome, Tally
from streamer.engine.tiers import TierChoice, TierSelector, card_fps

__all__ = ["MOVES_SHOWN", "Moved", "Retier"]

MOVES_SHOWN = 10
"""The latest moves ``/streams`` shows of a stream."""


@dataclass(frozen=True, slots=True)
class Moved:
    """A move made: when (Unix seconds), from which model to which (as the models name themselves),
    whether down (to a cheaper tier), and why."""

    at: float
    tier_from: str
    tier_to: str
    down: bool
    reason: str


class Retier:
    """One auto stream's tier: the controller, and the moves it made."""

    def __init__(self, choice: TierChoice, fps: float, headroom: float, now: float) -> None:
        self.width, self.height = choice.width, choice.height
        self.fps = fps
        self.headroom = headroom
        self.controller = TierController(len(AUTO_TIERS), _index(choice.path), now)
        self.moves: list[Moved] = []
        self.ups = 0
        self.downs = 0

    @property
    def tier(self) -> Path:
        return AUTO_TIERS[self.controller.current]

    def due(
        self,
        now: float,
        tally: Tally,
        call_ms: float,
        workers: int,
        neighbours: float | None = None,
        ceiling: int = 0,
    ) -> TierMove | None:
        """The move to make now, if any, from the stream's counts, its current tier's call time and
        the cores other processes keep busy (``neighbours``; None: not known): none up while they
        hold :data:`~streamer.core.tiering.NEIGHBOUR_CORES` or more, nor above ``ceiling`` (the best
        tier the cards say keeps up with the streams now on these cores: ``Retier.ceiling``)."""
        missed = sum(tally.outcomes[outcome] for outcome in MISSED)
        here = self.controller.current
        self.controller.observe(now, tally.outcomes[Outcome.ENHANCED], missed)
        quiet = neighbours is None or neighbours < NEIGHBOUR_CORES
        better = here - 1
        return self.controller.decide(
            now, better >= ceiling and quiet and self._fits(better, call_ms, workers)
        )

    def ceiling(self, selector: TierSelector, settings: str, streams: int) -> int:
        """The best tier the calibrated cards say keeps up with ``streams`` streams of this size on these
        cores, decode and encode counted: a stream moves up no further; 0 (any) where they cannot say."""
        choice = self._by_cards(selector, settings, streams)
        return 0 if choice is None else _index(choice.path)

    def make_room(self, selector: TierSelector, settings: str, streams: int, now: float) -> TierMove | None:
        """The move down to the tier the cards say keeps up with ``streams`` streams of this size on
        these cores, where this stream runs a better one; None otherwise."""
        choice = self._by_cards(selector, settings, streams)
        if choice is None:
            return None
        reason = f"{streams} streams now share these cores; by the cards {choice.name} keeps up"
        return self.controller.down_to(_index(choice.path), now, reason)

    def _by_cards(self, selector: TierSelector, settings: str, streams: int) -> TierChoice | None:
        """The tier ``selector.start`` gives ``streams`` streams like this one (None: not calibrated)."""
        return selector.start(settings, self.width, self.height, self.fps, self.headroom, streams)

    def starved(self, now: float, below: float) -> float | None:
        """The share of the last window where it is under ``below`` on the cheapest tier (after
        ``due``, which counts the frames); None otherwise."""
        return self.controller.starved(now, below)

    def moved(self, before: int, move: TierMove, names: tuple[str, str]) -> Moved:
        """Record a move the stream made (``before``: the tier it left; ``names``: the two models')."""
        made = Moved(time.time(), names[0], names[1], move.down(before), move.reason)
        self.moves = [*self.moves[-(MOVES_SHOWN - 1) :], made]
        if made.down:
            self.downs += 1
        else:
            self.ups += 1
        return made

    def undo(self, before: int) -> None:
        """A move that could not be made: the controller is back on the tier the stream runs."""
        self.controller.current = before

    def as_dict(self) -> dict[str, object]:
        """What ``/streams`` adds to ``model_choice``: the moves made (the model it runs is ``model``)."""
        return {
            "moves": [
                {"at": round(m.at, 1), "from": m.tier_from, "to": m.tier_to, "reason": m.reason}
                for m in self.moves
            ],
        }

    def _fits(self, better: int, call_ms: float, workers: int) -> bool:
        """Whether tier ``better`` would run the stream's frames ``headroom`` times over: this tier's
        measured call time scaled by the two tiers' cards, its calls spread over the workers."""
        ours = card_fps(AUTO_TIERS[self.controller.current], self.width, self.height)
        theirs = card_fps(AUTO_TIERS[better], self.width, self.height)
        if ours is None or theirs is None or theirs <= 0 or call_ms <= 0 or self.fps <= 0:
            return False
        estimate_ms = call_ms * ours / theirs
        return estimate_ms / max(1, workers) * self.headroom <= 1000.0 / self.fps


def _index(path: Path) -> int:
    resolved = [p.resolve() for p in AUTO_TIERS]
    return resolved.index(path.resolve())
