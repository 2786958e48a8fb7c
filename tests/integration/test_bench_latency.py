"""``streamer bench latency`` with few frames over both real paths (the GStreamer relay, aiortc peers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.assets import AUTO_TIERS, TEMPORAL_FILTER
from streamer.errors import ConfigError
from streamer.measure import rtsp_relay
from tests.bench_cli import run_bench


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_both_paths_are_measured_in_one_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = rtsp_relay.unavailable()
    if missing is not None:
        pytest.skip(f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    json_path, md_path = tmp_path / "latency.json", tmp_path / "latency.md"
    argv = ["--frames", "60", "--warmup", "15", "--json", str(json_path), "--markdown", str(md_path)]
    assert run_bench("latency", argv) == 0

    table = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split()
        for line in table.splitlines()
        if line.split()[:1] in (["rtsp"], ["webrtc"])
    }
    assert list(rows) == ["rtsp", "webrtc"]
    for cells in rows.values():
        assert cells[8] == "66.7"  # the lookahead column: 2 frame periods of the T=5 center model at 30 fps
    assert "latency is measured only on numbers seen for the first time" in table  # the reuse caveat

    report = json.loads(json_path.read_text())
    assert [r["path"] for r in report["rows"]] == ["rtsp", "webrtc"]
    assert report["skipped"] == []
    for row in report["rows"]:
        assert row["sent"] == 60
        assert row["received"] > 0
        assert 0 < row["measured"] <= row["sent"]
        assert row["lost"] == max(0, row["sent"] - row["received"])
        assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
        assert row["lookahead_frames"] == 2
        assert row["lookahead_ms"] == pytest.approx(2000 / 30)
        assert row["rest_p50_ms"] == pytest.approx(row["p50_ms"] - row["lookahead_ms"])
        assert row["pipeline_p50_ms"] <= row["pipeline_p95_ms"] <= row["pipeline_p99_ms"]
        assert row["report_p50_ms"] <= row["report_p95_ms"] <= row["report_p99_ms"]
        assert row["report_frames"] >= row["measured"]
        assert not row["timed_out"]
    markdown = md_path.read_text()
    assert "| rtsp (H.264) |" in markdown
    assert "| webrtc (" in markdown


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_without_the_gate_every_measured_frame_is_enhanced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path = tmp_path / "latency.json"
    argv = ["--frames", "20", "--warmup", "5", "--paths", "webrtc", "--no-gate", "--json", str(json_path)]
    assert run_bench("latency", [*argv, "--model", str(TEMPORAL_FILTER)]) == 0

    assert "gate off" in capsys.readouterr().out
    report = json.loads(json_path.read_text())
    assert report["settings"]["model"] == str(TEMPORAL_FILTER)  # a model path is written as its text
    (row,) = report["rows"]
    assert set(row["outcomes"]) == {"enhanced"}  # no window skipped, so no frame repeats another's number
    assert row["measured"] == row["received"]


def test_a_webrtc_camera_encoded_ahead_is_sent_as_its_vp8_packets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path = tmp_path / "latency.json"
    argv = ["--frames", "15", "--warmup", "5", "--paths", "webrtc", "--no-gate", "--camera", "ahead"]
    assert run_bench("latency", [*argv, "--model", str(TEMPORAL_FILTER), "--json", str(json_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "the camera's frames were encoded before the run (H.264 for RTSP, VP8 for WebRTC)" in out
    (row,) = json.loads(json_path.read_text())["rows"]
    assert row["codec"] == "H264"  # the player's offer takes H.264: it shares the one encode
    assert row["received"] == row["sent"] == 15  # every packet sent came through streamer, decoded


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_by_default_it_runs_the_tier_a_live_stream_gets_and_names_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--frames", "10", "--warmup", "5", "--paths", "webrtc", "--no-gate", "--size", "320x180"]
    assert run_bench("latency", argv) == 0  # no --model: model auto, as a live stream with none named
    out = " ".join(capsys.readouterr().out.split())
    assert "auto (each path's tier on its line; T=5, center)" in out
    assert any(f"; model {p.stem.replace('.int8', '-int8')};" in out for p in AUTO_TIERS)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--size", "641x360"], "--size"),
        (["--size", "64x64"], "--size"),
        (["--size", "wide"], "--size"),
        (["--paths", "rtsp,hls"], "--paths"),
        (["--paths", "rtsp,rtsp"], "--paths"),
        (["--frames", "0"], "--frames"),
        (["--fps", "0"], "--fps"),
        (["--model", "/nonexistent.onnx"], "--model '/nonexistent.onnx' is not a file"),
    ],
)
def test_bad_arguments_are_config_errors_naming_the_flag(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        run_bench("latency", argv)


def test_without_gstreamer_the_rtsp_path_is_skipped_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(rtsp_relay, "unavailable", lambda: "/usr/bin/python3 cannot import GstRtspServer")
    assert run_bench("latency", ["--paths", "rtsp", "--frames", "10"]) == 0
    out = capsys.readouterr().out
    assert "rtsp: skipped: /usr/bin/python3 cannot import GstRtspServer; install it with: apt-get" in out
