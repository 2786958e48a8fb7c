"""``model: auto``'s choice: the best-quality tier that keeps up, else the fastest; probes kept per size.

The shipped tiers are loaded for real; their speed is given (``measure``), since how fast a tier runs
here is a benchmark's business, not a unit test's.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from streamer.assets import (
    AUTO_TIERS,
    DEFAULT_MODEL,
    STREAMING_INT8_MODEL,
    STREAMING_MODEL,
    STREAMING_QUARTER_MODEL,
    TEMPORAL_FILTER,
)
from streamer.backend.base import Backend
from streamer.backend.onnx import OnnxBackend
from streamer.config import ModelConfig, load_config
from streamer.engine.tiers import Rate, TierSelector, _timed, card_fps, model_fps, remedy
from streamer.errors import BackendError, ConfigError


class Timings:
    """Given fps per model name, cut short as ``_timed`` cuts them (at the floor asked for, when below
    it); records what was timed."""

    def __init__(self, fps: dict[str, float]) -> None:
        self.fps = fps
        self.timed: list[tuple[str, int, int]] = []

    def __call__(self, backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
        self.timed.append((backend.info.name, width, height))
        fps = self.fps[backend.info.name]
        return Rate(floor * 0.99, bound=True) if fps < floor else Rate(fps)


TIER_NAMES = (
    "stream_t5",
    "stream_t5-int8",
    "stream_t5_lite",
    "stream_t5_lite_sep",
    "stream_t5_quarter_sep",
    "stream_t5_tiny",
)


def no_cards(path: Path, width: int, height: int) -> float | None:
    """No card figures: every tier is timed (the estimates have tests of their own)."""
    return None


def load(path: Path) -> Backend:
    return OnnxBackend(path, threads=1)


def test_the_best_quality_tier_that_runs_the_headroom_is_taken_and_slower_tiers_are_not_timed() -> None:
    timings = Timings({"stream_t5": 60.0, "stream_t5-int8": 80.0, "stream_t5_tiny": 300.0})
    choice = TierSelector(measure=timings, host=None, cards=no_cards).choose(load, "", 640, 360, 30.0, 1.5)
    assert (choice.path, choice.name, choice.keeps_up, choice.needed_fps) == (
        STREAMING_MODEL,
        "stream_t5",
        True,
        45.0,
    )
    assert timings.timed == [
        ("stream_t5_tiny", 640, 360),
        ("stream_t5", 640, 360),
    ]  # the cheapest first


def test_a_tier_further_down_is_taken_when_the_best_cannot_keep_up() -> None:
    timings = Timings({"stream_t5": 30.0, "stream_t5-int8": 46.0, "stream_t5_tiny": 300.0})
    choice = TierSelector(measure=timings, host=None, cards=no_cards).choose(load, "", 640, 360, 30.0, 1.5)
    assert (choice.path, choice.keeps_up) == (STREAMING_INT8_MODEL, True)
    assert [p.name for p in choice.probes] == ["stream_t5", "stream_t5-int8"]
    assert choice.as_dict()["probes"] == [
        {"model": "stream_t5", "fps": 30.0, "cut_short": False, "estimated": False},
        {"model": "stream_t5-int8", "fps": 46.0, "cut_short": False, "estimated": False},
    ]


def test_when_no_tier_keeps_up_the_fastest_is_taken_and_the_choice_says_so() -> None:
    timings = Timings(
        {
            "stream_t5": 20.0,
            "stream_t5-int8": 17.0,
            "stream_t5_lite": 19.0,
            "stream_t5_lite_sep": 18.5,
            "stream_t5_quarter_sep": 18.0,
            "stream_t5_tiny": 17.5,
        }
    )
    choice = TierSelector(measure=timings, host=None, cards=no_cards).choose(load, "", 1280, 720, 30.0, 1.0)
    assert (choice.path, choice.keeps_up) == (STREAMING_MODEL, False)
    line = choice.describe()
    assert "no tier keeps up" in line
    assert "1280x720 @ 30 fps" in line
    assert "stream_t5-int8 17.0" in line


def test_tiers_plainly_too_slow_are_cut_short_and_the_fastest_timed_in_full_is_taken() -> None:
    timings = Timings(
        {
            "stream_t5": 4.0,
            "stream_t5-int8": 5.0,
            "stream_t5_lite": 30.0,
            "stream_t5_lite_sep": 8.0,
            "stream_t5_quarter_sep": 36.0,
            "stream_t5_tiny": 35.0,
        }
    )
    choice = TierSelector(measure=timings, host=None, cards=no_cards).choose(load, "", 1280, 720, 30.0, 1.3)
    assert (choice.name, choice.keeps_up) == ("stream_t5_quarter_sep", False)
    assert [p.bound for p in choice.probes] == [True, True, False, True, False, False]
    assert "stream_t5 <=19.3" in choice.describe()  # the floor is half the 39 fps needed


def test_where_every_tier_is_plainly_too_slow_the_last_and_cheapest_is_taken() -> None:
    timings = Timings({name: 1.0 + k for k, name in enumerate(TIER_NAMES)})
    choice = TierSelector(measure=timings, host=None, cards=no_cards).choose(load, "", 3840, 2160, 30.0, 1.3)
    assert (choice.path, choice.keeps_up) == (AUTO_TIERS[-1], False)
    assert [p.bound for p in choice.probes] == [True, True, True, True, True, False]  # the cheapest: in full


def test_a_kept_probe_cut_short_is_timed_again_where_its_bound_does_not_settle_the_need() -> None:
    timings = Timings({name: 12.0 for name in TIER_NAMES})
    selector = TierSelector(measure=timings, host=None, cards=no_cards)
    selector.choose(load, "", 640, 360, 30.0, 1.0)  # floor 15: each but the cheapest cut short at 14.85
    assert len(timings.timed) == len(AUTO_TIERS)
    choice = selector.choose(load, "", 640, 360, 10.0, 1.0)  # floor 5: a bound of 14.85 settles nothing
    # The best tier again, now timed in full: 12 fps (the cheapest always is).
    assert len(timings.timed) == len(AUTO_TIERS) + 1
    assert (choice.path, choice.keeps_up, choice.probes[0].bound) == (AUTO_TIERS[0], True, False)
    selector.choose(load, "", 640, 360, 10.0, 1.0)
    assert len(timings.timed) == len(AUTO_TIERS) + 1


def test_a_timing_stops_once_the_rate_asked_for_is_out_of_reach() -> None:
    backend = OnnxBackend(TEMPORAL_FILTER, threads=1, workers=1)
    try:
        rate = _timed(backend, 64, 48, seconds=3600.0, warmup=0, runs=1_000_000, floor=1e9)
    finally:
        backend.close()
    assert rate.bound
    assert 0 < rate.fps < 1e9


def test_probes_are_kept_per_size_and_settings() -> None:
    timings = Timings(
        {
            "stream_t5": 30.0,
            "stream_t5-int8": 31.0,
            "stream_t5_lite": 32.0,
            "stream_t5_lite_sep": 33.0,
            "stream_t5_quarter_sep": 36.0,
            "stream_t5_tiny": 50.0,
        }
    )
    selector = TierSelector(measure=timings, host=None, cards=no_cards)
    selector.choose(load, "a", 640, 360, 30.0, 1.5)
    selector.choose(load, "a", 640, 360, 25.0, 1.0)
    assert len(timings.timed) == len(AUTO_TIERS)  # the second stream of that size starts without a probe
    selector.choose(load, "a", 320, 180, 30.0, 1.5)
    selector.choose(load, "b", 320, 180, 30.0, 1.5)
    assert len(timings.timed) == 3 * len(AUTO_TIERS)


def test_model_path_auto_is_a_setting_and_stands_in_with_the_first_tier() -> None:
    auto = load_config(None, {"model.path": "auto"}).model
    assert auto.path == "auto"
    assert auto.file() == AUTO_TIERS[0]
    assert ModelConfig().file() == DEFAULT_MODEL
    assert auto.with_file(STREAMING_INT8_MODEL).file() == STREAMING_INT8_MODEL
    with pytest.raises(ConfigError, match="headroom"):
        load_config(None, {"model.headroom": 0.5})


def test_model_fps_runs_as_many_calls_at_once_as_the_backend_has_workers() -> None:
    backend = OnnxBackend(TEMPORAL_FILTER, threads=1, workers=2)
    real_infer, barrier, met = backend.infer, threading.Barrier(2, timeout=60), list[int]()
    calls = iter(range(1_000_000))  # next() on it is atomic: each call gets its own number

    def together(batch: np.ndarray) -> np.ndarray:
        if next(calls) < 2:  # the first two calls pass only if they are under way at once
            met.append(barrier.wait())
        return real_infer(batch)

    backend.infer = together  # type: ignore[method-assign]
    try:
        assert model_fps(backend, 64, 48, seconds=0.0, warmup=0, runs=4) > 0
    finally:
        backend.close()
    assert sorted(met) == [0, 1]


def test_model_fps_raises_what_a_call_raised() -> None:
    backend = OnnxBackend(TEMPORAL_FILTER, threads=1, workers=2)

    def broken(batch: np.ndarray) -> np.ndarray:
        raise BackendError("the runtime failed")

    backend.infer = broken  # type: ignore[method-assign]
    try:
        with pytest.raises(BackendError, match="the runtime failed"):
            model_fps(backend, 64, 48, seconds=10.0, warmup=0)
    finally:
        backend.close()


CARDS_720P = {
    "stream_t5": 5.4,
    "stream_t5.int8": 5.8,
    "stream_t5_lite": 6.7,
    "stream_t5_lite_sep": 8.8,
    "stream_t5_quarter_sep": 43.8,
    "stream_t5_tiny": 63.0,
}


def test_tiers_their_cards_put_far_under_the_need_here_are_not_timed() -> None:
    timings = Timings({"stream_t5_tiny": 65.5, "stream_t5_quarter_sep": 45.6})  # 1.04x the cards' at 720p

    def cards(path: Path, width: int, height: int) -> float | None:
        return CARDS_720P[path.name.removesuffix(".onnx")]

    choice = TierSelector(measure=timings, host=None, cards=cards).choose(load, "", 1280, 720, 30.0, 1.2)
    assert timings.timed == [("stream_t5_tiny", 1280, 720), ("stream_t5_quarter_sep", 1280, 720)]
    assert (choice.name, choice.keeps_up) == ("stream_t5_quarter_sep", True)
    assert [p.estimated for p in choice.probes] == [True, True, True, True, False]
    assert "stream_t5 ~5.6" in choice.describe()
    assert choice.as_dict()["probes"][0] == {
        "model": "stream_t5",
        "fps": 5.6,
        "cut_short": False,
        "estimated": True,
    }


def test_a_tier_whose_card_puts_it_near_the_need_is_timed() -> None:
    timings = Timings({"stream_t5_tiny": 259.0, "stream_t5": 45.0})  # 4.1x the cards': a fast machine

    def cards(path: Path, width: int, height: int) -> float | None:
        return CARDS_720P[path.name.removesuffix(".onnx")]

    choice = TierSelector(measure=timings, host=None, cards=cards).choose(load, "", 1280, 720, 30.0, 1.2)
    assert timings.timed == [("stream_t5_tiny", 1280, 720), ("stream_t5", 1280, 720)]
    assert (choice.name, choice.keeps_up) == ("stream_t5", True)


def test_card_fps_reads_the_shipped_cards_at_the_nearest_size_scaled_by_pixels() -> None:
    assert card_fps(STREAMING_QUARTER_MODEL, 1280, 720) == 41.5
    assert card_fps(STREAMING_QUARTER_MODEL, 1920, 1080) == pytest.approx(41.5 * 1280 * 720 / (1920 * 1080))
    assert card_fps(STREAMING_INT8_MODEL, 640, 360) == 20.8  # the INT8 pair's figure in its source's card
    assert card_fps(TEMPORAL_FILTER.with_name("missing.onnx"), 640, 360) is None  # no card


def test_a_tier_timed_near_the_need_is_timed_again_for_longer_and_that_figure_decides() -> None:
    class Settling(Timings):
        def __call__(self, backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
            rate = super().__call__(backend, width, height, seconds, floor)
            if backend.info.name == "stream_t5" and seconds > 0.3:
                return Rate(40.0)  # the longer timing: above the 36 needed
            return rate

    timings = Settling({"stream_t5": 34.0, "stream_t5_tiny": 300.0})
    choice = TierSelector(measure=timings, host=None, cards=no_cards).choose(load, "", 640, 360, 30.0, 1.2)
    assert timings.timed == [
        ("stream_t5_tiny", 640, 360),
        ("stream_t5", 640, 360),
        ("stream_t5", 640, 360),
    ]
    assert (choice.name, choice.keeps_up, choice.probes[0].fps) == ("stream_t5", True, 40.0)


def test_the_budget_warning_names_the_next_faster_tier_or_says_this_is_the_fastest() -> None:
    assert "shipped:stream_t5.int8 (the next faster tier)" in remedy("stream_t5")
    assert "shipped:stream_t5_lite (the next faster tier)" in remedy("stream_t5-int8")
    assert "shipped:stream_t5_tiny (the next faster tier)" in remedy("stream_t5_quarter_sep")
    assert remedy("stream_t5_tiny").startswith("stream_t5_tiny is the fastest shipped tier")
    assert remedy("conv3d_t5").startswith("set model.path: auto")


CARDS_360P = {name: fps * 4 for name, fps in CARDS_720P.items()}  # the cards scale by pixels
CALIBRATED = ("stream_t5_quarter_sep", "stream_t5_tiny")


def cards_by_pixels(path: Path, width: int, height: int) -> float | None:
    return CARDS_720P[path.name.removesuffix(".onnx")] * (1280 * 720) / (width * height)


def test_calibration_times_the_two_cheapest_tiers_once_on_the_reference_size() -> None:
    timings = Timings({name: 2 * CARDS_360P[name] for name in CALIBRATED})  # twice the cards'
    selector = TierSelector(measure=timings, host=None, cards=cards_by_pixels)
    assert selector.calibrate(load, "") == pytest.approx(2.0)
    assert selector.calibrate(load, "") == pytest.approx(2.0)
    assert timings.timed == [("stream_t5_quarter_sep", 640, 360), ("stream_t5_tiny", 640, 360)]
    uncarded = TierSelector(measure=timings, host=None, cards=no_cards)
    assert uncarded.calibrate(load, "") is None  # nothing to scale
    assert len(timings.timed) == 2  # and nothing timed for it


def test_the_tier_slowest_against_its_card_sets_the_speed() -> None:
    # as on AVX2 kernels: the tiny tier faster than its card, the quarter tier slower than its own
    timings = Timings({"stream_t5_quarter_sep": 0.8 * CARDS_360P["stream_t5_quarter_sep"]})
    timings.fps["stream_t5_tiny"] = 1.4 * CARDS_360P["stream_t5_tiny"]
    selector = TierSelector(measure=timings, host=None, cards=cards_by_pixels)
    assert selector.calibrate(load, "") == pytest.approx(0.8)
    choice = selector.start("", 1280, 720, 30.0, 1.2)
    assert choice is not None
    assert choice.name == "stream_t5_tiny"  # the quarter tier's 0.8 x 43.8 fps is under the 36 needed


def test_a_stream_starts_at_once_on_the_best_tier_its_card_says_keeps_up_here() -> None:
    timings = Timings({name: 2 * CARDS_360P[name] for name in CALIBRATED})
    selector = TierSelector(measure=timings, host=None, cards=cards_by_pixels)
    assert selector.start("", 1280, 720, 30.0, 1.2) is None  # not calibrated: the caller times the tiers
    selector.calibrate(load, "")
    choice = selector.start("", 1280, 720, 30.0, 1.2)
    assert choice is not None
    expected = next(n for n in CARDS_720P if 2 * CARDS_720P[n] >= 36.0)
    assert choice.name == expected.replace(".int8", "-int8")
    assert choice.keeps_up
    assert choice.estimated
    assert all(p.estimated for p in choice.probes)
    assert "estimated fps (cards x this machine)" in choice.describe()
    assert len(timings.timed) == 2  # nothing timed on the stream's size


def test_a_stream_no_tier_keeps_up_for_starts_on_the_cheapest_and_says_so() -> None:
    timings = Timings({name: 0.1 * CARDS_360P[name] for name in CALIBRATED})
    selector = TierSelector(measure=timings, host=None, cards=cards_by_pixels)
    selector.calibrate(load, "")
    choice = selector.start("", 1920, 1080, 30.0, 1.2)
    assert choice is not None
    assert (choice.name, choice.keeps_up) == ("stream_t5_tiny", False)
    assert "no tier keeps up" in choice.describe()


def test_a_stream_joining_others_on_these_cores_starts_on_a_tier_that_serves_them_all() -> None:
    timings = Timings({name: 2 * CARDS_360P[name] for name in CALIBRATED})
    selector = TierSelector(measure=timings, host=None, cards=cards_by_pixels)
    selector.calibrate(load, "")
    alone = selector.start("", 640, 360, 30.0, 1.2)
    shared = selector.start("", 640, 360, 30.0, 1.2, streams=4)
    assert alone is not None
    assert shared is not None
    assert shared.needed_fps == pytest.approx(4 * alone.needed_fps)
    assert AUTO_TIERS.index(shared.path) > AUTO_TIERS.index(alone.path)  # a cheaper tier
    assert shared.as_dict()["streams"] == 4
    assert "4 streams on these cores" in shared.describe()


def test_the_room_the_cheapest_tier_has_is_its_calibrated_card_over_each_streams_rate() -> None:
    timings = Timings({name: 2 * CARDS_360P[name] for name in CALIBRATED})
    selector = TierSelector(measure=timings, host=None, cards=cards_by_pixels)
    assert selector.room("", 640, 360, 30.0) is None  # not calibrated: unknown
    selector.calibrate(load, "")
    room = selector.room("", 640, 360, 30.0)
    assert room == int(2 * CARDS_360P["stream_t5_tiny"] // 30.0)  # no headroom: what the cores hold at all
    full = selector.start("", 640, 360, 30.0, 1.0, streams=room)
    over = selector.start("", 640, 360, 30.0, 1.0, streams=room + 1)
    assert full is not None
    assert over is not None
    assert (full.keeps_up, over.keeps_up) == (True, False)  # as start counts streams


def _as_fast_as_the_cards() -> TierSelector:
    """The shipped tiers' own cards, this machine as fast as the one they were written on, the streams'
    host work counted (``HOST_FPS``)."""
    cards = {path.stem: card_fps(path, 640, 360) for path in AUTO_TIERS[-2:]}
    selector = TierSelector(measure=Timings({name: fps or 0.0 for name, fps in cards.items()}))
    assert selector.calibrate(load, "") == pytest.approx(1.0)
    return selector


def test_decode_and_encode_take_their_share_so_more_streams_or_pixels_start_on_cheaper_tiers() -> None:
    selector = _as_fast_as_the_cards()
    choices = {
        (w, h, n): selector.start("", w, h, 30.0, ModelConfig().headroom, streams=n)
        for w, h, n in ((640, 360, 1), (640, 360, 4), (1280, 720, 1))
    }
    names = {key: choice.name if choice else None for key, choice in choices.items()}
    assert names == {
        (640, 360, 1): "stream_t5_lite_sep",
        (
            640,
            360,
            4,
        ): "stream_t5_tiny",  # the quarter tier's card runs four alone, not beside their host work
        (1280, 720, 1): "stream_t5_tiny",
    }
    one, four = choices[(640, 360, 1)], choices[(640, 360, 4)]
    assert one is not None
    assert four is not None
    assert one.needed_fps > 33.0  # 30 fps x headroom 1.1, and more to leave the host work its share
    assert four.needed_fps > 4 * one.needed_fps  # the host's share grows with the streams
    assert "beside decode and encode" in one.describe()


def test_where_the_host_work_alone_takes_the_cores_no_tier_keeps_up_and_the_need_says_why() -> None:
    selector = _as_fast_as_the_cards()
    choice = selector.start("", 640, 360, 30.0, 1.1, streams=12)  # 396 fps of host work: over HOST_FPS
    assert choice is not None
    assert (choice.name, choice.keeps_up, choice.as_dict()["needed_fps"]) == ("stream_t5_tiny", False, None)
    assert "more than decode and encode leave of these cores" in choice.describe()
    # the cheapest tier's room, host work counted: five 360p30 streams (150 fps) need 257 of its 266
    assert selector.room("", 640, 360, 30.0) == 5


def test_a_cheapest_tier_that_keeps_up_only_without_the_headroom_says_so_apart_from_one_that_cannot() -> None:
    selector = _as_fast_as_the_cards()
    # 720p30 with headroom 1.5: 90 fps alone beside the host work; without the margin 45: tiny runs 59
    tight = selector.start("", 1280, 720, 30.0, 1.5)
    assert tight is not None
    assert (tight.name, tight.keeps_up, tight.holds) == ("stream_t5_tiny", False, True)
    assert "took the fastest, which keeps up without it" in tight.describe()
    short = selector.start("", 1280, 720, 30.0, 1.1, streams=2)  # two 720p streams: beyond it either way
    assert short is not None
    assert (short.keeps_up, short.holds) == (False, False)
    assert short.describe().endswith("; no tier keeps up, took the fastest")
