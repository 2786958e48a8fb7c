"""FairBatcher: when a cross-stream batch is due and which windows it holds."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import pytest

from streamer.core.batching import FairBatcher
from streamer.errors import ConfigError

SHAPE = (5, 360, 640)


def batcher(
    max_batch: int, max_wait_s: float = 0.010, streams: tuple[str, ...] = ("a", "b")
) -> FairBatcher[str]:
    fair: FairBatcher[str] = FairBatcher(max_batch, max_wait_s)
    for stream in streams:
        fair.attach(stream)
    return fair


def test_nothing_queued_is_never_due() -> None:
    fair = batcher(4)
    assert fair.due_in(0.0) is None
    assert fair.take() == []


def test_a_partial_batch_waits_for_the_other_streams_until_max_wait() -> None:
    fair = batcher(4, max_wait_s=0.010)
    fair.submit("a", "a0", SHAPE, now=1.000)
    assert fair.due_in(1.004) == pytest.approx(0.006)
    assert fair.due_in(1.011) == 0.0


def test_a_batch_is_due_at_once_when_every_stream_has_a_window_waiting() -> None:
    fair = batcher(4)
    fair.submit("a", "a0", SHAPE, now=1.0)
    fair.submit("b", "b0", SHAPE, now=1.0)
    assert fair.due_in(1.0) == 0.0
    assert sorted(item for _, item in fair.take()) == ["a0", "b0"]


def test_a_single_stream_never_waits() -> None:
    fair = batcher(4, max_wait_s=1.0, streams=("only",))
    fair.submit("only", "x", SHAPE, now=0.0)
    assert fair.due_in(0.0) == 0.0


def test_a_full_batch_is_due_at_once() -> None:
    fair = batcher(2, max_wait_s=1.0, streams=("a", "b", "c"))
    fair.submit("a", "a0", SHAPE, now=0.0)
    fair.submit("a", "a1", SHAPE, now=0.0)
    assert fair.due_in(0.0) == 0.0


def test_a_busy_stream_cannot_crowd_out_a_quiet_one() -> None:
    fair = batcher(4)
    for i in range(4):
        fair.submit("a", f"a{i}", SHAPE, now=0.0)
    fair.submit("b", "b0", SHAPE, now=0.0)
    first = [item for _, item in fair.take()]
    assert "b0" in first
    assert len(first) == 4
    assert [item for _, item in fair.take()] == ["a3"]


def test_with_more_streams_than_a_batch_holds_every_stream_is_served_in_turn() -> None:
    streams = tuple(f"s{i}" for i in range(8))
    fair = batcher(2, streams=streams)
    for stream in streams:
        fair.submit(stream, stream, SHAPE, now=0.0)
    served: list[str] = []
    for _ in range(8):
        batch = [stream for stream, _ in fair.take()]
        served += batch
        for stream in batch:  # every stream always has a window waiting: all of them are busy
            fair.submit(stream, stream, SHAPE, now=0.0)
    assert {s: served.count(s) for s in streams} == dict.fromkeys(streams, 2)
    assert served[:8] == list(streams)


def test_each_streams_windows_leave_in_the_order_submitted() -> None:
    fair = batcher(3)
    for i in range(3):
        fair.submit("a", f"a{i}", SHAPE, now=0.0)
        fair.submit("b", f"b{i}", SHAPE, now=0.0)
    taken = fair.take() + fair.take()
    assert [item for stream, item in taken if stream == "a"] == ["a0", "a1", "a2"]
    assert [item for stream, item in taken if stream == "b"] == ["b0", "b1", "b2"]


def test_windows_of_different_shapes_never_share_a_batch() -> None:
    fair = batcher(4)
    fair.submit("a", "a-small", (5, 64, 96), now=0.0)
    fair.submit("b", "b-large", SHAPE, now=0.0)
    first, second = fair.take(), fair.take()
    assert len(first) == len(second) == 1
    assert {first[0][1], second[0][1]} == {"a-small", "b-large"}


def test_a_stream_may_not_queue_more_than_one_call_takes() -> None:
    fair = batcher(2)
    fair.submit("a", "a0", SHAPE, now=0.0)
    fair.submit("a", "a1", SHAPE, now=0.0)
    with pytest.raises(RuntimeError, match="wait for them"):
        fair.submit("a", "a2", SHAPE, now=0.0)


def test_a_model_with_two_workers_takes_two_calls_worth_per_stream_and_batches_one_call_each() -> None:
    fair: FairBatcher[str] = FairBatcher(1, calls=2)
    fair.attach("a")
    fair.submit("a", "a0", SHAPE, now=0.0)
    fair.submit("a", "a1", SHAPE, now=0.0)
    with pytest.raises(RuntimeError, match="the most its calls under way take \\(2\\)"):
        fair.submit("a", "a2", SHAPE, now=0.0)
    assert [item for _, item in fair.take()] == ["a0"]
    assert [item for _, item in fair.take()] == ["a1"]


def test_steps_one_per_stream_fill_a_share_of_the_streams_per_call_so_every_call_has_work() -> None:
    """A recurrent model's steps on two workers: five streams make batches of three (their share,
    rounded up), due once three wait; max_batch still caps a share."""
    fair: FairBatcher[str] = FairBatcher(8, max_wait_s=1.0, calls=2, one_each=True)
    for stream in "abcde":
        fair.attach(stream)
    fair.submit("a", "a0", SHAPE, now=0.0)
    fair.submit("b", "b0", SHAPE, now=0.0)
    assert fair.due_in(0.0) == pytest.approx(1.0)
    fair.submit("c", "c0", SHAPE, now=0.0)
    fair.submit("d", "d0", SHAPE, now=0.0)
    assert fair.due_in(0.0) == 0.0
    assert [item for _, item in fair.take()] == ["a0", "b0", "c0"]
    assert fair.due_in(0.0) == pytest.approx(1.0)  # d waits for a share, or for max_wait
    fair.submit("e", "e0", SHAPE, now=0.0)
    assert [item for _, item in fair.take()] == ["d0", "e0"]
    capped: FairBatcher[str] = FairBatcher(2, calls=1, one_each=True)
    for stream in "abcd":
        capped.attach(stream)
        capped.submit(stream, f"{stream}0", SHAPE, now=0.0)
    assert [item for _, item in capped.take()] == ["a0", "b0"]


def test_detach_returns_what_the_stream_had_queued_and_keeps_the_rest() -> None:
    fair = batcher(4)
    fair.submit("a", "a0", SHAPE, now=0.0)
    fair.submit("b", "b0", SHAPE, now=0.0)
    assert fair.detach("a") == ["a0"]
    assert fair.detach("unknown") == []
    assert fair.take() == [("b", "b0")]
    assert fair.stats().pending == 0


def test_unknown_and_duplicate_streams_and_bad_settings_are_refused() -> None:
    fair = batcher(2)
    with pytest.raises(ConfigError, match="without attaching"):
        fair.submit("c", "c0", SHAPE, now=0.0)
    with pytest.raises(ConfigError, match="already attached"):
        fair.attach("a")
    with pytest.raises(ConfigError, match="max_batch"):
        FairBatcher(0)
    with pytest.raises(ConfigError, match="max_wait_ms"):
        FairBatcher(2, -0.1)


def test_stats_count_what_passed_through() -> None:
    fair = batcher(2)
    fair.submit("a", "a0", SHAPE, now=0.0)
    fair.submit("b", "b0", SHAPE, now=0.0)
    fair.take()
    stats = fair.stats()
    assert (stats.streams, stats.submitted, stats.batches, stats.pending, stats.max_pending) == (
        2,
        2,
        1,
        0,
        2,
    )


def _per_window(seconds: float) -> Callable[[Hashable, int], float]:
    """A call's cost as on a CPU: ``seconds`` for each window in it."""
    return lambda key, windows: seconds * windows


def test_a_batch_holds_only_as_many_windows_as_its_earliest_deadline_allows() -> None:
    fair = batcher(8, streams=("a", "b", "c", "d"))
    fair.submit("a", "a0", SHAPE, now=0.0, deadline=1.025)  # room for two calls' worth of 10 ms
    for stream in "bcd":
        fair.submit(stream, f"{stream}0", SHAPE, now=0.0, deadline=2.0)
    assert [item for _, item in fair.take(1.0, _per_window(0.010))] == ["a0", "b0"]
    assert [item for _, item in fair.take(1.0, _per_window(0.010))] == ["c0", "d0"]


def test_a_window_with_a_tighter_deadline_ends_the_batch_before_it() -> None:
    fair = batcher(8, streams=("a", "b", "c"))
    fair.submit("a", "a0", SHAPE, now=0.0, deadline=2.0)
    fair.submit("b", "b0", SHAPE, now=0.0, deadline=2.0)
    fair.submit("c", "c0", SHAPE, now=0.0, deadline=1.025)  # would end a call of 3 (30 ms) past it
    assert [item for _, item in fair.take(1.0, _per_window(0.010))] == ["a0", "b0"]
    assert [item for _, item in fair.take(1.0, _per_window(0.010))] == ["c0"]


def test_windows_without_a_deadline_fill_the_batch() -> None:
    fair = batcher(8, streams=("a", "b", "c"))
    for stream in "abc":
        fair.submit(stream, f"{stream}0", SHAPE, now=0.0)
    assert len(fair.take(1.0, _per_window(10.0))) == 3


def test_a_batch_holds_one_window_even_when_that_one_is_expected_to_miss() -> None:
    fair = batcher(8)
    fair.submit("a", "a0", SHAPE, now=0.0, deadline=1.001)
    fair.submit("b", "b0", SHAPE, now=0.0, deadline=1.001)
    assert [item for _, item in fair.take(1.0, _per_window(0.010))] == ["a0"]


def test_windows_that_cannot_make_their_deadline_even_alone_are_handed_back_late() -> None:
    fair = batcher(8)
    fair.submit("a", "a0", SHAPE, now=0.0, deadline=1.005)
    fair.submit("a", "a1", SHAPE, now=0.0, deadline=1.050)
    fair.submit("b", "b0", SHAPE, now=0.0, deadline=1.002)
    fair.submit("b", "b1", SHAPE, now=0.0)
    assert fair.expire(1.0, _per_window(0.010)) == [("a", "a0"), ("b", "b0")]
    assert fair.stats().pending == 2
    assert [item for _, item in fair.take(1.0, _per_window(0.010))] == ["a1", "b1"]
    assert fair.expire(1.0, _per_window(0.010)) == []
