"""Pacing a recording to the wall clock, and its timestamps across loops: the pure helpers, time passed in."""

from __future__ import annotations

from itertools import pairwise

import pytest

from streamer.core.pacing import LoopTimeline, Pacer
from streamer.errors import ConfigError

VFR = [0.0, 0.04, 0.1, 0.3, 0.31, 0.5]
"""Media times of a variable-frame-rate recording, in seconds."""


def schedule(pacer: Pacer, times: list[float], start: float, lag: float = 0.0) -> list[float]:
    """When each frame is due, each asked for ``lag`` seconds after the one before was due."""
    due, now = [], start
    for media in times:
        due.append(pacer.due(media, now))
        now = due[-1] + lag
    return due


def test_frames_are_due_at_their_media_time_after_the_first_variable_rate_included() -> None:
    due = schedule(Pacer(), VFR, start=1000.0)
    assert due == pytest.approx([1000.0 + t for t in VFR])


def test_a_frame_asked_for_late_keeps_its_time_within_the_allowed_lateness() -> None:
    # Decoding takes 0.2 s a frame, slower than some of the steps: the schedule stays the media's.
    due = schedule(Pacer(max_late_s=1.0), VFR, start=50.0, lag=0.2)
    assert due == pytest.approx([50.0 + t for t in VFR])


def test_a_frame_later_than_allowed_restarts_the_clock_instead_of_a_burst() -> None:
    pacer = Pacer(max_late_s=1.0)
    assert pacer.due(0.0, now=10.0) == 10.0
    assert pacer.due(0.04, now=12.0) == 12.0  # 1.96 s late: due now, and the clock starts again here
    assert pacer.due(0.08, now=12.0) == pytest.approx(12.04)


def test_a_gap_in_the_timestamps_does_not_make_the_source_silent() -> None:
    pacer = Pacer(max_wait_s=10.0)
    assert pacer.due(0.0, now=5.0) == 5.0
    assert pacer.due(3600.0, now=5.01) == 5.01  # an hour's gap in the recording
    assert pacer.due(3600.04, now=5.01) == pytest.approx(5.05)


def test_pacer_limits_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="positive"):
        Pacer(max_late_s=0.0)


def test_a_loop_continues_the_timestamps_pass_after_pass() -> None:
    timeline = LoopTimeline(default_step=1)
    placed = []
    for _ in range(3):
        placed += [timeline.place(pts, duration=1) for pts in range(4)]
        timeline.restart()
    assert placed == list(range(12))
    assert timeline.passes == 4


def test_a_loop_of_a_file_that_starts_late_and_has_no_durations_steps_as_its_frames_do() -> None:
    timeline = LoopTimeline(default_step=512)
    first = [timeline.place(pts) for pts in (1024, 1536, 2048)]
    timeline.restart()
    second = [timeline.place(pts) for pts in (1024, 1536, 2048)]
    assert first == [1024, 1536, 2048]
    assert second == [2560, 3072, 3584]


def test_a_variable_rate_loop_restarts_one_last_frame_duration_after_the_end() -> None:
    timeline = LoopTimeline(default_step=1)
    pts, durations = [0, 1, 3, 4, 8], [1, 2, 1, 4, 3]
    first = [timeline.place(p, d) for p, d in zip(pts, durations, strict=True)]
    timeline.restart()
    second = [timeline.place(p, d) for p, d in zip(pts, durations, strict=True)]
    assert first == pts
    assert second == [11 + p for p in pts]
    together = first + second
    assert all(b > a for a, b in pairwise(together))


def test_a_one_frame_loop_without_durations_steps_by_the_default() -> None:
    timeline = LoopTimeline(default_step=40)
    placed = []
    for _ in range(3):
        placed.append(timeline.place(7))
        timeline.restart()
    assert placed == [7, 47, 87]


def test_frames_without_pts_stay_without_and_are_counted_in_the_pass() -> None:
    timeline = LoopTimeline(default_step=1)
    assert [timeline.place(None), timeline.place(None)] == [None, None]
    assert timeline.frames == 2
    timeline.restart()
    assert timeline.frames == 0


def test_the_default_step_must_be_a_tick_or_more() -> None:
    with pytest.raises(ConfigError, match="at least 1 tick"):
        LoopTimeline(default_step=0)
