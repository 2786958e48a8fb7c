"""Which ``model: auto`` streams run without the model when the cheapest tier has no room for them."""

from __future__ import annotations

import dataclasses

from streamer.assets import STREAMING_QUARTER_MODEL
from streamer.backend.onnx import OnnxBackend
from streamer.config import StreamConfig, load_config
from streamer.engine.tiers import Rate, TierChoice, TierProbe, TierSelector
from streamer.serving.shedding import Shedder, fits, shed_reason


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


class Pipeline:
    """What the shedder touches of a pipeline: whether it opened, and its shed reason."""

    def __init__(self) -> None:
        self.opened = False
        self.shed_reason: str | None = None

    def shed(self, reason: str | None) -> None:
        self.shed_reason = reason


@dataclasses.dataclass
class Stream:
    id: str
    config: StreamConfig
    choice: TierChoice | None
    pipeline: Pipeline = dataclasses.field(default_factory=Pipeline)
    done: bool = False


PROBE = TierProbe("stream_t5_quarter_sep", STREAMING_QUARTER_MODEL, 40.0, estimated=True)
CHOICE = TierChoice(STREAMING_QUARTER_MODEL, PROBE.name, 640, 360, 30.0, 36.0, False, (PROBE,))


def cameras(count: int, auto: bool = True) -> list[Stream]:
    """Streams not yet opened; with ``auto`` false, opened streams on a model named in their config."""
    config = load_config(
        None, {"streams": [{"id": "x", "source": {"kind": "synthetic"}}], "model.path": "auto"}
    )
    streams = [Stream(f"cam{k}", config.streams[0], None) for k in range(count)]
    for stream in streams:
        stream.pipeline.opened = not auto
    return streams


def open_all(shedder: Shedder, streams: list[Stream], now: float) -> None:
    """Each auto stream's source opens in turn: its tier is chosen, then the shedder asked."""
    for stream in streams:
        stream.choice = CHOICE
        shedder.opened(stream, shedder.enhanced(stream, streams), now)
        stream.pipeline.opened = True


def calibrated(room: int) -> TierSelector:
    """A selector whose cheapest tier has room for ``room`` streams of 640x360 at 30 fps (their host
    work not counted)."""
    selector = TierSelector(
        measure=lambda *_: Rate(30.0 * room + 1.0), host=None, cards=lambda *_: 30.0 * room + 1.0
    )
    model = cameras(1)[0].config.model
    selector.calibrate(lambda path: OnnxBackend(path, threads=1), model.session_key())
    return selector


def test_streams_past_the_cards_room_pass_through_and_get_the_model_back_as_others_end() -> None:
    shedder = Shedder(calibrated(room=2))
    streams = cameras(3)
    open_all(shedder, streams, now=0.0)
    assert [s.pipeline.shed_reason is None for s in streams] == [True, True, False]
    assert "keeps up with 2 stream(s) of 640x360 at 30 fps" in str(streams[2].pipeline.shed_reason)
    shedder.unshed(streams, now=1.0)
    assert streams[2].pipeline.shed_reason is not None  # no room yet
    streams[0].done = True
    shedder.unshed(streams, now=2.0)
    assert streams[2].pipeline.shed_reason is None


def test_a_starved_stream_sheds_the_last_added_and_the_cores_hold_one_fewer_until_the_retry() -> None:
    shedder = Shedder(calibrated(room=5), retry_s=300.0, settle_s=10.0)
    streams = cameras(4)
    open_all(shedder, streams, now=0.0)
    assert all(s.pipeline.shed_reason is None for s in streams)  # the card says 5 fit
    shedder.starved(streams[0], 0.5, streams, now=8.0)  # its first calls
    shedder.starved(streams[0], 0.91, streams, now=25.0)  # and much later: neither was a trend
    assert all(s.pipeline.shed_reason is None for s in streams)
    shedder.starved(streams[0], 0.91, streams, now=30.0)  # the window after: it is
    assert [s.pipeline.shed_reason is None for s in streams] == [True, True, True, False]
    assert "cam0 got 91% of its frames enhanced with 4 streams" in str(streams[3].pipeline.shed_reason)
    shedder.starved(streams[1], 0.92, streams, now=33.0)
    shedder.starved(streams[1], 0.92, streams, now=38.0)  # the others' shares have not shown it yet
    assert sum(s.pipeline.shed_reason is not None for s in streams) == 1
    shedder.unshed(streams, now=100.0)
    assert streams[3].pipeline.shed_reason is not None  # the cores held 3
    late = cameras(5)[4]
    late.choice = CHOICE
    shedder.opened(late, shedder.enhanced(late, [*streams, late]), now=100.0)
    late.pipeline.opened = True
    assert "keeps up with 3 stream(s)" in str(late.pipeline.shed_reason)  # as the cores held
    shedder.unshed([*streams, late], now=340.0)  # the retry: the card's room again
    assert streams[3].pipeline.shed_reason is None
    assert late.pipeline.shed_reason is None


def test_a_stream_alone_or_beside_named_models_only_is_never_shed_for_starving() -> None:
    shedder = Shedder(calibrated(room=1))
    (alone,) = cameras(1)
    open_all(shedder, [alone], now=0.0)
    shedder.starved(alone, 0.5, [alone], now=10.0)
    shedder.starved(alone, 0.5, [alone], now=15.0)
    assert alone.pipeline.shed_reason is None
    named = cameras(2, auto=False)
    shedder.starved(alone, 0.5, [*named, alone], now=20.0)
    assert alone.pipeline.shed_reason is not None  # the only auto stream running a model: it goes
    assert all(s.pipeline.shed_reason is None for s in named)  # a named model is the operator's choice
