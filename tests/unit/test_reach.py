"""A model's reach, measured from gradients, and the cards that carry it to the tile gate's halo."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
import torch
from torch import nn

from export.models.streaming import StreamingEnhancer
from export.reach import main, receptive_reach
from streamer.assets import DEFAULT_MODEL, STREAMING_QUARTER_MODEL, STREAMING_SEPARABLE_MODEL
from streamer.backend.base import Layout
from streamer.backend.onnx import OnnxBackend
from streamer.contract import card_reach
from streamer.errors import ConfigError


class TwoConvs(nn.Module):
    """Two 3x3 convolutions (reach 2), the second dilated by 3 (reach 3 more), on one frame."""

    layout: ClassVar[Layout] = Layout.NCHW

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 3, 3, padding=3, dilation=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(nn.functional.leaky_relu(self.a(x), 0.1))


def test_reach_is_the_receptive_field_of_the_layers() -> None:
    assert receptive_reach(TwoConvs()) == 1 + 3


def test_a_strided_model_is_measured_at_every_phase_of_its_strides() -> None:
    # entry=4: a 4x4 stride-4 entry, fusion at 1/4 and 1/8: an output pixel's reach depends on where it
    # sits against the strides; the widest counts, not the one at a phase-0 pixel alone.
    model = StreamingEnhancer(entry=4, half=4, quarter=0, fused=4, refine=4, blocks=1).double()
    window = torch.full((1, 5, 3, 256, 256), 0.5, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(model(window)[0, :, 128, 128].sum(), window)
    ys, xs = torch.nonzero(grad.abs().sum(dim=(0, 1, 2)), as_tuple=True)
    phase0 = int(max(128 - ys.min(), ys.max() - 128, 128 - xs.min(), xs.max() - 128))
    assert receptive_reach(model) > phase0


class GlobalMean(nn.Module):
    """Every output pixel moved by every input pixel: no halo covers it."""

    layout: ClassVar[Layout] = Layout.NCHW

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.mean(dim=(2, 3), keepdim=True)


def test_a_model_that_reaches_everywhere_has_no_reach_to_record() -> None:
    from export.reach import module_reach

    with pytest.raises(ConfigError, match="global operation"):
        receptive_reach(GlobalMean())
    assert module_reach(GlobalMean(), Layout.NCHW, 1) is None


def test_shipped_cards_carry_the_reach_and_the_backend_reads_it(tmp_path: Path) -> None:
    assert card_reach(DEFAULT_MODEL) == 27
    assert card_reach(STREAMING_SEPARABLE_MODEL) == 19
    backend = OnnxBackend(STREAMING_QUARTER_MODEL, threads=1)
    try:
        assert backend.info.reach_px == 39  # past the fixed halo of 32 the gate had before
    finally:
        backend.close()
    card = tmp_path / "m.json"
    card.write_text('{"reach_px": -3}')
    assert card_reach(tmp_path / "m.onnx") is None  # out of range: ignored, with a warning


def test_the_tool_refuses_a_file_it_cannot_rebuild(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    assert main([str(bad)]) == 2
    assert "export.reach:" in capsys.readouterr().err


def test_a_streaming_export_writes_its_reach_into_the_card(tmp_path: Path) -> None:
    from export.streaming_export import export_streaming_with_card

    torch.manual_seed(0)
    model = StreamingEnhancer(half=4, quarter=0, fused=4, refine=4, blocks=1)
    _, card = export_streaming_with_card(
        model, tmp_path / "s.onnx", name="s", description="tiny", bench=False, real_frames=False
    )
    assert card == tmp_path / "s.json"
    assert card_reach(tmp_path / "s.onnx") == receptive_reach(model) == 19  # stream_t5_lite's shape of layers
