"""The package's public API: a version, and each public name importable from ``streamer`` itself
without ``import streamer`` loading the media and model libraries."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import streamer

ROOT = Path(__file__).parents[2]


def test_the_version_is_the_projects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert streamer.__version__ == project["version"]


def test_every_public_name_is_there() -> None:
    for name in streamer.__all__:
        assert getattr(streamer, name) is not None
    assert streamer.load_config(None).model.path is None


def test_importing_the_package_loads_no_media_or_model_library() -> None:
    code = (
        "import sys, streamer; print(sorted(m for m in ('av', 'onnxruntime', 'aiohttp') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
