"""``streamer bench overhead`` tiny (two small sizes, few frames), and its targets on given numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.bench.overhead import CoreCost, Run, SizeResult, check_targets, size_result
from streamer.errors import ConfigError
from tests.bench_cli import run_bench


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_both_contenders_run_every_size_and_the_core_is_timed(
    real_clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, md_path = tmp_path / "o.json", tmp_path / "o.md"
    argv = ["--clip", str(real_clip), "--sizes", "160x90,128x72", "--frames", "12", "--repeats", "2"]
    argv += ["--core-size", "1920x1080", "--core-frames", "20", "--json", str(json_path)]
    assert run_bench("overhead", [*argv, "--markdown", str(md_path)]) == 0

    report = json.loads(json_path.read_text())
    assert [(s["width"], s["height"]) for s in report["sizes"]] == [(160, 90), (128, 72)]
    for size in report["sizes"]:
        assert size["frames"] == 12
        runs = size["runs"]
        # Rounds alternate who goes first: p b, b p.
        assert [r["contender"] for r in runs] == ["pipeline", "bare", "bare", "pipeline"]
        assert all(r["frames"] == 12 and r["wall_s"] > 0 for r in runs)
        fps = [r["frames"] / r["wall_s"] for r in runs]
        rounds = [fps[0] / fps[1], fps[3] / fps[2]]
        assert size["round_ratios"] == pytest.approx(rounds)
        assert size["ratio"] == pytest.approx(sum(rounds) / 2)  # the median of two
    core = report["core"]
    assert (core["width"], core["height"], core["frames"]) == (1920, 1080, 20)
    assert set(core["parts_median_ms"]) == {"ring", "scene cut", "windower", "window + gate"}
    assert len(report["targets"]) == 3
    assert {t["passed"] for t in report["targets"]} <= {True, False}
    assert report["machine"]["cores"] >= 1

    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "load average" in out
    assert "onnxruntime" in out
    assert "PASS pipeline within 10%" in out or "FAIL pipeline within 10%" in out
    markdown = md_path.read_text()
    assert "| 160x90 | 12 |" in markdown
    assert "| **total** (1920x1080" in markdown


def _size(bare: float, pipeline: float) -> SizeResult:
    runs = (Run("pipeline", 0, 100, 100, 100 / pipeline), Run("bare", 0, 100, 100, 100 / bare))
    return size_result((640, 360), 100, runs)


def test_the_ratio_is_the_median_of_each_rounds_own_ratio() -> None:
    # Load halves both contenders' speed in round 1: each round still compares like with like.
    runs = [
        Run("pipeline", 0, 100, 100, 100 / 19.0),
        Run("bare", 0, 100, 100, 100 / 20.0),
        Run("bare", 1, 100, 100, 100 / 10.0),
        Run("pipeline", 1, 100, 100, 100 / 9.0),
        Run("pipeline", 2, 100, 100, 100 / 18.0),
        Run("bare", 2, 100, 100, 100 / 20.0),
    ]
    result = size_result((640, 360), 100, runs)
    assert result.round_ratios == pytest.approx((0.95, 0.9, 0.9))
    assert result.ratio == pytest.approx(0.9)
    assert result.bare_fps == pytest.approx(20.0)


def _core(median_ms: float, width: int = 1920, height: int = 1080) -> CoreCost:
    return CoreCost(width, height, 100, median_ms, median_ms * 1.5, {})


def test_targets_pass_and_fail_on_the_numbers() -> None:
    verdicts = [t.passed for t in check_targets([_size(30.0, 28.0), _size(30.0, 26.0)], _core(0.8))]
    assert verdicts == [True, False, True]
    assert [t.passed for t in check_targets([_size(7.0, 7.5)], _core(1.2))] == [True, False]
    # The core target is about 1080p frames; another size cannot decide it.
    assert check_targets([], _core(0.1, 640, 360))[0].passed is None


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--sizes", "641x360"], "--sizes"),
        (["--sizes", "big"], "--sizes"),
        (["--core-size", "1920x1080,640x360"], "--core-size"),
        (["--frames", "1"], "--frames"),
        (["--set", "window"], "override"),
    ],
)
def test_bad_arguments_are_config_errors(argv: list[str], flag: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=flag):
        run_bench("overhead", argv)
