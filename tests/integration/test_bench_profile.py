"""``streamer bench profile`` on the shipped streaming model and on a small window model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.errors import ConfigError
from tests.bench_cli import run_bench
from tests.onnx_models import kind_model


def test_a_streaming_model_is_profiled_by_graph_and_operator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "profile.json"
    assert run_bench("profile", ["--size", "96x64", "--frames", "3", "--json", str(out)]) == 0
    result = json.loads(out.read_text())["result"]
    assert result["model"] == "stream_t5_lite"
    graphs = {op["graph"] for op in result["ops"]}
    assert graphs == {"model", "encoder"}
    conv = [op for op in result["ops"] if op["op"] == "Conv"]
    assert conv
    assert all(op["nodes"] >= 1 for op in conv)
    assert 0 < result["kernels_ms"] == pytest.approx(sum(op["ms"] for op in result["ops"]))
    assert result["heaviest"][0]["ms"] >= result["heaviest"][-1]["ms"]
    table = capsys.readouterr().out
    assert "wall per frame (median)" in table
    assert "heaviest nodes:" in table


def test_a_window_model_has_one_graph(tmp_path: Path) -> None:
    model = kind_model(tmp_path / "m.onnx", layout="N(T*C)HW")
    out = tmp_path / "profile.json"
    assert (
        run_bench("profile", ["--model", str(model), "--size", "64x48", "--frames", "2", "--json", str(out)])
        == 0
    )
    result = json.loads(out.read_text())["result"]
    assert {op["graph"] for op in result["ops"]} == {"model"}
    assert "Slice" in {op["op"] for op in result["ops"]}


@pytest.mark.parametrize("argv", [["--frames", "0"], ["--threads", "0"], ["--size", "640"]])
def test_bad_flags_are_one_line(argv: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"--(frames|threads|size)"):
        run_bench("profile", argv)
