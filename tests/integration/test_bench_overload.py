"""``streamer bench overload`` for a few seconds, and its targets on given numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.bench.overload import OverloadRun, check_targets
from streamer.errors import ConfigError
from tests.bench_cli import run_bench


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_budget_on_and_off_both_run_and_memory_is_sampled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, md_path = tmp_path / "o.json", tmp_path / "o.md"
    argv = ["--size", "320x180", "--seconds", "4", "--warmup-s", "1", "--budget-ms", "300"]
    assert run_bench("overload", [*argv, "--json", str(json_path), "--markdown", str(md_path)]) == 0

    report = json.loads(json_path.read_text())
    on, off = report["runs"]
    assert (on["label"], on["budget_ms"], off["label"], off["budget_ms"]) == (
        "budget on",
        300,
        "budget off",
        None,
    )
    for run in (on, off):
        assert run["frames_in"] > 0
        assert run["frames_out"] <= run["frames_in"]
        assert run["measured"] > 0
        assert run["p50_ms"] <= run["p95_ms"] <= run["p99_ms"] <= run["max_ms"]
        assert len(run["rss_curve_mib"]) >= 4  # a sample a second
        assert run["rss_warm_mib"] > 0
        assert run["rss_end_mib"] > 0
    assert "budget_passthrough" not in off["outcomes"]
    names = [t["name"] for t in report["targets"]]
    assert names[0] == "budget on: end-to-end p99 within the 300 ms budget"
    assert len(names) == 3

    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "load average" in out
    assert "targets:" in out
    assert "| budget on (300 ms) |" in md_path.read_text()


def _run(label: str, budget: float | None, p99: float | None, warm: float, end: float) -> OverloadRun:
    return OverloadRun(
        label, budget, 30.0, 900, 890, 10, {}, {}, 50, 600, 80.0, 150.0, p99, 200.0, 100.0, warm, end,
        (end - warm) / warm, (), 120.0, 60,
    )  # fmt: skip


def test_targets_pass_and_fail_on_the_numbers() -> None:
    targets = check_targets([_run("on", 250, 240.0, 300, 310), _run("off", None, 1200.0, 300, 330)])
    assert [(t.name.split(":")[0], t.passed) for t in targets] == [("on", True), ("on", True), ("off", False)]
    assert check_targets([_run("on", 250, 251.0, 300, 300)])[0].passed is False
    assert check_targets([_run("on", 250, None, 300, 300)])[0].passed is False


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(["--seconds", "2", "--warmup-s", "3"], "--seconds"), (["--budget-ms", "0"], "--budget-ms")],
)
def test_bad_arguments_are_config_errors(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        run_bench("overload", argv)
