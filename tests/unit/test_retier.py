"""Retier: an auto stream's tier moves, the better tier's cost estimated from the stream's own calls."""

from __future__ import annotations

from streamer.assets import AUTO_TIERS, STREAMING_QUARTER_MODEL, STREAMING_SEPARABLE_MODEL
from streamer.core.tiering import TierMove
from streamer.engine.retier import UP_MARGIN, Retier
from streamer.engine.tally import Outcome, Tally
from streamer.engine.tiers import TierChoice, card_fps


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


def test_a_better_tier_is_tried_only_with_room_beyond_the_headroom_a_start_needs() -> None:
    ratio = card_fps(STREAMING_QUARTER_MODEL, 640, 360) / card_fps(STREAMING_SEPARABLE_MODEL, 640, 360)
    meets_headroom = 1000.0 / 30.0 / 1.2 * 2 / ratio  # the call time at which the estimate just fits 1.2x
    assert _run(_retier(), Tally(), 60, call_ms=0.95 * meets_headroom) == []  # too little to spare
    assert len(_run(_retier(), Tally(), 60, call_ms=0.95 * meets_headroom / UP_MARGIN)) == 1


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
