"""``streamer bench soak`` for a few seconds, and its target on given numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.bench.harness import sparkline
from streamer.bench.soak import check_targets
from streamer.errors import ConfigError
from tests.bench_cli import run_bench


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_short_soak_prints_the_rss_curve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    json_path, md_path = tmp_path / "s.json", tmp_path / "s.md"
    argv = ["--minutes", "0.1", "--warmup-s", "2", "--every-s", "2", "--size", "320x180"]
    assert run_bench("soak", [*argv, "--json", str(json_path), "--markdown", str(md_path)]) == 0

    report = json.loads(json_path.read_text())
    assert report["seconds"] == pytest.approx(6.0)
    assert [t for t, _ in report["curve"]] == [0, 2, 4, 6]
    assert all(mib > 0 for _, mib in report["curve"])
    assert report["frames_in"] > 0
    assert report["frames_out"] > 0
    assert report["model"].startswith("temporal_filter_t5")
    assert report["rss_growth"] == pytest.approx(
        (report["rss_end_mib"] - report["rss_warm_mib"]) / report["rss_warm_mib"]
    )
    (target,) = report["targets"]
    assert target["name"] == "RSS growth after warm-up under 5%"

    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "load average" in out
    assert "RSS " in out
    assert "targets:" in out
    assert md_path.read_text().startswith("| t (s) | RSS MiB | vs after warm-up |")


def test_target_passes_and_fails_on_the_numbers() -> None:
    assert check_targets(200.0, 209.0, 220.0, 225.0)[0].passed is True
    assert check_targets(200.0, 210.0, 220.0, 225.0)[0].passed is False
    assert check_targets(200.0, 150.0, 220.0, 225.0)[0].passed is True
    # Memory handed back between calls lowers the medians; a leak still raises the peaks.
    assert check_targets(200.0, 190.0, 220.0, 232.0)[0].passed is False


def test_sparkline_scales_between_lowest_and_highest() -> None:
    assert sparkline([1.0, 2.0, 3.0]) == "▁▅█"
    assert sparkline([5.0, 5.0]) == "▁▁"
    assert sparkline([]) == ""


def test_bad_minutes_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--minutes"):
        run_bench("soak", ["--minutes", "0"])
