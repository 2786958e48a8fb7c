"""A learned temporal enhancer built to run in real time on a CPU: early temporal fusion at low resolution.

Full-resolution 3D convolutions cost too much on a CPU (one 16-channel Conv3d on a 360p window alone runs far
longer than a frame period in onnxruntime), so every frame is first folded into channels by space-to-depth,
projected per frame by a 1x1 convolution, and the T frames are then fused at once by a Conv3d whose kernel
spans all T (time collapses in the first layer). The rest is 2D work at 1/2 and 1/4 resolution, depth-to-space
back to full resolution, and a residual on the target frame, so an untrained or weak model starts near the
identity instead of inventing pixels.
"""

from __future__ import annotations

from typing import ClassVar, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from streamer.backend.base import Layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

__all__ = [
    "CONDITION",
    "STRENGTH_SCALE",
    "Conv3dEnhancer",
    "ResidualBlock",
    "StrengthCondition",
    "activation",
    "two_scales",
    "up_transposed",
]

CONDITION = 16
"""Hidden units of the small MLP that turns a strength into per-channel gains and shifts."""
STRENGTH_SCALE = 50.0
"""Strengths (0..255 levels) are divided by this, so the range trained on (0..50) maps to 0..1."""


def activation(x: torch.Tensor) -> torch.Tensor:
    """Leaky ReLU: with plain ReLU, units die and training at lr 1e-3 stalls."""
    out: torch.Tensor = F.leaky_relu(x, 0.1)
    return out


def up_transposed(up: nn.Conv2d, q: torch.Tensor) -> torch.Tensor:
    """``pixel_shuffle(up(q), 2)`` for a 1x1 ``up`` of 4F maps, as one transposed convolution, which
    onnxruntime runs several times faster than the 1x1 and the depth-to-space apart: the 1x1's four
    outputs per map are the 2x2 kernel's taps, and its bias, which differs per tap, comes in through a
    channel of ones."""
    f = up.out_channels // 4
    weight = up.weight[:, :, 0, 0].reshape(f, 2, 2, -1).permute(3, 0, 1, 2)
    bias = cast(torch.Tensor, up.bias).reshape(1, f, 2, 2)
    ones = torch.ones_like(q[:, :1])
    return F.conv_transpose2d(torch.cat([q, ones], dim=1), torch.cat([weight, bias]), stride=2)


class ResidualBlock(nn.Module):
    """conv-ReLU-conv plus the input: the body's unit, also used by the recurrent model."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.conv2(activation(self.conv1(x)))
        return out


class StrengthCondition(nn.Sequential):
    """A strength (B, 1), 0..255 levels -> per-channel gains and shifts of the 1/2- and 1/4-resolution
    features (FiLM), for the models that share this spatial path. The last layer starts at zero, so a
    model with it begins as the model without; the layers keep ``nn.Sequential``'s names (``0``, ``2``),
    so one model's trained conditioning loads into another's."""

    def __init__(self, features: int, channels: int) -> None:
        super().__init__(
            nn.Linear(1, CONDITION), nn.LeakyReLU(0.1), nn.Linear(CONDITION, 2 * (features + channels))
        )
        self.features = features
        self.channels = channels
        last = cast(nn.Linear, self[2])
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def film(
        self, strength: torch.Tensor, b: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(gain, shift) at 1/2 resolution, then at 1/4, each (B, C, 1, 1): x * (1 + gain) + shift."""
        film = self(strength.reshape(b, 1) / STRENGTH_SCALE)[:, :, None, None]
        f, c = self.features, self.channels
        return film[:, :f], film[:, f : 2 * f], film[:, 2 * f : 2 * f + c], film[:, 2 * f + c :]


def two_scales(
    half: torch.Tensor,
    down: nn.Module,
    condition: StrengthCondition | None,
    strength: torch.Tensor | None,
    owner: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused features at 1/2 resolution and, through ``down``, at 1/4, each activated; a model built
    with a strength input (``condition``) scales and shifts each before its activation. A strength given
    to a model without the input, or missing from one with it, is a ConfigError naming ``owner``."""
    if (condition is None) != (strength is None):
        raise ConfigError(
            f"{owner} takes a strength exactly when built with strength=True (this one: "
            f"{condition is not None}); pass one per window, or none"
        )
    film = None if condition is None or strength is None else condition.film(strength, half.shape[0])
    if film is not None:
        half = half * (1.0 + film[0]) + film[1]
    half = activation(half)
    quarter = down(half)
    if film is not None:
        quarter = quarter * (1.0 + film[2]) + film[3]
    return half, activation(quarter)


class Conv3dEnhancer(nn.Module):
    """(B, T, 3, H, W) float in [0, 1], NTCHW -> (B, 3, H, W): the output slot's frame, enhanced.

    Two scales: frames are folded x2 (space-to-depth), embedded per frame and fused over T at 1/2
    resolution; a strided convolution takes the fused features to 1/4 resolution, where the residual
    blocks work cheaply with a wide receptive field; they come back by depth-to-space and join the 1/2
    features through a skip, which carries the per-pixel detail a 1/4 bottleneck alone would lose.
    ``fine`` residual blocks at 1/2 resolution after the skip add capacity at the scale of a compressed feed's
    damage (block edges and ringing, a few pixels wide) rather than at 1/4 (where blocks added go into
    Gaussian denoising, not deblocking); each starts as the identity (its last convolution zero), so a model
    warm-started from one without them begins as it.
    H and W must be multiples of ``pad_multiple`` (4); the runtime pads and crops. T=1 is the
    single-frame ablation of the same architecture.

    With ``strength`` the forward also takes a (B, 1) noise sigma in 0..255 levels (the runtime's
    ``model.strength``; ``auto`` feeds the stream's noise estimate) that scales and shifts the fused
    features at 1/2 and 1/4 resolution (FiLM; FFDNet's noise level, as a scalar): one model then tells a
    noisy feed it should smooth from a compressed or clean one it should only deblock or leave alone,
    which the pixels of a small window do not say reliably. The conditioning starts at zero, so a model
    warm-started from one without it begins as that model.
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
        strength: bool = False,
        fine: int = 0,
    ) -> None:
        super().__init__()
        if min(t, embed, features, channels) < 1 or min(blocks, fine) < 0:
            raise ConfigError(
                f"Conv3dEnhancer needs t, embed, features, channels >= 1 and blocks, fine >= 0; got t={t}, "
                f"embed={embed}, features={features}, channels={channels}, blocks={blocks}, fine={fine}"
            )
        self.t = t
        self.output_position = position
        self.slot = position.slot(t)
        self.embed_channels = embed
        self.features = features
        self.channels = channels
        self.blocks = blocks
        self.fine_blocks = fine
        self.takes_strength = strength
        self.condition = StrengthCondition(features, channels) if strength else None
        self.embed = nn.Conv3d(12, embed, kernel_size=1)
        self.fuse = nn.Conv3d(embed, features, kernel_size=(t, 3, 3), padding=(0, 1, 1))
        self.down = nn.Conv2d(features, channels, 3, stride=2, padding=1)
        self.body = nn.Sequential(*(ResidualBlock(channels) for _ in range(blocks)))
        self.up = nn.Conv2d(channels, 4 * features, 1)
        fine_blocks = [ResidualBlock(features) for _ in range(fine)]
        for block in fine_blocks:
            nn.init.zeros_(block.conv2.weight)
            nn.init.zeros_(cast(torch.Tensor, block.conv2.bias))
        self.fine = nn.Sequential(*fine_blocks)
        self.refine = nn.Conv2d(features, features, 3, padding=1)
        self.head = nn.Conv2d(features, 12, 3, padding=1)
        # A near-zero head makes the untrained model (almost) the identity on the target frame.
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(cast(torch.Tensor, self.head.bias))

    def config(self) -> dict[str, int | str | bool]:
        """The constructor's arguments, for checkpoints and model cards; ``fine`` only where there are
        any, so the cards of models without them read as before."""
        config: dict[str, int | str | bool] = {
            "t": self.t,
            "position": self.output_position.value,
            "embed": self.embed_channels,
            "features": self.features,
            "channels": self.channels,
            "blocks": self.blocks,
            "strength": self.takes_strength,
        }
        return config | ({"fine": self.fine_blocks} if self.fine_blocks else {})

    def entry(self, frames: torch.Tensor) -> torch.Tensor:
        """The fused features at 1/2 resolution of (B, T*3, H, W) stacked frames: the Conv3d's parameters
        applied as one 2-D convolution with no transpose of the input (a 7-D transpose and the Conv3d would be
        much of onnxruntime's time). Space-to-depth x2 and the per-frame 1x1 embedding are one 2x2 stride-2
        convolution of each frame, and the Conv3d spanning all T frames a 3x3 over their embeddings; with no
        activation between, the two are one 6x6 stride-2 convolution of the stacked frames (the entry's only
        pass over full resolution: faster in onnxruntime than the two with the layout changes between them,
        and no T x embed maps in memory). The embedding's bias, which the 3x3 saw only inside the frame (its
        padding is zeros, not an embedded black block), comes in as a map: the taps that fall inside, summed,
        from a 3x3 convolution of ones. The weights are composed here, in the graph: the exported file keeps
        the factors (``export.recover`` reads them) and onnxruntime folds the composition when it loads."""
        t, embed, h, w = self.t, self.embed_channels, frames.shape[2], frames.shape[3]
        k = self.embed.weight.reshape(embed, 3, 2, 2)
        # Centred input (x - 0.5; on raw [0, 1] input training stalled) folded into the bias.
        bias = cast(torch.Tensor, self.embed.bias) - 0.5 * k.sum(dim=(1, 2, 3))
        fuse = self.fuse.weight.permute(0, 2, 1, 3, 4)  # (F, T, embed, 3, 3)
        # kernel row 2*i + a of the 6x6: tap i of the 3x3 over the 2x2 blocks, row a inside its block
        merged = torch.einsum("otexy,ecab->otcxayb", fuse, k).reshape(self.features, t * 3, 6, 6)
        taps = torch.einsum("otexy,e->oxy", fuse, bias)[:, None]
        inside = F.conv2d(frames.new_ones(1, 1, h // 2, w // 2), taps, self.fuse.bias, padding=1)
        fused: torch.Tensor = F.conv2d(frames, merged, stride=2, padding=2) + inside
        return fused

    def forward(self, x: torch.Tensor, strength: torch.Tensor | None = None) -> torch.Tensor:
        b, _, c, h, w = x.shape
        t = self.t  # a Python int, not a traced size: export needs the kernels' shapes static
        fused = self.entry(x.reshape(b, t * c, h, w))
        half, quarter = two_scales(fused, self.down, self.condition, strength, "Conv3dEnhancer")
        quarter = self.body(quarter)
        y = self.fine(activation(half + up_transposed(self.up, quarter)))
        y = self.head(activation(self.refine(y)))
        return x[:, self.slot] + F.pixel_shuffle(y, 2)
