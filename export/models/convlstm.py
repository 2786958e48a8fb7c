"""A causal recurrent enhancer: the per-frame model's spatial path, a ConvLSTM memory, and the previous
output frame as a second memory.

A ConvLSTM that learns its spatial denoising from scratch with the recurrence loses to the per-frame
model: a frame after a reset comes out as noisy as it went in. Here the spatial path
is conv3d_t1's, layer for layer and under the same names (``embed``, ``fuse``, ``down``, ``body``,
``up``, ``refine``, ``head``), so training starts from its weights (``--init conv3d_t1.onnx``) and the
untrained recurrence is switched off: the model starts as the per-frame model and the recurrence only
has to add what time gives. Two memories are carried (as in EMVD's recurrent fusion):

- the previous enhanced frame at full resolution, which enters the 1/2-resolution features beside the
  new frame (as a window model's neighbours do) and is blended with the new frame's estimate pixel by
  pixel: where the scene is still, a recursive average over many frames; where it moved, the blend
  falls. A fourth plane of it is 1 once a frame has been enhanced and 0 in the runtime's zero state, so
  after a reset the previous frame is switched off exactly, not learned. The learned blend alone
  ghosts where a pixel changes abruptly on a still background (a block flipping from black to white
  comes out halfway between, as an on-screen clock's digits would): ``guard`` fades it out by the
  change itself, to nothing where the new estimate and the previous frame differ by ``guard`` or more;
- a ConvLSTM (gates i, f, o, g) at 1/4 resolution for what changes slowly: how noisy the stream is,
  where it moves, whether it was just cut.

Every state is an explicit input and output of the model (``state_specs``): the runtime
zero-initialises them, carries them from one step to the next of the same stream and resets them at a
discontinuity. With ``strength`` the model also takes the noise sigma after its states and conditions
the spatial path on it as the per-frame model does (``StrengthCondition``, under the same name, so a
per-frame model's trained conditioning loads too).
"""

from __future__ import annotations

from typing import ClassVar, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from export.models.conv3d import ResidualBlock, StrengthCondition, activation, two_scales, up_transposed
from export.models.convgru import StateSpec
from streamer.backend.base import Layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

__all__ = ["ConvLSTMEnhancer"]

BLEND_BIAS = -4.0
"""The untrained blend takes sigmoid(-4) = 1.8% of the previous frame: the per-frame model, nearly,
with the gradient still flowing into the blend."""


class ConvLSTMEnhancer(nn.Module):
    """``forward(x, hidden, cell, previous) -> (out, hidden, cell, previous)``, x (B, 1, 3, H, W) in [0, 1].

    ``guard`` is the change (0..1, per pixel, the largest of R, G, B) at which the blend stops: 0.2 = 51
    levels of 255, far above what noise leaves between two denoised frames of a still scene.

    ``hidden`` and ``cell`` are (B, hidden, H/4, W/4); ``previous`` is (B, 4, H, W): the last output
    frame and a plane of ones (zeros: no previous frame). H and W must be multiples of ``pad_multiple``.
    """

    layout: ClassVar[Layout] = Layout.NTCHW
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    t: ClassVar[int] = 1
    output_position: ClassVar[OutputPosition] = OutputPosition.LAST
    pad_multiple: ClassVar[int] = 4

    def __init__(
        self,
        embed: int = 16,
        features: int = 32,
        channels: int = 64,
        hidden: int = 16,
        blocks: int = 2,
        guard: float = 0.2,
        strength: bool = False,
    ) -> None:
        super().__init__()
        if min(embed, features, channels, hidden) < 1 or blocks < 0 or not 0.0 < guard <= 1.0:
            raise ConfigError(
                f"ConvLSTMEnhancer needs embed, features, channels, hidden >= 1, blocks >= 0 and guard in "
                f"(0, 1]; got embed={embed}, features={features}, channels={channels}, hidden={hidden}, "
                f"blocks={blocks}, guard={guard}"
            )
        self.guard = guard
        self.embed_channels = embed
        self.features = features
        self.channels = channels
        self.hidden = hidden
        self.blocks = blocks
        self.takes_strength = strength
        self.condition = StrengthCondition(features, channels) if strength else None
        self.state_specs: tuple[StateSpec, ...] = (
            StateSpec("hidden", "hidden_next", hidden, 4),
            StateSpec("cell", "cell_next", hidden, 4),
            StateSpec("previous", "previous_next", 4, 1),
        )
        # conv3d_t1's layers, with its shapes, so its weights load by name.
        self.embed = nn.Conv3d(12, embed, kernel_size=1)
        self.fuse = nn.Conv3d(embed, features, kernel_size=(1, 3, 3), padding=(0, 1, 1))
        self.down = nn.Conv2d(features, channels, 3, stride=2, padding=1)
        self.body = nn.Sequential(*(ResidualBlock(channels) for _ in range(blocks)))
        self.up = nn.Conv2d(channels, 4 * features, 1)
        self.refine = nn.Conv2d(features, features, 3, padding=1)
        self.head = nn.Conv2d(features, 12, 3, padding=1)
        # The recurrence, each part starting switched off.
        self.embed_previous = nn.Conv2d(4, embed, 2, stride=2)
        self.gates = nn.Conv2d(channels + hidden, 4 * hidden, 3, padding=1)
        self.merge = nn.Conv2d(channels + hidden, channels, 1)
        self.blend = nn.Conv2d(features, 4, 3, padding=1)
        with torch.no_grad():
            nn.init.normal_(self.head.weight, std=1e-3)
            cast(torch.Tensor, self.head.bias).zero_()
            self.embed_previous.weight.zero_()
            cast(torch.Tensor, self.embed_previous.bias).zero_()
            # Gates in order i, f, o, g; a forget bias of +1 keeps the cell's memory from the start.
            cast(torch.Tensor, self.gates.bias)[hidden : 2 * hidden].fill_(1.0)
            # The merge starts as the identity on the frame's features and deaf to the memory.
            self.merge.weight.zero_()
            self.merge.weight[:, :channels, 0, 0].copy_(torch.eye(channels))
            cast(torch.Tensor, self.merge.bias).zero_()
            nn.init.normal_(self.blend.weight, std=1e-3)
            cast(torch.Tensor, self.blend.bias).fill_(BLEND_BIAS)

    def config(self) -> dict[str, int | float | bool]:
        """The constructor's arguments, for checkpoints and model cards."""
        return {
            "embed": self.embed_channels,
            "features": self.features,
            "channels": self.channels,
            "hidden": self.hidden,
            "blocks": self.blocks,
            "guard": self.guard,
            "strength": self.takes_strength,
        }

    def forward(
        self,
        x: torch.Tensor,
        hidden: torch.Tensor,
        cell: torch.Tensor,
        previous: torch.Tensor,
        strength: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        frame = x.squeeze(1)  # a Squeeze, where x[:, 0] exported as a Gather that copied the frame
        before, valid = previous[:, :3], previous[:, 3:]
        # As conv3d_t1: space-to-depth x2 and the 1x1 embedding as one 2x2 stride-2 convolution, the
        # centring (x - 0.5) folded into its bias; the previous frame (centred, zeros when there is
        # none, told apart by the valid plane) adds its own embedding.
        k = self.embed.weight.reshape(self.embed_channels, 3, 2, 2)
        bias = cast(torch.Tensor, self.embed.bias) - 0.5 * k.sum(dim=(1, 2, 3))
        embedded = F.conv2d(frame, k, bias, stride=2)
        # The previous frame is zero wherever its valid plane is (the zero state; every state the model
        # returns has valid 1), so (before - 0.5) * valid is before - 0.5 * valid: its centring folds
        # into the valid plane's weights and the state is read as it is, with no full-resolution work.
        p = self.embed_previous.weight
        p = torch.cat([p[:, :3], p[:, 3:] - 0.5 * p[:, :3].sum(dim=1, keepdim=True)], dim=1)
        embedded = embedded + F.conv2d(previous, p, self.embed_previous.bias, stride=2)
        fused = F.conv2d(embedded, self.fuse.weight[:, :, 0], self.fuse.bias, padding=1)
        half, quarter = two_scales(fused, self.down, self.condition, strength, "ConvLSTMEnhancer")
        i, f, o, g = self.gates(torch.cat([quarter, hidden], dim=1)).chunk(4, dim=1)
        cell_next = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
        hidden_next = torch.sigmoid(o) * torch.tanh(cell_next)
        quarter = self.body(self.merge(torch.cat([quarter, hidden_next], dim=1)))
        y = activation(half + up_transposed(self.up, quarter))
        y = activation(self.refine(y))
        # head (12 maps) and blend (4) as one convolution of 16 maps and one depth-to-space: CPU kernels
        # compute output channels in blocks of 16, so apart they cost two blocks where one holds both.
        both = F.conv2d(
            y,
            torch.cat([self.head.weight, self.blend.weight]),
            torch.cat([cast(torch.Tensor, self.head.bias), cast(torch.Tensor, self.blend.bias)]),
            padding=1,
        )
        shuffled = F.pixel_shuffle(both, 2)
        residual, blend = shuffled[:, :3], shuffled[:, 3:]
        current = frame + residual
        change = (current - before).abs().amax(dim=1, keepdim=True)
        still = (1.0 - change * (1.0 / self.guard)).clamp(0.0, 1.0)
        weight = torch.sigmoid(blend) * valid * still
        out = current + weight * (before - current)
        previous_next = F.pad(out.clamp(0.0, 1.0), (0, 0, 0, 0, 0, 1), value=1.0)
        return out, hidden_next, cell_next, previous_next
