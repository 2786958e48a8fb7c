"""``streamer bench speed``: the shipped recurrent and window models side by side in alternating rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.errors import ConfigError
from tests.bench_cli import run_bench


def test_the_shipped_models_are_timed_in_rounds_and_compared_to_conv3d_t5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "speed.json"
    argv = ["--size", "64x48", "--rounds", "2", "--seconds", "0.05", "--json", str(out)]
    models = ["--model", "lstm=shipped:convlstm", "--model", "shipped:conv3d_t5"]
    assert run_bench("speed", [*argv, *models]) == 0
    data = json.loads(out.read_text())
    assert data["baseline"] == "conv3d_t5"
    rows = {row["model"]: row for row in data["rows"]}
    assert set(rows) == {"lstm", "conv3d_t5"}
    assert rows["lstm"]["recurrent"]
    assert not rows["conv3d_t5"]["recurrent"]
    assert all(len(row["fps"]) == 2 and min(row["fps"]) > 0 for row in rows.values())
    assert rows["conv3d_t5"]["ratio"] == 1.0
    assert [t["name"] for t in data["targets"]] == ["lstm at least conv3d_t5's fps"]
    assert data["targets"][0]["verdict"] in {"PASS", "FAIL"}
    table = capsys.readouterr().out
    assert "round 2/2" in table
    assert "x conv3d_t5" in table


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--rounds", "0"], "--rounds"),
        (["--seconds", "0"], "--seconds"),
        (["--size", "640"], "--size"),
        (["--model", "shipped:nope"], "no shipped model 'nope'"),
        (["--model", "/nonexistent.onnx"], "is not a file"),
        (["--model", "shipped:conv3d_t1", "--baseline", "conv3d_t5"], "--baseline 'conv3d_t5' is not one"),
        (["--model", "shipped:conv3d_t1", "--model", "shipped:conv3d_t1"], "two models share a name"),
    ],
)
def test_bad_flags_are_one_line(argv: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        run_bench("speed", ["--seconds", "0.05", "--rounds", "1", "--size", "64x48", *argv])
