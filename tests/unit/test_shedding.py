"""Which ``model: auto`` streams run without the model when the cheapest tier has no room for them."""

from __future__ import annotations

from streamer.serving.shedding import fits, shed_reason


def test_a_stream_gets_the_model_while_the_cheapest_tier_has_room_or_it_is_alone() -> None:
    assert fits(3, 2)
    assert not fits(3, 3)
    assert not fits(1, 4)
    assert fits(0, 0)  # alone: some of its frames enhanced is better than none
    assert not fits(0, 1)
    assert fits(None, 9)  # room unknown (not calibrated): the model, as before


def test_the_reason_names_the_tier_its_room_the_streams_and_what_ends_it() -> None:
    reason = shed_reason("stream_t5_quarter_sep", 3, 3, "640x360", 30.0)
    assert "stream_t5_quarter_sep" in reason
    assert "3 stream(s) of 640x360 at 30 fps" in reason
    assert "3 already run a model" in reason
    assert "until one of them ends" in reason
