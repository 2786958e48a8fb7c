"""A causal recurrent enhancer with a ConvLSTM memory and the previous output frame as a second memory.

The ConvGRU's only memory is a 1/4-resolution hidden state, which cannot hold fine detail: each frame
had to be denoised again from its own pixels, and it lost to the per-frame model. Here two memories
are carried (as in EMVD's recurrent fusion): a ConvLSTM at 1/4 resolution (hidden and cell state,
gates i, f, o, g) for what changes slowly — where the scene moves, how noisy it is, whether it was
just cut — and the previous enhanced frame itself, at full resolution, which the model blends with the
current frame's estimate pixel by pixel. Where the scene is still, that blend is a recursive temporal
average over many frames; where it moves or was cut, the blend weight falls and the frame is denoised
on its own. A fourth channel of the previous frame is 1 once a frame has been enhanced and 0 in the
runtime's zero state, so after a reset the blend is switched off exactly, not learned.

Every state is an explicit input and output of the model (``state_specs``), as for the ConvGRU: the
runtime zero-initialises them, carries them from one step to the next of the same stream and resets
them at a discontinuity.
"""

from __future__ import annotations

from typing import ClassVar, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from streamer.backend.base import Layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError
from streamer.models.conv3d import ResidualBlock, activation
from streamer.models.convgru import StateSpec

__all__ = ["ConvLSTMEnhancer"]

_BLEND_BIAS = -2.0
"""The untrained blend takes sigmoid(-2) = 12% of the previous frame: near the identity, yet learning."""


class ConvLSTMEnhancer(nn.Module):
    """``forward(x, hidden, cell, previous) -> (out, hidden, cell, previous)``, x (B, 1, 3, H, W) in [0, 1].

    ``hidden`` and ``cell`` are (B, hidden, H/4, W/4); ``previous`` is (B, 4, H, W): the last output
    frame and a plane of ones (zeros: no previous frame). H and W must be multiples of ``pad_multiple``.
    """

    layout: ClassVar[Layout] = Layout.NTCHW
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    t: ClassVar[int] = 1
    output_position: ClassVar[OutputPosition] = OutputPosition.LAST
    pad_multiple: ClassVar[int] = 4

    def __init__(self, features: int = 32, channels: int = 48, hidden: int = 32, blocks: int = 1) -> None:
        super().__init__()
        if min(features, channels, hidden) < 1 or blocks < 0:
            raise ConfigError(
                f"ConvLSTMEnhancer needs features, channels, hidden >= 1 and blocks >= 0; got "
                f"features={features}, channels={channels}, hidden={hidden}, blocks={blocks}"
            )
        self.features = features
        self.channels = channels
        self.hidden = hidden
        self.blocks = blocks
        self.state_specs: tuple[StateSpec, ...] = (
            StateSpec("hidden", "hidden_next", hidden, 4),
            StateSpec("cell", "cell_next", hidden, 4),
            StateSpec("previous", "previous_next", 4, 1),
        )
        # A 4x4 stride-2 convolution of the frame and the previous output: the cost of a pixel unshuffle
        # and a 2x2 convolution, without the 6-D transpose onnxruntime makes of PixelUnshuffle.
        self.entry = nn.Conv2d(7, features, 4, stride=2, padding=1)
        self.down = nn.Conv2d(features, channels, 3, stride=2, padding=1)
        self.gates = nn.Conv2d(channels + hidden, 4 * hidden, 3, padding=1)
        self.merge = nn.Conv2d(channels + hidden, channels, 1)
        self.body = nn.Sequential(*(ResidualBlock(channels) for _ in range(blocks)))
        self.up = nn.Conv2d(channels, 4 * features, 1)
        self.refine = nn.Conv2d(features, features, 3, padding=1)
        # 16 maps at 1/2 resolution = 4 at full resolution: a residual on the frame (3) and the blend (1).
        self.head = nn.Conv2d(features, 16, 3, padding=1)
        gate_bias = cast(torch.Tensor, self.gates.bias)
        head_bias = cast(torch.Tensor, self.head.bias)
        with torch.no_grad():
            # Gates in order i, f, o, g; a forget bias of +1 keeps the cell's memory from the start.
            gate_bias[hidden : 2 * hidden].fill_(1.0)
            # A near-zero head makes the untrained model (almost) the identity on the frame.
            nn.init.normal_(self.head.weight, std=1e-3)
            head_bias.zero_()
            head_bias[12:].fill_(_BLEND_BIAS)

    def config(self) -> dict[str, int]:
        """The constructor's arguments, for checkpoints and model cards."""
        return {
            "features": self.features,
            "channels": self.channels,
            "hidden": self.hidden,
            "blocks": self.blocks,
        }

    def forward(
        self, x: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor, previous: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        frame = x[:, 0]
        before, valid = previous[:, :3], previous[:, 3:]
        # Centred inputs; a missing previous frame is all zeros, told apart by the valid plane.
        half = activation(self.entry(torch.cat([frame - 0.5, (before - 0.5) * valid, valid], dim=1)))
        quarter = activation(self.down(half))
        i, f, o, g = self.gates(torch.cat([quarter, hidden], dim=1)).chunk(4, dim=1)
        cell_next = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
        hidden_next = torch.sigmoid(o) * torch.tanh(cell_next)
        quarter = self.body(activation(self.merge(torch.cat([quarter, hidden_next], dim=1))))
        y = activation(half + F.pixel_shuffle(self.up(quarter), 2))
        y = F.pixel_shuffle(self.head(activation(self.refine(y))), 2)
        current = frame + y[:, :3]
        weight = torch.sigmoid(y[:, 3:]) * valid
        out = current + weight * (before - current)
        previous_next = torch.cat([out.clamp(0.0, 1.0), torch.ones_like(valid)], dim=1)
        return out, hidden_next, cell_next, previous_next
