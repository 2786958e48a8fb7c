"""A causal recurrent enhancer: one new frame per step, the past carried in a ConvGRU hidden state.

A window of T frames recomputes what the previous window already saw; a recurrent model sees each
frame once and keeps what it learned about the scene in its state, so its cost per frame does not grow
with the history it uses and it needs no lookahead (output position LAST, T=1). The state is an
explicit input and output of the model so the exported ONNX graph stays a pure function: the runtime
zero-initialises it, carries it from one window to the next of the same stream, and resets it at a
discontinuity (see ``state_specs``).
"""

from __future__ import annotations

from typing import ClassVar, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from export.models.conv3d import ResidualBlock, activation, up_transposed
from streamer.backend.base import Layout, StateSpec
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

__all__ = ["ConvGRUEnhancer", "StateSpec"]


class ConvGRUEnhancer(nn.Module):
    """``forward(x, h) -> (out, h_next)``: x (B, 1, 3, H, W) NTCHW in [0, 1], h (B, hidden, H/s, W/s).

    H and W must be multiples of ``pad_multiple`` (= ``scale``). The output is the frame enhanced with
    what the state remembers of earlier frames; ``h_next`` goes into the next call of the same stream.
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
                f"ConvGRUEnhancer needs features, channels, hidden >= 1 and blocks >= 0; got "
                f"features={features}, channels={channels}, hidden={hidden}, blocks={blocks}"
            )
        self.features = features
        self.channels = channels
        self.hidden = hidden
        self.blocks = blocks
        self.scale = 4
        self.state_specs: tuple[StateSpec, ...] = (StateSpec("state", "state_next", hidden, self.scale),)
        self.encode = nn.Conv2d(12, features, 3, padding=1)
        self.down = nn.Conv2d(features, channels, 3, stride=2, padding=1)
        self.gates = nn.Conv2d(channels + hidden, 2 * hidden, 3, padding=1)
        self.candidate = nn.Conv2d(channels + hidden, hidden, 3, padding=1)
        self.merge = nn.Conv2d(channels + hidden, channels, 3, padding=1)
        self.body = nn.Sequential(*(ResidualBlock(channels) for _ in range(blocks)))
        self.up = nn.Conv2d(channels, 4 * features, 1)
        self.refine = nn.Conv2d(features, features, 3, padding=1)
        self.head = nn.Conv2d(features, 12, 3, padding=1)
        # A near-zero head makes the untrained model (almost) the identity on the frame.
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(cast(torch.Tensor, self.head.bias))

    def config(self) -> dict[str, int]:
        """The constructor's arguments, for checkpoints and model cards."""
        return {
            "features": self.features,
            "channels": self.channels,
            "hidden": self.hidden,
            "blocks": self.blocks,
        }

    def initial_state(self, frames: torch.Tensor) -> torch.Tensor:
        """The zero state for a batch of frames (B, 1, 3, H, W), as the runtime makes it."""
        b, _, _, h, w = frames.shape
        s = self.scale
        return frames.new_zeros(b, self.hidden, -(-h // s), -(-w // s))

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        frame = x[:, 0]
        # Like Conv3dEnhancer: features at 1/2 resolution, the recurrence at 1/4, a skip between them.
        half = activation(self.encode(F.pixel_unshuffle(frame - 0.5, 2)))
        f = activation(self.down(half))
        z, r = torch.sigmoid(self.gates(torch.cat([f, h], dim=1))).chunk(2, dim=1)
        n = torch.tanh(self.candidate(torch.cat([f, r * h], dim=1)))
        h_next = (1 - z) * h + z * n
        quarter = self.body(activation(self.merge(torch.cat([f, h_next], dim=1))))
        y = activation(half + up_transposed(self.up, quarter))
        y = self.head(activation(self.refine(y)))
        return frame + F.pixel_shuffle(y, 2), h_next
