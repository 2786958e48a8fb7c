"""A model carrying a measured strength curve: ``auto`` gives it the curve's strength for the stream's
noise estimate, not the estimate (tests.onnx_models.strength_model adds the strength it got to the
frame, so each output shows it); the curve is written by export.calibrate_strength's writer and read
back as the runtime reads every model's metadata."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from export.calibrate_strength import write_curve
from streamer.app import build_pipeline
from streamer.backend.onnx import OnnxBackend
from streamer.config import load_config
from streamer.engine.pipeline import Outcome
from streamer.errors import ModelError
from streamer.frame import Frame
from tests.onnx_models import strength_model


def test_auto_follows_the_models_curve_from_its_estimate(tmp_path: Path) -> None:
    model = strength_model(tmp_path / "strength.onnx", default=3.0)
    (tmp_path / "strength.json").write_text(json.dumps({"name": "strength"}))
    write_curve(model, ((0.0, 20.0), (40.0, 60.0)), "by hand: 20 levels over the estimate")
    assert OnnxBackend(model).info.strength_curve == ((0.0, 20.0), (40.0, 60.0))
    card = json.loads((tmp_path / "strength.json").read_text())
    assert card["strength_curve"] == {
        "points": [[0.0, 20.0], [40.0, 60.0]],
        "measured": "by hand: 20 levels over the estimate",
    }
    lifts: list[float] = []

    def record(source: Frame, sent: Frame, outcome: Outcome) -> None:
        if outcome is Outcome.ENHANCED:
            added = sent.pixels.astype(np.int16) - source.pixels.astype(np.int16)
            lifts.append(float(np.median(added[source.pixels < 180])))

    source = {"kind": "synthetic", "width": 64, "height": 48, "frames": 30, "noise_sigma": 10.0}
    config = load_config(
        None,
        {
            "source": {**source, "pattern": "smptebars"},
            "sink": {"kind": "null"},
            "model": {"path": str(model), "strength": "auto"},
            "gate.enabled": False,
        },
    )
    pipeline = build_pipeline(config, on_output=record)
    asyncio.run(pipeline.run())
    sigma = pipeline.noise.sigma
    assert sigma is not None
    assert 7.0 <= sigma <= 13.0
    status = pipeline.strength_status()
    assert status is not None
    assert status["value"] == pytest.approx(20.0 + sigma, abs=0.1)
    assert lifts
    assert all(26.0 <= lift <= 34.0 for lift in lifts)  # 20 over an estimate of about 10, not 10


def test_a_curve_the_runtime_would_refuse_is_never_written(tmp_path: Path) -> None:
    model = strength_model(tmp_path / "strength.onnx")
    before = model.read_bytes()
    with pytest.raises(ModelError, match="estimates rising"):
        write_curve(model, ((10.0, 5.0), (2.0, 8.0)), "falling")
    assert model.read_bytes() == before
