from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamer.core.ring import RingBuffer
from streamer.errors import ConfigError, FrameError, FrameEvictedError
from tests.factories import make_frame


def test_push_returns_what_it_evicted_and_keeps_the_newest() -> None:
    ring = RingBuffer(3)
    assert [ring.push(make_frame(i)) for i in range(3)] == [None, None, None]
    evicted = ring.push(make_frame(3))
    assert evicted is not None
    assert evicted.index == 0
    assert [ring.get(i).index for i in (1, 2, 3)] == [1, 2, 3]
    assert 0 not in ring
    assert len(ring) == 3


def test_frames_keep_index_pts_and_arrival() -> None:
    ring = RingBuffer(2)
    ring.push(make_frame(7, pts=700))
    frame = ring.get(7)
    assert (frame.index, frame.pts, frame.arrival) == (7, 700, 7.0)


def test_evicted_frame_lookup_names_the_fix() -> None:
    ring = RingBuffer(2)
    for i in range(3):
        ring.push(make_frame(i))
    with pytest.raises(FrameEvictedError, match="ring_capacity"):
        ring.get(0)
    with pytest.raises(LookupError):
        ring.get(0)


def test_drop_counter_counts_only_frames_overwritten_before_release() -> None:
    ring = RingBuffer(2)
    for i in range(4):
        ring.push(make_frame(i))
    assert ring.stats().dropped == 2
    ring.release_before(4)
    ring.push(make_frame(4))
    stats = ring.stats()
    assert (stats.pushed, stats.overwritten, stats.dropped) == (5, 3, 2)


def test_index_gaps_cost_no_slots() -> None:
    ring = RingBuffer(3)
    for i in (0, 5, 9):
        ring.push(make_frame(i))
    assert all(i in ring for i in (0, 5, 9))


def test_rejects_other_streams_and_old_indices() -> None:
    ring = RingBuffer(2, stream_id="cam1")
    ring.push(make_frame(1, stream_id="cam1"))
    with pytest.raises(FrameError, match="cam2"):
        ring.push(make_frame(2, stream_id="cam2"))
    with pytest.raises(FrameError, match="must increase"):
        ring.push(make_frame(1, stream_id="cam1"))


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        RingBuffer(0)


@given(capacity=st.integers(1, 16), count=st.integers(0, 100))
def test_memory_is_bounded_by_capacity(capacity: int, count: int) -> None:
    ring = RingBuffer(capacity)
    for i in range(count):
        ring.push(make_frame(i))
    assert len(ring) == min(capacity, count)
    assert [i for i in range(count) if i in ring] == list(range(max(0, count - capacity), count))
