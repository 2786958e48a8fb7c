"""The per-stream feature cache: each frame of a run stored once, runs never mixed, bounded."""

from __future__ import annotations

import pytest

from streamer.core.features import FeatureCache
from streamer.errors import ConfigError, FrameEvictedError


def test_sliding_windows_encode_each_frame_once() -> None:
    cache: FeatureCache[str] = FeatureCache(5)
    encoded: list[int] = []
    windows = [[min(max(i, 0), 9) for i in range(target - 2, target + 3)] for target in range(10)]
    for window in windows:
        for index in cache.missing(window, run=0):
            encoded.append(index)
            cache.put(index, 0, f"f{index}")
        assert [cache.get(i) for i in window] == [f"f{i}" for i in window]
    assert encoded == list(range(10))
    stats = cache.stats()
    assert (stats.encoded, stats.size, stats.resets) == (10, 5, 0)
    assert stats.hits == sum(len(set(w)) for w in windows) - 10


def test_a_new_run_empties_the_cache_and_is_counted() -> None:
    cache: FeatureCache[int] = FeatureCache(3, stream_id="cam")
    for index in cache.missing([0, 1, 2], run=0):
        cache.put(index, 0, index)
    assert cache.missing([1, 2, 3], run=1) == [1, 2, 3]
    assert len(cache) == 0
    assert cache.run == 1
    assert cache.stats().resets == 1
    with pytest.raises(FrameEvictedError, match="frame 1 of stream 'cam'"):
        cache.get(1)


def test_the_lowest_indices_leave_first() -> None:
    cache: FeatureCache[int] = FeatureCache(2)
    cache.missing([4, 5], run=0)
    for index in (4, 5, 6):
        cache.put(index, 0, index)
    assert 4 not in cache
    assert (5 in cache, 6 in cache) == (True, True)


def test_features_of_another_run_are_refused() -> None:
    cache: FeatureCache[int] = FeatureCache(2)
    cache.missing([0], run=3)
    with pytest.raises(ConfigError, match="run 2"):
        cache.put(0, 2, 0)


def test_a_window_wider_than_the_cache_is_a_clear_error() -> None:
    cache: FeatureCache[int] = FeatureCache(2, stream_id="lobby")
    with pytest.raises(ConfigError, match="needs 3 frames' features but the feature cache holds 2"):
        cache.missing([0, 1, 2], run=0)
    with pytest.raises(ConfigError, match="at least 1"):
        FeatureCache(0)
