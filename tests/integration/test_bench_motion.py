"""``streamer bench motion`` on a tiny scene, the scene itself, and the targets on given numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("skimage")
pytest.importorskip("cv2")

from streamer.bench.motion import GateRun, check_targets, make_scene
from streamer.errors import ConfigError
from tests.bench_cli import run_bench


def test_the_scene_is_static_but_for_the_object_crossing() -> None:
    scene, frames = make_scene(160, 90, 40, 0.1, 8.0, 0, 30)
    first, last = scene.moving
    assert (first, last) == (18, 21)
    assert len(frames) == 40
    assert frames[0].shape == (90, 160, 3)
    outside = [i for i in range(40) if not first <= i <= last]
    assert all(np.array_equal(frames[i], frames[0]) for i in outside)
    assert all(not np.array_equal(frames[i], frames[0]) for i in range(first, last + 1))


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_gate_off_and_on_run_on_the_same_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    json_path, md_path = tmp_path / "m.json", tmp_path / "m.md"
    argv = ["--size", "160x90", "--frames", "40", "--json", str(json_path), "--markdown", str(md_path)]
    assert run_bench("motion", argv) == 0

    report = json.loads(json_path.read_text())
    off, on, tiles = report["runs"]
    assert (off["gate"], on["gate"], tiles["gate"]) == ("off", "on", "tiles")
    assert off["frames"] == on["frames"] == tiles["frames"] == 40
    assert off["model_windows"] == 40
    assert off["pixels_enhanced"] == 40 * 160 * 90
    assert on["model_windows"] + on["reused"] == 40
    assert report["reduction"] == pytest.approx(1 - on["model_windows"] / 40)
    assert all(20 < run[key] < 60 for run in (off, on, tiles) for key in ("psnr_moving", "psnr_static"))
    assert 0 < tiles["pixels_enhanced"] <= on["pixels_enhanced"]
    assert tiles["seam_border"] is not None
    assert tiles["seam_interior"] is not None
    assert report["gate_settings"]["on_skip"] == "reuse"
    names = [t["name"][:11] for t in report["targets"]]
    assert names == ["model calls", "PSNR on the", "tiles: >= 3", "tiles: PSNR", "tiles: no s"]

    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "load average" in out
    assert "targets:" in out
    assert "| noisy input |" in md_path.read_text()


def _run(
    gate: str, windows: int, psnr_moving: float, pixels: int = 0, seam: tuple[float, float] | None = None
) -> GateRun:
    border, interior = seam if seam is not None else (None, None)
    counts = (300, windows, windows, 300 - windows)
    return GateRun(gate, *counts, psnr_moving, 35.0, 35.0, 30.0, {}, pixels, border, interior)


def test_targets_pass_and_fail_on_the_numbers() -> None:
    off = _run("off", 300, 33.75, 300 * 1000)
    tiles = _run("tiles", 40, 33.70, 12_000, (1.0, 1.0))
    assert [t.passed for t in check_targets(off, _run("on", 40, 33.70, 40_000), tiles)] == [True] * 5
    assert [t.passed for t in check_targets(off, _run("on", 61, 33.80, 61_000), tiles)][:2] == [False, True]
    assert [t.passed for t in check_targets(off, _run("on", 36, 33.28, 36_000), tiles)][:2] == [True, False]
    on = _run("on", 40, 33.70, 40_000)
    worse = [
        _run("tiles", 40, 33.70, 20_000, (1.0, 1.0)),  # only 2x fewer pixels
        _run("tiles", 40, 33.60, 12_000, (1.0, 1.0)),  # 0.15 dB lost on the moving frames
        _run("tiles", 40, 33.70, 12_000, (1.5, 1.0)),  # a seam
    ]
    assert [[t.passed for t in check_targets(off, on, w)][2:] for w in worse] == [
        [False, True, True],
        [True, False, True],
        [True, True, False],
    ]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--moving", "1.5"], "--moving"),
        (["--frames", "5"], "--frames"),
        (["--size", "33x20"], "--size"),
        (["--tile", "4"], "--tile"),
    ],
)
def test_bad_arguments_are_config_errors(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        run_bench("motion", argv)
