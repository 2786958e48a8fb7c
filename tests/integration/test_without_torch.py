"""The runtime install, as a user has it: torch, OpenCV and scikit-image (the export extra) are absent.

A prelude marks them absent the way a missing package is (``sys.modules[name] = None``: importing raises
ModuleNotFoundError, ``importlib.util.find_spec`` answers None), then runs the real CLI in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamer.assets import TEMPORAL_FILTER
from tests.media import probe

ROOT = Path(__file__).resolve().parents[2]
EXPORT_EXTRA = ("torch", "cv2", "skimage")
PRELUDE = (
    "import sys\n"
    f"for name in {EXPORT_EXTRA!r}:\n"
    "    sys.modules[name] = None\n"
    "from streamer.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _streamer(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("export", "--arch", "conv3d", "--out", "{tmp}/model.onnx"),
        ("export", "--checkpoint", "{tmp}/run/checkpoint.pt", "--out", "{tmp}/model.onnx"),
        ("train", "--arch", "conv3d", "--steps", "1", "--out", "{tmp}/run"),
    ],
)
def test_export_and_train_say_in_one_line_what_to_install(tmp_path: Path, argv: tuple[str, ...]) -> None:
    command = argv[0]
    result = _streamer(*(arg.format(tmp=tmp_path) for arg in argv))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"streamer: error: streamer {command} needs torch, opencv-python-headless, scikit-image, which the "
        "runtime install leaves out; install the export extra: pip install -e '.[export]'"
    )
    assert not any(tmp_path.iterdir()), "nothing is written before the check"


def test_help_lists_every_command() -> None:
    result = _streamer("--help")
    assert result.returncode == 0, result.stderr
    for command in ("run", "demo", "export", "train", "bench"):
        assert command in result.stdout


@pytest.mark.slow
def test_run_enhances_a_synthetic_stream(tmp_path: Path) -> None:
    out = tmp_path / "out.mp4"
    result = _streamer(
        "run",
        *("--model", str(TEMPORAL_FILTER), "--output", str(out), "--no-progress"),
        *("--set", "source.width=64", "--set", "source.height=48", "--set", "source.frames=12"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "12 in, 12 out" in result.stdout
    written = probe(out)
    assert (written.frames, written.width, written.height) == (12, 64, 48)
