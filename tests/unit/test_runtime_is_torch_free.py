"""The runtime installs without PyTorch: only the export extra brings torch, and no runtime module loads it.

A fresh interpreter imports every module of the package but the PyTorch models and checks after each;
test_core_is_pure holds the core to a stricter rule the same way.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
TORCH_ONLY = "export.models"
"""The nn.Module definitions: export and training import them, the runtime never does."""


def _runtime_modules() -> list[str]:
    """Every module under streamer/ by name, found on disk so that a new one is covered unlisted."""
    names = []
    for path in sorted((ROOT / "streamer").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":  # runs the CLI on import; streamer.cli.main stands for it
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name != TORCH_ONLY and not name.startswith(f"{TORCH_ONLY}."):
            names.append(name)
    # export.cli is imported by the runtime CLI to list `streamer export` and `streamer train`.
    return [*names, "export.cli"]


def test_every_runtime_module_imports_without_loading_torch() -> None:
    modules = _runtime_modules()
    named = {
        "streamer.cli.main",
        "streamer.app",
        "streamer.serving.service",
        "streamer.engine.pipeline",
        "streamer.cli.demo",
    }
    named |= {"streamer.bench.quality", "streamer.backend.onnx", "streamer.core", "streamer.webrtc"}
    named |= {"streamer.sources", "streamer.sinks"}
    assert named <= set(modules), named - set(modules)
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'torch' in sys.modules:\n"
        "        sys.exit(f'{name} loads torch')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_only_the_export_extra_installs_torch() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert "torch" not in {Requirement(spec).name for spec in project["dependencies"]}
    assert "torch==2.13.0" in extras["export"]
    dev = {Requirement(spec).name: Requirement(spec).extras for spec in extras["dev"]}
    assert {"export", "bench", "fp16"} <= dev["streamer"], "the tests exercise export, bench and fp16"
