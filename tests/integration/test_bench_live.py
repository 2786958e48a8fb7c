"""``streamer bench live`` for a few seconds through the real GStreamer relay: one row per size and tier."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from streamer.assets import AUTO_TIERS, TEMPORAL_FILTER
from streamer.bench.latency_measure import TierShift
from streamer.bench.live import LiveRow, check_targets, format_markdown, format_table
from streamer.errors import ConfigError
from streamer.measure import rtsp_relay
from streamer.measure.machine import Machine
from tests.bench_cli import run_bench


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_each_tier_gets_a_row_with_shares_latency_cpu_and_the_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = rtsp_relay.unavailable()
    if missing is not None:
        pytest.skip(f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    json_path, md_path = tmp_path / "live.json", tmp_path / "live.md"
    models = ["--model", str(TEMPORAL_FILTER), "--model", "auto"]
    argv = ["--sizes", "320x180", "--seconds", "2", "--budget-ms", "2000", "--workers", "2", "--threads", "1"]
    argv += models
    assert run_bench("live", [*argv, "--json", str(json_path), "--markdown", str(md_path)]) == 0

    table = capsys.readouterr().out
    assert "streamer bench live" in table
    assert "targets:" in table
    assert "camera frames encoded before each run" in table  # the default: the cores are streamer's
    report = json.loads(json_path.read_text())
    window, auto = (r["model"] for r in report["rows"])
    assert window == "temporal_filter_t5"
    assert auto in {f"auto: {p.stem.replace('.int8', '-int8')}" for p in AUTO_TIERS}  # what keeps up here
    assert report["machine"]["cpu"]
    assert isinstance(report["machine"]["isa"], list)
    for row in report["rows"]:
        assert row["size"] == "320x180"
        assert row["sent"] == 60
        assert row["enhanced"] + row["passed_through"] + row["lost"] <= row["sent"]
        assert row["enhanced"] > 0  # a 2 s budget leaves time for any tier at this size; and the packets
        # encoded ahead carry their parameter sets in band, so the stream plays end to end
        assert row["camera"] == "ahead"
        assert row["p50_ms"] <= row["p99_ms"]
        assert row["model_fps"] > 0
        assert row["threads"] == 1
        assert row["workers"] == 2
        assert row["cpu_percent"] > 0
        assert row["pipeline_p50_ms"] <= row["pipeline_p99_ms"]
        stages = row["stages_ms"]
        assert {"decode", "window_wait", "inference", "encode", "end_to_end"} <= set(stages)
        assert all(ms >= 0.0 for ms in stages.values())
    assert "inside streamer (arrival to written" in table
    assert f"rtsp 320x180 {auto}: p50 " in table
    assert f"| rtsp | 320x180 | {auto} | auto | 2/1/d |" in md_path.read_text()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_both_rtsp_readers_get_a_row(tmp_path: Path) -> None:
    missing = rtsp_relay.unavailable()
    if missing is not None:
        pytest.skip(f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    json_path = tmp_path / "live.json"
    argv = ["--sizes", "320x180", "--seconds", "2", "--budget-ms", "2000", "--model", str(TEMPORAL_FILTER)]
    assert run_bench("live", [*argv, "--reader", "ffmpeg,auto", "--json", str(json_path)]) == 0
    rows = json.loads(json_path.read_text())["rows"]
    assert [r["reader"] for r in rows] == ["ffmpeg", "auto"]
    assert all(r["sent"] == 60 and r["enhanced"] > 0 for r in rows)
    for row in rows:  # a stage's mean per frame cannot be longer than the whole run
        assert all(ms <= row["seconds"] * 1000 for ms in row["stages_ms"].values()), row["stages_ms"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_webrtc_path_runs_as_configs_webrtc_yaml_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path = tmp_path / "live.json"
    argv = ["--paths", "webrtc", "--sizes", "320x180", "--seconds", "2", "--budget-ms", "2000"]
    assert run_bench("live", [*argv, "--json", str(json_path)]) == 0
    table = capsys.readouterr().out
    assert "webrtc: WHIP publisher (VP8) -> streamer -> WHEP -> aiortc player" in table
    assert ">= 99% enhanced at 640x360 (webrtc): not measured in this run" in table
    (row,) = json.loads(json_path.read_text())["rows"]
    assert row["path"] == "webrtc"
    assert row["reader"] == "-"  # the RTSP reader plays no part
    assert row["camera"] == "ahead"  # VP8 encoded before the run, sent as packets
    assert row["model"] in {f"auto: {p.stem.replace('.int8', '-int8')}" for p in AUTO_TIERS}
    assert row["sent"] == 60
    assert row["enhanced"] > 0
    assert row["enhanced"] + row["passed_through"] + row["lost"] <= row["sent"]
    assert "decode" in row["stages_ms"]  # a service ran the stream: its metrics timed the stages


def test_bad_arguments_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="--paths 'rtsp,hls': give rtsp and/or webrtc"):
        run_bench("live", ["--sizes", "320x180", "--paths", "rtsp,hls"])
    with pytest.raises(ConfigError, match="WIDTHxHEIGHT"):
        run_bench("live", ["--sizes", "big"])
    with pytest.raises(ConfigError, match="--seconds and --budget-ms must be positive"):
        run_bench("live", ["--sizes", "320x180", "--seconds", "0"])
    with pytest.raises(ConfigError, match="--threads takes counts"):
        run_bench("live", ["--sizes", "320x180", "--threads", "0"])
    with pytest.raises(ConfigError, match="is not a file"):
        run_bench("live", ["--sizes", "320x180", "--model", "/nonexistent.onnx"])
    with pytest.raises(ConfigError, match="--reader 'live555': give auto, ffmpeg or both"):
        run_bench("live", ["--sizes", "320x180", "--reader", "auto,live555"])


def _row(model: str, enhanced: int, p99_ms: float, lost: int = 0) -> LiveRow:
    return LiveRow(
        size="640x360",
        path="rtsp",
        model=model,
        sent=1000,
        enhanced=enhanced,
        passed_through=1000 - enhanced,
        lost=lost,
        source_dropped=0,
        p50_ms=200.0,
        p99_ms=p99_ms,
        budget_ms=250.0,
        model_fps=40.0,
        cpu_percent=180.0,
        seconds=60.0,
    )


def test_the_360p_target_needs_one_tier_meeting_all_three() -> None:
    def verdict(*rows: LiveRow) -> tuple[bool | None, str]:
        (target,) = [t for t in check_targets(list(rows)) if "640x360 (rtsp)" in t.name]
        return target.passed, target.detail

    # The tier enhancing most is over the budget; another meets everything: that one is reported.
    assert verdict(_row("lite", 1000, 276.0), _row("auto", 994, 247.0)) == (
        True,
        "auto: 99.4% enhanced, 0 lost, p99 247 ms vs budget 250 ms",
    )
    assert verdict(_row("lite", 1000, 276.0), _row("auto", 980, 240.0))[0] is False
    assert verdict(_row("lite", 995, 240.0, lost=1))[0] is False


def test_load_needs_a_run_that_outlasts_it_and_headroom_its_range() -> None:
    with pytest.raises(ConfigError, match="--load takes a core 30-60 s into the run"):
        run_bench("live", ["--sizes", "320x180", "--load", "--seconds", "45"])
    with pytest.raises(ConfigError, match=r"--headroom 0\.5: give model\.headroom.s range"):
        run_bench("live", ["--sizes", "320x180", "--headroom", "0.5"])


def test_the_table_lists_each_tier_move_with_its_time_and_the_load() -> None:
    moved = dataclasses.replace(
        _row("auto: stream_t5_quarter_sep", 900, 240.0),
        load=(30.0, 60.0),
        moves=(TierShift(33.4, "stream_t5_lite_sep", "stream_t5_quarter_sep", "82% enhanced over 5 s"),),
    )
    machine = Machine("a CPU", 2, "1.32.0", "CPUExecutionProvider", 0.1, 0.1, ("avx2",))
    table = format_table([moved, _row("temporal_filter_t5", 1000, 100.0)], machine, 30, 90.0, 100.0)
    assert (
        "rtsp 640x360 auto: stream_t5_quarter_sep: one core taken 30-60 s; moves: 33.4 s "
        "stream_t5_lite_sep -> stream_t5_quarter_sep (82% enhanced over 5 s)"
    ) in table
    assert sum("; moves: " in line for line in table.splitlines()) == 1  # no load and no move: no line
    assert "- rtsp 640x360 auto: stream_t5_quarter_sep: one core taken" in format_markdown(
        [moved], machine, 30, 90.0
    )
