"""Arrows point one way: no two modules of streamer/ or export/ import each other.

The imports are read from the source with ``ast``, every one of them: at the top, inside functions (a
lazy import is still a dependency) and under ``if TYPE_CHECKING:`` (a type that names the other module
ties the two together as firmly as a call does).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streamer", "export")


def _modules() -> dict[str, Path]:
    """Every module of the packages by dotted name; a package by its own name (its ``__init__``)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules in ``known`` that module ``name`` imports, wherever the import stands.

    ``from a import b`` counts as ``a.b`` where that is a module, else as ``a``; relative imports are
    resolved against ``name``'s package.
    """
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {
        name: imports_of(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known)
        for name, path in modules.items()
    }


def test_the_parser_sees_lazy_relative_and_type_checking_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import streamer.engine.pipeline\n"
        "if TYPE_CHECKING:\n"
        "    from streamer.serving.service import Service\n"
        "def run():\n"
        "    from streamer.cli.demo import run_demo\n"
        "from . import frame\n"
        "from .webrtc import sink\n"
        "from streamer.webrtc import WhepSink\n"
    )
    known = {
        "streamer",
        "streamer.cli.demo",
        "streamer.frame",
        "streamer.engine.pipeline",
        "streamer.serving.service",
        "streamer.webrtc",
        "streamer.webrtc.sink",
    }
    assert imports_of(source, "streamer.probe", False, known) == known - {"streamer"}


def test_no_two_modules_import_each_other() -> None:
    graph = import_graph()
    assert {"streamer.cli.main", "streamer.serving.service", "streamer.webrtc.server", "export.cli"} <= set(
        graph
    )
    circles = sorted(
        f"{a} <-> {b}" for a, targets in graph.items() for b in targets if a < b and a in graph[b]
    )
    assert circles == []
