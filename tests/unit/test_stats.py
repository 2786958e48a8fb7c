"""RateMeter and DurationRecorder's recent percentiles: what /streams shows live."""

from __future__ import annotations

import pytest

from streamer.core.stats import DurationRecorder, RateMeter
from streamer.errors import ConfigError


def test_a_steady_30_fps_reads_30_and_nothing_before_two_samples() -> None:
    meter = RateMeter(window_s=5.0, per_s=4.0)
    assert meter.rate(0.0) is None
    meter.add(0.0)
    assert meter.rate(0.1) is None
    for k in range(1, 300):
        meter.add(k / 30)
    assert meter.rate(299 / 30) == pytest.approx(30.0, rel=0.02)


def test_the_rate_follows_the_last_window_and_falls_to_zero_when_frames_stop() -> None:
    meter = RateMeter(window_s=2.0, per_s=4.0)
    for k in range(300):  # 30 fps for 10 s, then 10 fps
        meter.add(k / 30)
    for k in range(1, 50):
        meter.add(10 + k / 10)
    assert meter.rate(14.9) == pytest.approx(10.0, rel=0.1)
    assert meter.rate(30.0) == 0.0


def test_memory_stays_bounded() -> None:
    meter = RateMeter(window_s=1.0, per_s=4.0)
    for k in range(100_000):
        meter.add(k / 1000)
    assert len(meter._samples) <= 6


def test_bad_windows_are_refused() -> None:
    with pytest.raises(ConfigError, match="positive"):
        RateMeter(window_s=0.0)


def test_recent_percentiles_cover_only_the_last_samples_even_past_a_wrap() -> None:
    recorder = DurationRecorder(capacity=8)
    for value in (1.0,) * 10 + (0.010,) * 3:
        recorder.record(value)
    assert recorder.recent_percentile_ms(50, 3) == pytest.approx(10.0)
    assert recorder.recent_percentile_ms(50, 5) == pytest.approx(10.0)
    assert recorder.recent_percentile_ms(50, 100) == pytest.approx(1000.0)  # all 8 kept: five 1 s
    assert DurationRecorder().recent_percentile_ms(50, 3) is None
