"""Exporting a model that takes a strength (FFDNet's noise level, as a scalar per window): the input
``strength`` in the file, its default in the metadata, parity with PyTorch over strengths (and over a
sequence of steps for a recurrent one), and the runtime feeding each window's own."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from export.cli import main
from export.onnx_export import export_onnx
from streamer.backend.onnx import OnnxBackend
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError

HERE = "tests.unit.test_export_strength"


class Lifted(nn.Module):
    """The centre frame of 3, a residual conv, and the strength (levels) scaled in: the output moves
    with the strength, so the exporter's parity checks see it."""

    layout = "NTCHW"
    t = 3
    output_position = "center"
    value_range = (0.0, 1.0)
    pad_multiple = 1

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor, strength: torch.Tensor) -> torch.Tensor:
        frame = x[:, 1]
        lift = (strength / 255.0).reshape(-1, 1, 1, 1)
        out: torch.Tensor = frame + 0.1 * self.conv(frame) + lift
        return out


class Tracked(nn.Module):
    """A recurrent one: h' = (h + frame) / 2, output h' plus the strength (levels)."""

    layout = "NTCHW"
    t = 1
    output_position = "last"
    value_range = (0.0, 1.0)
    pad_multiple = 1
    takes_strength = True
    strength_default = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.state_specs = (_State("h", "h_next", 3, 1),)

    def forward(
        self, x: torch.Tensor, h: torch.Tensor, strength: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h_next = 0.5 * (h + x[:, 0])
        return h_next + (strength / 255.0).reshape(-1, 1, 1, 1), h_next


class _State:
    def __init__(self, input: str, output: str, channels: int, scale: int) -> None:
        self.input, self.output, self.channels, self.scale = input, output, channels, scale


def make_lifted() -> nn.Module:
    torch.manual_seed(0)
    return Lifted()


def test_a_window_model_with_a_strength_exports_from_the_cli_and_the_runtime_feeds_it(tmp_path: Path) -> None:
    out = tmp_path / "lifted.onnx"
    argv = ["export", "--factory", f"{HERE}:make_lifted", "--strength", "--strength-default", "12"]
    assert main([*argv, "--out", str(out), "--no-bench"]) == 0
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["frames", "strength"]
    assert {p.key: p.value for p in model.metadata_props}["streamer.strength_default"] == "12"
    backend = OnnxBackend(out)
    assert (backend.info.strength, backend.info.strength_default) == (True, 12.0)
    window = np.full((2, 3, 3, 16, 16), 100, np.uint8)
    low, high = backend.infer(window, [0.0, 40.0])
    assert int(high.astype(int).mean() - low.astype(int).mean()) == 40
    default = backend.infer(window[:1])[0]
    assert abs(int(default.astype(int).mean()) - int(low.astype(int).mean()) - 12) <= 1


def test_a_recurrent_model_with_a_strength_keeps_parity_over_a_sequence(tmp_path: Path) -> None:
    report = export_onnx(Tracked(), tmp_path / "tracked.onnx", name="tracked", real_frames=False)
    assert report.parity_sequence_steps > 0
    assert report.parity_sequence_max_abs_error is not None
    assert report.parity_sequence_max_abs_error <= 1e-5
    backend = OnnxBackend(tmp_path / "tracked.onnx")
    assert (backend.info.strength, backend.info.strength_default) == (True, 10.0)
    state = backend.initial_state(1, 8, 8)
    out, state = backend.step(np.full((1, 1, 3, 8, 8), 200, np.uint8), state, [30.0])
    assert int(out[0, 0, 0, 0]) == 130  # (0 + 200) / 2 + 30


def test_a_module_that_takes_no_strength_fails_with_the_flag_naming_what_it_was_given(tmp_path: Path) -> None:
    from tests.unit.test_export_layouts import make_picker

    with pytest.raises(ModelError, match=re.escape("forward takes a (B, 1) strength after the frames")):
        export_onnx(
            make_picker("NTCHW", 1),
            tmp_path / "m.onnx",
            name="m",
            layout="NTCHW",
            t=3,
            output_position=OutputPosition.CENTER,
            strength=True,
        )


def test_a_bad_default_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=re.escape("strength_default=300.0 must be a noise sigma in 0..255")
    ):
        export_onnx(make_lifted(), tmp_path / "m.onnx", name="m", strength=True, strength_default=300.0)
