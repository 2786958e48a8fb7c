"""``streamer bench admission`` for a second per scenario, and its targets on given numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.bench.admission import AdmissionRow, check_targets
from streamer.errors import ConfigError
from tests.bench_cli import run_bench


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_both_scenarios_run_and_report_their_peak_against_the_budget(tmp_path: Path) -> None:
    json_path, md_path = tmp_path / "a.json", tmp_path / "a.md"
    argv = ["--budget-mb", "600", "--seconds", "1", "--json", str(json_path), "--markdown", str(md_path)]
    assert run_bench("admission", argv) == 0
    rows = json.loads(json_path.read_text())["rows"]
    assert [r["scenario"] for r in rows] == ["large", "small"]
    for row in rows:
        assert row["admitted"]  # something fitted
        assert "memory budget are left" in row["refused"]  # and something did not
        assert 0 < row["baseline_mb"] < row["peak_mb"]
    assert rows[0]["admitted"] != ["7680x4320"]
    assert "| large | 600 |" in md_path.read_text()


def test_a_peak_past_the_budget_fails_the_target() -> None:
    over = AdmissionRow("large", 1500, 121.0, ["1920x1080"], None, 1527.0, 15.0)
    (target,) = check_targets([over])
    assert target.passed is False
    assert "peak 1527 MB (102%)" in target.detail


def test_nonsense_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="--budget-mb"):
        run_bench("admission", ["--budget-mb", "1"])
