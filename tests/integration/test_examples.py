"""examples/README.md's commands: the example models exported with --factory and run on a real clip."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from streamer.cli.main import main
from tests.media import probe

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("factory", "flags", "value_range"),
    [
        ("make_denoiser", ["--t", "3", "--position", "center", "--layout", "NCTHW"], [0.0, 1.0]),
        ("make_levels_denoiser", ["--layout", "NCHW", "--value-range=0,255"], [0.0, 255.0]),
        (
            "make_recurrent_denoiser",
            [
                *("--t", "1", "--position", "last", "--layout", "NTCHW"),
                *("--pad-multiple", "2", "--state", "memory:8:2"),
            ],
            [0.0, 1.0],
        ),
    ],
)
def test_an_example_model_exports_with_its_card_and_runs(
    factory: str,
    flags: list[str],
    value_range: list[float],
    tmp_path: Path,
    make_clip: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)  # as the README runs it: from the repository root
    model = tmp_path / f"{factory}.onnx"
    exported = ["export", "--factory", f"examples.mymodels:{factory}", *flags, "--out", str(model)]
    assert main([*exported, "--no-bench"]) == 0
    card = json.loads(model.with_suffix(".json").read_text())
    assert card["value_range"] == value_range
    clip, out = make_clip("in.mp4", frames=12), tmp_path / "out.mp4"
    assert (
        main(["run", "--model", str(model), "--input", str(clip), "--output", str(out), "--no-progress"]) == 0
    )
    assert probe(out).frames == probe(clip).frames == 12
