"""A model that takes a strength (input ``strength``, (B, 1) float32: the noise sigma in 0..255): the
backend feeds each window's own, its default where a window has none, and checks the contract."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from streamer.backend.onnx import OnnxBackend
from streamer.config import load_config
from streamer.errors import ConfigError, ModelError
from tests.onnx_models import strength_model


def _batch(values: list[int]) -> np.ndarray:
    return np.stack([np.full((3, 3, 8, 8), v, np.uint8) for v in values])


def test_each_window_gets_its_own_strength_and_the_models_default_without_one(tmp_path: Path) -> None:
    backend = OnnxBackend(strength_model(tmp_path / "s.onnx", default=7.0))
    assert (backend.info.strength, backend.info.strength_default) == (True, 7.0)
    out = backend.infer(_batch([100, 100, 100]), [10.0, None, 40.0])
    assert [int(o[0, 0, 0]) for o in out] == [110, 107, 140]
    assert int(backend.infer(_batch([100]))[0, 0, 0, 0]) == 107
    stepped, _ = backend.step(_batch([50]), (), [5.0])
    assert int(stepped[0, 0, 0, 0]) == 55


def test_without_metadata_the_default_is_25(tmp_path: Path) -> None:
    backend = OnnxBackend(strength_model(tmp_path / "s.onnx"))
    assert int(backend.infer(_batch([100]))[0, 0, 0, 0]) == 125


def test_a_strength_input_of_another_shape_or_type_is_refused(tmp_path: Path) -> None:
    path = strength_model(tmp_path / "s.onnx")
    model = onnx.load(str(path))
    dims = model.graph.input[1].type.tensor_type.shape.dim
    dims[1].dim_value = 3
    onnx.save(model, str(path))
    with pytest.raises(
        ModelError, match=r"input 'strength' is tensor\(float\) \['B', 3\]; a strength is float32"
    ):
        OnnxBackend(path)


def test_a_bad_default_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=re.escape("streamer.strength_default='300.0'")):
        OnnxBackend(strength_model(tmp_path / "s.onnx", default=300.0))


def test_models_without_the_input_ignore_a_strength(tmp_path: Path) -> None:
    from streamer.assets import TEMPORAL_FILTER

    backend = OnnxBackend(TEMPORAL_FILTER, threads=1)
    assert not backend.info.strength
    batch = np.zeros((1, 5, 3, 16, 16), np.uint8)
    np.testing.assert_array_equal(backend.infer(batch, [30.0]), backend.infer(batch))


def test_model_strength_is_a_sigma_or_auto() -> None:
    assert load_config(None, {}).model.strength == "auto"
    assert load_config(None, {"model.strength": 12}).model.strength == 12.0
    for bad in (-1, 256, "strong"):
        with pytest.raises(ConfigError, match=re.escape("model.strength")):
            load_config(None, {"model.strength": bad})
