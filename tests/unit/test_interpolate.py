"""Weights between a model and its fine-tune (``export.interpolate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from export.interpolate import interpolate, main
from export.models.conv3d import Conv3dEnhancer
from export.onnx_export import export_onnx
from streamer.errors import ConfigError, ModelError

TINY: dict[str, Any] = {"t": 1, "embed": 4, "features": 8, "channels": 8, "blocks": 1}


def test_each_float_tensor_is_the_weighted_mean_and_counters_come_from_the_fine_tune() -> None:
    start = {"w": torch.zeros(2, 3), "steps": torch.tensor(1)}
    tuned = {"w": torch.full((2, 3), 4.0), "steps": torch.tensor(7)}
    out = interpolate(start, tuned, 0.25)
    assert torch.equal(out["w"], torch.full((2, 3), 1.0))
    assert int(out["steps"]) == 7
    assert torch.equal(interpolate(start, tuned, 0.0)["w"], start["w"])
    with pytest.raises(ConfigError, match=r"0\.\.1; got 1\.5"):
        interpolate(start, tuned, 1.5)
    with pytest.raises(ModelError, match="'w' is \\(2, 3\\) in the first model and \\(3,\\)"):
        interpolate(start, {**tuned, "w": torch.zeros(3)}, 0.5)
    with pytest.raises(ModelError, match="different tensors \\(steps\\)"):
        interpolate(start, {"w": tuned["w"]}, 0.5)


def test_two_exported_models_give_a_state_dict_that_streamer_export_loads(tmp_path: Path) -> None:
    torch.manual_seed(0)
    a, b = Conv3dEnhancer(**TINY).eval(), Conv3dEnhancer(**TINY).eval()
    export_onnx(a, tmp_path / "a.onnx", name="a", real_frames=False)
    export_onnx(b, tmp_path / "b.onnx", name="b", real_frames=False)
    assert _interpolate(tmp_path, "a", "b", "m.pt") == 0
    mean = Conv3dEnhancer(**TINY)
    mean.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True), strict=True)
    for name, value in mean.state_dict().items():
        expected = (a.state_dict()[name] + b.state_dict()[name]) / 2
        assert torch.allclose(value, expected, atol=1e-6), name
    other = Conv3dEnhancer(**{**TINY, "channels": 16}).eval()
    export_onnx(other, tmp_path / "c.onnx", name="c", real_frames=False)
    assert _interpolate(tmp_path, "a", "c", "x.pt") == 2  # two architectures
    assert not (tmp_path / "x.pt").exists()


def _interpolate(folder: Path, start: str, tuned: str, out: str) -> int:
    """``python -m export.interpolate`` on ``folder``'s START.onnx and TUNED.onnx at weight 0.5."""
    files = [str(folder / f"{start}.onnx"), str(folder / f"{tuned}.onnx")]
    return main([*files, "--weight", "0.5", "--out", str(folder / out)])
