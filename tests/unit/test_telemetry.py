"""onnxruntime's own usage reports: off in every process that loads streamer or its export tooling,
unless the operator says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
MODEL = ROOT / "streamer" / "assets" / "conv3d_t1.onnx"
SESSION = (
    "import onnxruntime as ort; "
    f"ort.InferenceSession({str(MODEL)!r}, providers=['CPUExecutionProvider']); "
    "print(os.environ.get('ORT_DISABLE_TELEMETRY'))"
)


def _run(first: str, home: Path, setting: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env |= {"HOME": str(home), "PYTHONPATH": str(ROOT)}
    if setting is not None:
        env["ORT_DISABLE_TELEMETRY"] = setting
    code = f"import os; {first}; {SESSION}"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize("first", ["import streamer.backend.onnx", "import export.card"])
def test_a_session_leaves_no_device_id_or_report_cache(tmp_path: Path, first: str) -> None:
    assert _run(first, tmp_path, None) == "1"
    assert not (tmp_path / ".cache" / "Microsoft").exists()


def test_an_operators_own_setting_stands(tmp_path: Path) -> None:
    assert _run("import streamer", tmp_path, "0") == "0"
