"""A learned temporal enhancer built to run in real time on a CPU: early temporal fusion at low resolution.

Full-resolution 3D convolutions cost too much on a CPU (one 16-channel Conv3d on a 360p window takes
~420 ms in onnxruntime), so every frame is first folded into channels by space-to-depth, projected per
frame by a 1x1 convolution, and the T frames are then fused at once by a Conv3d whose kernel spans all
T (time collapses in the first layer). The rest is 2D work at 1/2 and 1/4 resolution, depth-to-space
back to full resolution, and a residual on the target frame, so an untrained or weak model starts near
the identity instead of inventing pixels.
"""

from __future__ import annotations

from typing import ClassVar, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from streamer.backend.base import Layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

__all__ = ["Conv3dEnhancer", "ResidualBlock", "activation"]


def activation(x: torch.Tensor) -> torch.Tensor:
    """Leaky ReLU: with plain ReLU, training at lr 1e-3 stalled as units died."""
    out: torch.Tensor = F.leaky_relu(x, 0.1)
    return out


class ResidualBlock(nn.Module):
    """conv-ReLU-conv plus the input: the body's unit, also used by the recurrent model."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.conv2(activation(self.conv1(x)))
        return out


class Conv3dEnhancer(nn.Module):
    """(B, T, 3, H, W) float in [0, 1], NTCHW -> (B, 3, H, W): the output slot's frame, enhanced.

    Two scales: frames are folded x2 (space-to-depth), embedded per frame and fused over T at 1/2
    resolution; a strided convolution takes the fused features to 1/4 resolution, where the residual
    blocks work cheaply with a wide receptive field; they come back by depth-to-space and join the 1/2
    features through a skip, which carries the per-pixel detail a 1/4 bottleneck alone would lose.
    H and W must be multiples of ``pad_multiple`` (4); the runtime pads and crops. T=1 is the
    single-frame ablation of the same architecture.
    """

    layout: ClassVar[Layout] = Layout.NTCHW
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    state_specs: ClassVar[tuple[()]] = ()
    pad_multiple: ClassVar[int] = 4

    def __init__(
        self,
        t: int = 5,
        position: OutputPosition = OutputPosition.CENTER,
        embed: int = 16,
        features: int = 32,
        channels: int = 64,
        blocks: int = 2,
    ) -> None:
        super().__init__()
        if min(t, embed, features, channels) < 1 or blocks < 0:
            raise ConfigError(
                f"Conv3dEnhancer needs t, embed, features, channels >= 1 and blocks >= 0; got t={t}, "
                f"embed={embed}, features={features}, channels={channels}, blocks={blocks}"
            )
        self.t = t
        self.output_position = position
        self.slot = position.slot(t)
        self.embed_channels = embed
        self.features = features
        self.channels = channels
        self.blocks = blocks
        self.embed = nn.Conv3d(12, embed, kernel_size=1)
        self.fuse = nn.Conv3d(embed, features, kernel_size=(t, 3, 3), padding=(0, 1, 1))
        self.down = nn.Conv2d(features, channels, 3, stride=2, padding=1)
        self.body = nn.Sequential(*(ResidualBlock(channels) for _ in range(blocks)))
        self.up = nn.Conv2d(channels, 4 * features, 1)
        self.refine = nn.Conv2d(features, features, 3, padding=1)
        self.head = nn.Conv2d(features, 12, 3, padding=1)
        # A near-zero head makes the untrained model (almost) the identity on the target frame.
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(cast(torch.Tensor, self.head.bias))

    def config(self) -> dict[str, int | str]:
        """The constructor's arguments, for checkpoints and model cards."""
        return {
            "t": self.t,
            "position": self.output_position.value,
            "embed": self.embed_channels,
            "features": self.features,
            "channels": self.channels,
            "blocks": self.blocks,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, c, h, w = x.shape
        t = self.t  # a Python int, not a traced size: export needs the kernels' shapes static
        # The Conv3d parameters, applied as 2D convolutions with no transpose of the input (a 7-D
        # transpose and the Conv3d took half of onnxruntime's time): space-to-depth x2 followed by the
        # per-frame 1x1 embedding is one 2x2 stride-2 convolution of each frame, and a Conv3d whose
        # kernel spans all T frames is a Conv2d over the T x embed stacked channels. The weights are
        # reshaped here, so export folds them into constants.
        k = self.embed.weight.reshape(self.embed_channels, 3, 2, 2)
        # Centred input (x - 0.5; on raw [0, 1] input training stalled) folded into the bias.
        bias = cast(torch.Tensor, self.embed.bias) - 0.5 * k.sum(dim=(1, 2, 3))
        frames = F.conv2d(x.reshape(b * t, c, h, w), k, bias, stride=2)
        frames = frames.reshape(b, t * self.embed_channels, h // 2, w // 2)
        fuse = self.fuse.weight.permute(0, 2, 1, 3, 4).reshape(self.features, t * self.embed_channels, 3, 3)
        half = activation(F.conv2d(frames, fuse, self.fuse.bias, padding=1))
        quarter = self.body(activation(self.down(half)))
        y = activation(half + F.pixel_shuffle(self.up(quarter), 2))
        y = self.head(activation(self.refine(y)))
        return x[:, self.slot] + F.pixel_shuffle(y, 2)
