"""``streamer bench streams``: live cameras through the whole service, decode and encode included.

Run small here (the default model on the CPU provider, tiny frames): what is checked is what the bench
counts and reports, never whether this machine holds a count, which is a timing.
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path

import av
import pytest

from streamer.bench import register
from streamer.bench.streams import _shares, camera_clip, format_markdown, format_table, run_streams
from streamer.errors import ConfigError


def test_the_camera_clip_is_h264_of_the_size_rate_and_length_asked(tmp_path: Path) -> None:
    kbps = camera_clip(tmp_path / "camera.mp4", (160, 96), 10, seconds=2)
    with av.open(str(tmp_path / "camera.mp4")) as clip:
        stream = clip.streams.video[0]
        codec, rate = stream.codec_context.name, stream.average_rate
        frames = list(clip.decode(stream))
    assert codec == "h264"
    assert (frames[0].width, frames[0].height, len(frames)) == (160, 96, 20)
    assert rate == Fraction(10)
    assert kbps > 0


def test_each_count_runs_its_streams_and_accounts_for_every_measured_frame(tmp_path: Path) -> None:
    report = run_streams(
        [2, 1], size=(160, 96), fps=10, seconds=2.0, warmup_s=1.5, max_batch=2, decode="cpu", encode="libx264"
    )
    assert [r.streams for r in report.runs] == [1, 2]  # ascending
    for run in report.runs:
        assert run.ran == run.streams
        assert not run.errors
        assert run.arrived == sum(run.outcomes.values()) > 0
        assert run.decoded >= run.arrived
        assert run.p50_ms is not None
        assert run.p99_ms is not None
        assert run.p50_ms <= run.p99_ms
        assert set(run.p99_by_outcome_ms) == set(run.outcomes)
        if len(run.outcomes) == 1:  # all frames left one way
            assert list(run.p99_by_outcome_ms.values()) == [run.p99_ms]
        assert run.calls > 0 or not run.outcomes.get("enhanced")  # enhanced frames were model calls
        assert run.windows >= run.calls
        said = f"{run.streams} streams: {run.late} windows not run" in format_table(report)
        assert said == (run.late > 0)  # said where any were
        assert run.provider == "CPUExecutionProvider"
        assert 0.0 < run.loop_cores <= run.cores + 0.05  # one thread of the process, busy with every frame
        assert sorted(run.by_stream) == [f"cam{k}" for k in range(run.streams)]
        assert sum(arrived for arrived, _ in run.by_stream.values()) == run.arrived
        assert sum(enhanced for _, enhanced in run.by_stream.values()) == run.outcomes.get("enhanced", 0)
        assert run.least_enhanced_share <= run.enhanced_share
        assert run.holds(report.budget_ms) == (
            run.least_enhanced_share >= 0.99 and run.p99_ms <= report.budget_ms and run.dropped_share < 0.01
        )
    assert report.most_held in (0, 1, 2)
    table = format_table(report)
    assert "host cores" in table
    assert "event loop cores" in table
    assert "decode cpu, encode libx264" in table
    assert format_markdown(report).startswith("| streams | ran |")


def test_its_command_line_writes_json_and_refuses_bad_counts(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "streams.json"
    args = parser.parse_args(
        [
            "bench",
            "streams",
            "--streams",
            "1",
            "--size",
            "160x96",
            "--fps",
            "10",
            "--seconds",
            "1.5",
            "--warmup-s",
            "1",
            "--decode",
            "cpu",
            "--encode",
            "libx264",
            "--json",
            str(out),
        ]
    )
    assert args.func(args) == 0
    data = json.loads(out.read_text())
    assert data["runs"][0]["streams"] == 1
    assert "most_held" in data
    assert data["targets"]
    for bad in ("0", "a,b", "1,999"):
        args = parser.parse_args(["bench", "streams", "--streams", bad])
        with pytest.raises(ConfigError, match="--streams"):
            args.func(args)
    for flag, bad in (("--fps", "0"), ("--size", "161x96"), ("--seconds", "nan"), ("--processes", "0")):
        args = parser.parse_args(["bench", "streams", flag, bad])
        with pytest.raises(ConfigError, match=flag):
            args.func(args)


def test_cameras_split_over_processes_are_measured_as_one_run() -> None:
    report = run_streams(
        [3], size=(160, 96), fps=10, seconds=2.0, warmup_s=1.5, decode="cpu", encode="libx264", processes=2
    )
    (run,) = report.runs
    assert (run.streams, run.ran, run.processes) == (3, 3, 2)  # cameras 0 and 1 in one, 2 in the other
    assert not run.errors
    assert run.arrived == sum(run.outcomes.values()) > 0
    assert run.p99_ms is not None
    assert 0.0 < run.loop_cores <= run.cores  # the busiest of two loops, of two processes' cores
    assert "split over 2 services" in format_table(report)


def test_cameras_are_shared_out_evenly_and_no_process_is_left_without_one() -> None:
    assert _shares(7, 3) == [(0, 3), (3, 2), (5, 2)]
    assert _shares(2, 4) == [(0, 1), (1, 1)]
    assert _shares(1, 1) == [(0, 1)]
