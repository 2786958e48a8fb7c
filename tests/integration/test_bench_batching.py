"""``streamer bench batching`` on a tiny run, and its targets on given numbers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from streamer.bench.batching import BatchingReport, Side
from streamer.errors import ConfigError
from streamer.measure.machine import Machine
from tests.bench_cli import run_bench

FAST_MODEL = Path(__file__).parents[2] / "streamer" / "assets" / "temporal_filter_t5.onnx"


@pytest.mark.slow
def test_a_tiny_run_prints_both_sides_and_their_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, md_path = tmp_path / "b.json", tmp_path / "b.md"
    argv = ["--streams", "3", "--frames", "12", "--size", "96x64", "--repeats", "1", "--max-batch", "3"]
    assert (
        run_bench(
            "batching",
            [*argv, "--model", str(FAST_MODEL), "--json", str(json_path), "--markdown", str(md_path)],
        )
        == 0
    )
    report = json.loads(json_path.read_text())
    assert [r["batching"] for r in report["rounds"]] == [True, False]
    assert all(r["frames"] == 36 for r in report["rounds"])  # every frame of every stream, both sides
    assert all(r["windows"] == 36 for r in report["rounds"])  # the gate is off: each window ran the model
    assert set(report["model_ms_per_window"]) == {"1", "3"}
    off = report["rounds"][1]
    assert off["calls"] == 36
    assert report["rounds"][0]["calls"] < 36
    assert [t["name"] for t in report["targets"]] == [
        "model calls per second fall with batching on",
        "throughput rises with batching on",
    ]
    out = capsys.readouterr().out
    assert "| on / off |" in out
    assert "load average" in out
    assert md_path.read_text().startswith("| batching |")


def test_targets_pass_and_fail_on_the_numbers() -> None:
    machine = Machine("cpu", 2, "1", "CPU", 0.0, 0.0)
    side = Side(fps=100.0, calls_per_s=100.0, mean_batch=1.0, fairness=1.0, calls=100)
    report = BatchingReport(8, (320, 180), 60, 8, 5.0, "m", "CPU", side, side, [], machine, {1: 2.0, 8: 1.5})
    better = replace(report, on=replace(side, fps=120.0, calls_per_s=15.0))
    worse = replace(report, on=replace(side, fps=90.0, calls_per_s=15.0))
    assert [t.passed for t in better.targets()] == [True, True]
    assert [t.passed for t in worse.targets()] == [True, False]


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="--max-batch"):
        run_bench("batching", ["--max-batch", "1"])
