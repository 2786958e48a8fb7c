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

PIPELINE = Path(__file__).parents[2] / "streamer" / "engine" / "pipeline.py"

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


def test_the_pipeline_never_asks_which_kind_of_model_it_runs() -> None:
    source = PIPELINE.read_text()
    asked = re.findall(r"info\.(state|streaming|device_frames|features)\b", source)
    assert asked == []
