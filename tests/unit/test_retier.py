"""Retier: an auto stream's tier moves, the better tier's cost estimated from the stream's own calls."""

from __future__ import annotations

from pathlib import Path

from streamer.assets import AUTO_TIERS, STREAMING_QUARTER_MODEL
from streamer.backend.base import Backend
from streamer.backend.onnx import OnnxBackend
from streamer.core.tiering import NEIGHBOUR_CORES, TierMove
from streamer.engine.retier import Retier
from streamer.engine.tally import Outcome, Tally
from streamer.engine.tiers import Rate, TierChoice, TierSelector


def _retier() -> Retier:
    choice = TierChoice(STREAMING_QUARTER_MODEL, "stream_t5_quarter_sep", 640, 360, 30.0, 36.0, True, ())
    return Retier(choice, 30.0, 1.2, now=0.0)


def _run(
    retier: Retier,
    tally: Tally,
    seconds: int,
    call_ms: float,
    neighbours: float | None = None,
    ceiling: int = 0,
) -> list[TierMove]:
    """Every frame enhanced for ``seconds``: the moves ``due`` makes, as the service asks each second."""
    moves = []
    for second in range(seconds):
        tally.outcomes[Outcome.ENHANCED] += 30
        move = retier.due(float(second + 1), tally, call_ms, 2, neighbours, ceiling)
        if move is not None:
            moves.append(move)
    return moves


def test_a_stream_with_room_tries_the_next_better_tier_only_when_its_estimate_fits() -> None:
    slow, fast = _retier(), _retier()
    assert _run(slow, Tally(), 60, call_ms=500.0) == []  # the better tier would not keep up
    (move,) = _run(fast, Tally(), 60, call_ms=1.0)
    assert AUTO_TIERS[move.to].name == "stream_t5_lite_sep.onnx"


def test_no_better_tier_is_tried_while_other_processes_hold_the_cores() -> None:
    # a neighbour's core: the stream stays where it holds
    assert _run(_retier(), Tally(), 60, 1.0, neighbours=NEIGHBOUR_CORES) == []
    assert len(_run(_retier(), Tally(), 60, 1.0, neighbours=0.1)) == 1  # the host otherwise quiet
    assert len(_run(_retier(), Tally(), 60, 1.0, neighbours=None)) == 1  # not known: the estimate decides


def test_no_better_tier_is_tried_above_the_ceiling_the_cards_give_the_streams_on_these_cores() -> None:
    quarter = AUTO_TIERS.index(STREAMING_QUARTER_MODEL)
    # the cards keep these streams on the quarter tier at best
    assert _run(_retier(), Tally(), 60, 1.0, ceiling=quarter) == []
    (move,) = _run(_retier(), Tally(), 60, 1.0, ceiling=quarter - 1)
    assert move.to == quarter - 1


CEILING_CARDS = {"stream_t5": 20.0, "stream_t5.int8": 20.0, "stream_t5_lite": 20.0}
CEILING_CARDS |= {"stream_t5_lite_sep": 42.0, "stream_t5_quarter_sep": 180.0, "stream_t5_tiny": 250.0}
"""Each tier's fps at 640x360 for the ceiling's test: beside the host work (``HOST_FPS``) at headroom 1.2,
stream_t5_lite_sep keeps one stream (40 fps needed alone), the quarter tier three (154), the tiny tier four
(240)."""


def test_the_ceiling_counts_the_streams_on_these_cores() -> None:
    def measure(backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
        return Rate(CEILING_CARDS[backend.info.name])  # this machine as fast as the cards

    def cards(path: Path, width: int, height: int) -> float | None:
        return CEILING_CARDS[path.stem]

    selector = TierSelector(measure=measure, cards=cards)
    retier = _retier()
    assert retier.ceiling(selector, "", 4) == 0  # not calibrated: the cards cannot say, no ceiling
    selector.calibrate(lambda path: OnnxBackend(path, threads=1), "")
    assert AUTO_TIERS[retier.ceiling(selector, "", 1)].stem == "stream_t5_lite_sep"
    assert AUTO_TIERS[retier.ceiling(selector, "", 3)] == STREAMING_QUARTER_MODEL
    assert retier.ceiling(selector, "", 4) == len(AUTO_TIERS) - 1


def test_moves_are_recorded_with_their_direction_and_undone_when_they_cannot_be_made() -> None:
    retier = _retier()
    start = retier.controller.current
    made = retier.moved(
        start, TierMove(start - 1, "room to spare"), ("stream_t5_quarter_sep", "stream_t5_lite_sep")
    )
    assert (made.tier_from, made.tier_to, made.down, retier.ups, retier.downs) == (
        "stream_t5_quarter_sep",
        "stream_t5_lite_sep",
        False,
        1,
        0,
    )
    retier.controller.current = start - 1
    retier.undo(start)
    assert retier.tier == STREAMING_QUARTER_MODEL
    assert retier.as_dict()["moves"] == [
        {
            "at": round(made.at, 1),
            "from": "stream_t5_quarter_sep",
            "to": "stream_t5_lite_sep",
            "reason": "room to spare",
        }
    ]


def test_a_stream_makes_room_for_others_joining_by_moving_down_to_the_tier_the_cards_give_them_all() -> None:
    def measure(backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
        return Rate(240.0)  # the cheapest tier's card below: this machine as fast as the cards

    def cards(path: Path, width: int, height: int) -> float | None:
        per_360p = {"stream_t5": 20.0, "stream_t5.int8": 22.0, "stream_t5_lite": 27.0}
        return (per_360p | {"stream_t5_lite_sep": 40.0, "stream_t5_quarter_sep": 180.0}).get(path.stem, 240.0)

    selector = TierSelector(measure=measure, cards=cards)
    retier = _retier()  # on the quarter tier, 640x360 at 30 fps, headroom 1.2: 36 fps a stream
    assert retier.make_room(selector, "", 4, now=1.0) is None  # not calibrated: nothing known to go by
    selector.calibrate(lambda path: OnnxBackend(path, threads=1), "")
    assert retier.make_room(selector, "", 1, now=2.0) is None  # never up: that waits for its own calls
    # 180 fps beside three streams' host work (360 fps alone): 1 / (1/180 + 1/360) = 120 = 3 x 36 fps
    assert retier.make_room(selector, "", 3, now=3.0) is None
    move = retier.make_room(selector, "", 4, now=4.0)
    assert move is not None
    assert (move.to, move.reason) == (
        len(AUTO_TIERS) - 1,
        "4 streams now share these cores; by the cards stream_t5_tiny keeps up",
    )
    assert retier.tier == AUTO_TIERS[-1]
    assert retier.make_room(selector, "", 4, now=5.0) is None  # there already
