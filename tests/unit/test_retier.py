"""Retier: an auto stream's tier moves, the better tier's cost estimated from the stream's own calls."""

from __future__ import annotations

from streamer.assets import AUTO_TIERS, STREAMING_QUARTER_MODEL
from streamer.core.tiering import NEIGHBOUR_CORES, TierMove
from streamer.engine.retier import Retier
from streamer.engine.tally import Outcome, Tally
from streamer.engine.tiers import TierChoice


def _retier() -> Retier:
    choice = TierChoice(STREAMING_QUARTER_MODEL, "stream_t5_quarter_sep", 640, 360, 30.0, 36.0, True, ())
    return Retier(choice, 30.0, 1.2, now=0.0)


def _run(retier: Retier, tally: Tally, seconds: int, call_ms: float) -> list[TierMove]:
    moves = []
    for second in range(seconds):
        tally.outcomes[Outcome.ENHANCED] += 30
        move = retier.due(float(second + 1), tally, call_ms, workers=2)
        if move is not None:
            moves.append(move)
    return moves


def test_a_stream_with_room_tries_the_next_better_tier_only_when_its_estimate_fits() -> None:
    slow, fast = _retier(), _retier()
    assert _run(slow, Tally(), 60, call_ms=500.0) == []  # the better tier would not keep up
    (move,) = _run(fast, Tally(), 60, call_ms=1.0)
    assert AUTO_TIERS[move.to].name == "stream_t5_lite_sep.onnx"


def test_no_better_tier_is_tried_while_other_processes_hold_the_cores() -> None:
    def run(neighbours: float | None) -> list[TierMove]:
        retier, tally, moves = _retier(), Tally(), []
        for second in range(60):
            tally.outcomes[Outcome.ENHANCED] += 30
            move = retier.due(float(second + 1), tally, 1.0, workers=2, neighbours=neighbours)
            if move is not None:
                moves.append(move)
        return moves

    assert run(neighbours=NEIGHBOUR_CORES) == []  # a neighbour's core: the stream stays where it holds
    assert len(run(neighbours=0.1)) == 1  # the host otherwise quiet: the better tier is tried
    assert len(run(neighbours=None)) == 1  # not known (no /proc/stat): the estimate alone decides


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
