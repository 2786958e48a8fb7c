from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.core.windower import EdgePolicy, OutputPosition, Windower, WindowTask
from streamer.errors import ConfigError
from streamer.frame import Colour, Frame, Yuv420
from tests.factories import make_frame

BREAKS = ("none", "flag", "gap", "resize", "pts_back", "pts_jump")


def build_stream(breaks: list[str]) -> tuple[list[Frame], list[int]]:
    """Frames with the requested break before each one; returns them and each frame's run number."""
    frames: list[Frame] = []
    runs: list[int] = []
    index, pts, size, run = 0, 0, (8, 8), 0
    for i, kind in enumerate(breaks):
        if i > 0:
            index += 1
            pts += 1
            if kind != "none":
                run += 1
            if kind == "gap":
                index += 2
                pts += 2
            elif kind == "resize":
                size = (8, 10) if size == (8, 8) else (8, 8)
            elif kind == "pts_back":
                pts -= 5
            elif kind == "pts_jump":
                pts += 90
        frames.append(make_frame(index, pts=pts, size=size, discontinuity=kind == "flag" and i > 0))
        runs.append(run)
    return frames, runs


def expected_indices(target: int, start: int, end: int, t: int, slot: int, edge: EdgePolicy) -> list[int]:
    """Oracle: numpy's own edge and reflect padding of the run."""
    mode = "edge" if edge is EdgePolicy.REPLICATE else "reflect"
    padded = np.pad(np.arange(start, end + 1), (slot, t - 1 - slot), mode=mode)
    offset = target - start
    return [int(v) for v in padded[offset : offset + t]]


windower_params = st.tuples(
    st.integers(1, 7),
    st.integers(1, 3),
    st.sampled_from(OutputPosition),
    st.sampled_from(EdgePolicy),
)


@settings(max_examples=300, deadline=None)
@given(
    params=windower_params,
    breaks=st.lists(st.sampled_from(BREAKS), min_size=1, max_size=40).map(lambda b: ["none", *b[1:]]),
)
def test_every_frame_gets_one_task_in_order_and_no_window_spans_a_break(
    params: tuple[int, int, OutputPosition, EdgePolicy], breaks: list[str]
) -> None:
    t, stride, position, edge = params
    windower = Windower(t, stride, position, edge, max_gap=1.0)
    frames, runs = build_stream(breaks)
    run_of = {f.index: r for f, r in zip(frames, runs, strict=True)}
    pushed_at = {f.index: n for n, f in enumerate(frames)}
    tasks: list[WindowTask] = []
    for n, frame in enumerate(frames):
        emitted = windower.push(frame)
        for task in emitted:
            # Every frame a task needs is among the last `history` pushed: a ring that size suffices.
            assert n - min(pushed_at[i] for i in task.indices) < windower.history
            assert max(task.indices) <= frame.index
        tasks.extend(emitted)
    tasks.extend(windower.flush())

    assert [task.target for task in tasks] == [f.index for f in frames]
    assert windower.discontinuities == runs[-1]
    for task in tasks:
        assert len(task.indices) == t
        assert task.indices[task.slot] == task.target
        assert task.slot == position.slot(t)
        assert {run_of[i] for i in task.indices} == {run_of[task.target]}
        members = [f.index for f in frames if run_of[f.index] == run_of[task.target]]
        assert list(task.indices) == expected_indices(
            task.target, members[0], members[-1], t, task.slot, edge
        )
        assert task.enhance == ((task.target - members[0]) % stride == 0)


@settings(max_examples=100, deadline=None)
@given(t=st.integers(1, 9), n=st.integers(1, 30), position=st.sampled_from(OutputPosition))
def test_replicate_emits_each_window_as_soon_as_its_lookahead_arrived(
    t: int, n: int, position: OutputPosition
) -> None:
    windower = Windower(t, position=position, edge=EdgePolicy.REPLICATE)
    emitted = 0
    for i in range(n):
        emitted += len(windower.push(make_frame(i)))
        assert emitted == max(0, i + 1 - windower.lookahead)
        assert windower.pending == i + 1 - emitted
    assert emitted + len(windower.flush()) == n


def test_center_window_in_steady_state_is_contiguous() -> None:
    windower = Windower(5, position=OutputPosition.CENTER)
    tasks = [task for i in range(10) for task in windower.push(make_frame(i))]
    assert tasks[0].indices == (0, 0, 0, 1, 2)
    assert tasks[4].indices == (2, 3, 4, 5, 6)
    assert windower.lookahead == 2


def test_last_position_is_causal() -> None:
    windower = Windower(3, position=OutputPosition.LAST)
    assert windower.lookahead == 0
    assert [task.indices for task in windower.push(make_frame(0))] == [(0, 0, 0)]
    assert [task.indices for task in windower.push(make_frame(1))] == [(0, 0, 1)]


def test_mirror_at_start_of_causal_window_waits_for_frames_it_reflects() -> None:
    windower = Windower(3, position=OutputPosition.LAST, edge=EdgePolicy.MIRROR)
    assert windower.push(make_frame(0)) == []
    assert windower.push(make_frame(1)) == []
    tasks = windower.push(make_frame(2))
    assert [task.indices for task in tasks] == [(2, 1, 0), (1, 0, 1), (0, 1, 2)]


def test_discontinuity_flushes_the_run_with_edge_padding() -> None:
    windower = Windower(3, position=OutputPosition.CENTER)
    windower.push(make_frame(0))
    windower.push(make_frame(1))
    tasks = windower.push(make_frame(2, discontinuity=True))
    assert [(task.target, task.indices, task.run) for task in tasks] == [(1, (0, 1, 1), 0)]
    assert windower.flush()[0].indices == (2, 2, 2)
    assert windower.discontinuities == 1


def test_frames_turning_from_rgb_to_planes_or_to_planes_of_another_colour_start_a_new_run() -> None:
    """A window's frames are all RGB or all 4:2:0 planes of one colour (a model on the device takes
    one kind per call): a source whose frames change kind ends the run, as a size change does."""

    def planes(index: int, colour: Colour) -> Frame:
        y = np.zeros((8, 8), np.uint8)
        half = np.zeros((4, 4), np.uint8)
        rgb = make_frame(index, size=(8, 8))
        return rgb.with_pixels(Yuv420(y, half, half.copy(), colour))

    windower = Windower(3, position=OutputPosition.CENTER)
    windower.push(make_frame(0, size=(8, 8)))
    windower.push(make_frame(1, size=(8, 8)))
    tasks = windower.push(planes(2, Colour(6, 1)))
    assert [(task.indices, task.run) for task in tasks] == [((0, 1, 1), 0)]
    windower.push(planes(3, Colour(6, 1)))
    tasks = windower.push(planes(4, Colour(1, 1)))
    assert [(task.indices, task.run) for task in tasks] == [((2, 3, 3), 1)]
    assert windower.discontinuities == 2


def test_missing_pts_never_breaks_a_run() -> None:
    windower = Windower(3)
    for i in range(4):
        windower.push(make_frame(i, pts=None))
    assert windower.discontinuities == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"t": 0}, "window.t"), ({"t": 3, "stride": 0}, "window.stride"), ({"t": 3, "max_gap": 0}, "max_gap")],
)
def test_bad_settings_name_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        Windower(**kwargs)
