"""``streamer bench keepalive``, ``whep`` and ``memory`` for a few seconds, with real peers and models.

The figures these benchmarks exist for (gaps in milliseconds, memory after a minute) are timings and
belong in their reports; here each runs short and the tests check what does not depend on the load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.errors import ConfigError
from streamer.measure import rtsp_relay
from tests.bench_cli import run_bench

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_keepalive_bench_keeps_the_reader_through_an_outage_and_resumes_enhanced(tmp_path: Path) -> None:
    missing = rtsp_relay.unavailable()
    if missing is not None:
        pytest.skip(f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    out = tmp_path / "keepalive.json"
    argv = ["--outage-s", "4", "--before-s", "2", "--after-s", "3", "--reader-timeout-s", "3"]
    assert run_bench("keepalive", [*argv, "--card-after-s", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())["result"]
    assert result["reader_sessions_ended"] == 0  # 4 s without a camera, past the reader's 3 s timeout
    assert result["seen_during_outage"] > 0
    assert result["cards_seen"] > 0
    assert result["repeats"] > 0
    assert result["second_camera_enhanced"] > 0


@pytest.mark.timeout(120)
def test_whep_bench_accepts_the_cap_and_answers_the_rest_503(tmp_path: Path) -> None:
    out = tmp_path / "whep.json"
    argv = ["--players", "6", "--cap", "2", "--hold-s", "3", "--after-s", "2", "--warmup-s", "3"]
    assert run_bench("whep", [*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())["result"]
    assert result["answered"] == {"201": 2, "503": 4}
    assert result["retry_after"] is True
    assert result["frames_per_player"] > 0  # the players decode the H.264 encode they share
    assert result["rss_before_mb"] > 0
    assert result["shared_h264"] is True


def test_bad_arguments_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="--players and --cap"):
        run_bench("whep", ["--players", "0"])
    with pytest.raises(ConfigError, match="--outage-s must be"):
        run_bench("keepalive", ["--outage-s", "0"])


def test_memory_bench_measures_a_model_and_writes_its_card(tmp_path: Path) -> None:
    model = tmp_path / "filter.onnx"
    model.write_bytes(TEMPORAL_FILTER.read_bytes())
    (tmp_path / "filter.json").write_text(json.dumps({"name": "filter"}))
    out = tmp_path / "memory.json"
    argv = ["--size", "1280x720", "--model", str(model), "--write-cards", "--json", str(out)]
    assert run_bench("memory", argv) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["bytes_per_pixel"] > 0
    card = json.loads((tmp_path / "filter.json").read_text())
    assert card["name"] == "filter"  # the rest of the card is kept
    assert card["activation_bytes_per_pixel"] >= row["bytes_per_pixel"]
