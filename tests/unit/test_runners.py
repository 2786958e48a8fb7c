"""The model kinds' runners: one chooser reads a model's kind, and the pipeline never does."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from streamer.backend.base import FeatureSpec, Layout, ModelInfo, StateSpec
from streamer.core.windower import OutputPosition
from streamer.engine.runners import (
    CachedRunner,
    RecurrentRunner,
    Runner,
    StreamingRunner,
    WindowRunner,
    runner_kind,
)

ENGINE = Path(__file__).parents[2] / "streamer" / "engine"
PIPELINE = [
    ENGINE / f"{name}.py"
    for name in ("pipeline", "binding", "ingest", "inference", "egress", "work", "settings")
]
"""The pipeline and the modules of its stages: none of them asks which kind of model it runs."""

PLAIN = ModelInfo("m", 5, Layout.NCTHW, OutputPosition.CENTER)


@pytest.mark.parametrize(
    ("changes", "kind"),
    [
        ({}, WindowRunner),
        ({"device_frames": True}, CachedRunner),
        ({"features": (FeatureSpec("f", 8, 1),)}, StreamingRunner),
        ({"features": (FeatureSpec("f", 8, 1),), "device_frames": True}, StreamingRunner),
        ({"state": (StateSpec("h", "h_out", 8, 1),)}, RecurrentRunner),
    ],
)
def test_each_model_kind_has_its_runner(changes: dict[str, object], kind: type[Runner]) -> None:
    assert runner_kind(dataclasses.replace(PLAIN, **changes)) is kind


def test_only_a_recurrent_models_output_is_not_a_function_of_its_window() -> None:
    assert [k.local for k in (WindowRunner, CachedRunner, StreamingRunner, RecurrentRunner)] == [
        True,
        True,
        True,
        False,
    ]


@pytest.mark.parametrize("path", PIPELINE, ids=lambda p: p.name)
def test_the_pipeline_never_asks_which_kind_of_model_it_runs(path: Path) -> None:
    asked = re.findall(r"info\.(state|streaming|device_frames|features)\b", path.read_text())
    assert asked == []
