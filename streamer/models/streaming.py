"""A temporal enhancer whose every frame is encoded once: the live tier for CPUs.

A window model that re-reads T full-resolution frames for every output frame pays T times for work
that does not change between overlapping windows (quantizing, reordering and convolving the same
frames again); on two AVX2 cores that alone is most of a 720p frame's budget. This model splits in
two: ``encode`` turns one frame into features at 1/2 and 1/4 resolution (strided entry, a residual
block at 1/4), computed once per frame and cached by the runtime beside the frame; ``fuse`` combines
the T cached feature maps of a window into the target frame, as a residual on it. ``forward`` is the
two composed on a whole window, so training, export parity and the runtime's cached path compute the
same function.
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

__all__ = ["StreamingEnhancer"]

_MIXING = {"pointwise", "separable", "dense"}


def _mixer(kind: str, inputs: int, outputs: int) -> nn.Module:
    """How a window's T stacked maps are mixed: 1x1 (no spatial support, so no motion tolerance), a
    per-map 3x3 then 1x1 (each slot's map shifted on its own, then mixed: cheap motion tolerance), or a
    dense 3x3 (the most capable, T times the cost of the separable one's 3x3)."""
    if kind == "pointwise":
        return nn.Conv2d(inputs, outputs, 1)
    if kind == "dense":
        return nn.Conv2d(inputs, outputs, 3, padding=1)
    return nn.Sequential(
        nn.Conv2d(inputs, inputs, 3, padding=1, groups=inputs), nn.Conv2d(inputs, outputs, 1)
    )


class StreamingEnhancer(nn.Module):
    """(B, T, 3, H, W) float in [0, 1], NTCHW -> (B, 3, H, W); ``encode`` + ``fuse`` for streaming.

    Per frame (``encode``): a 2x2 stride-2 entry (space-to-depth and a 1x1 projection in one op), a 3x3
    convolution at 1/2 resolution (``half`` channels kept), a strided convolution to 1/4 and a residual
    block there (``quarter`` channels kept). Per window (``fuse``): the T quarter maps are mixed by a
    1x1 convolution and a residual block, brought up by depth-to-space, joined with the T half maps
    mixed by a 1x1 convolution, refined and turned into a residual on the target frame. H and W must
    be multiples of 4.
    """

    layout: ClassVar[Layout] = Layout.NTCHW
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    state_specs: ClassVar[tuple[()]] = ()
    pad_multiple: ClassVar[int] = 4
    feature_names: ClassVar[tuple[str, str]] = ("half", "quarter")
    """The maps ``encode`` returns, in order: the graphs' tensor names and the runtime's cache entries."""
    feature_scales: ClassVar[tuple[int, int]] = (2, 4)
    """Downscale of each map against the (padded) frame."""

    def __init__(
        self,
        t: int = 5,
        position: OutputPosition = OutputPosition.CENTER,
        half: int = 12,
        quarter: int = 32,
        fused: int = 32,
        refine: int = 16,
        mixing: str = "separable",
    ) -> None:
        super().__init__()
        if mixing not in _MIXING:
            raise ConfigError(f"StreamingEnhancer mixing must be one of {sorted(_MIXING)}; got {mixing!r}")
        if min(t, half, quarter, fused, refine) < 1:
            raise ConfigError(
                f"StreamingEnhancer needs t, half, quarter, fused, refine >= 1; got t={t}, half={half}, "
                f"quarter={quarter}, fused={fused}, refine={refine}"
            )
        self.t = t
        self.output_position = position
        self.slot = position.slot(t)
        self.half_channels = half
        self.quarter_channels = quarter
        self.fused = fused
        self.refine_channels = refine
        self.entry = nn.Conv2d(3, half, 2, stride=2)
        self.spatial = nn.Conv2d(half, half, 3, padding=1)
        self.down = nn.Conv2d(half, quarter, 3, stride=2, padding=1)
        self.frame_block = ResidualBlock(quarter)
        self.mixing = mixing
        self.mix_quarter = _mixer(mixing, t * quarter, fused)
        self.window_block = ResidualBlock(fused)
        self.up = nn.Conv2d(fused, 4 * refine, 1)
        # The window's linear half maps, mixed densely: the early temporal fusion that denoises.
        self.mix_half = nn.Conv2d(t * half, refine, 3, padding=1)
        self.fused_down = nn.Conv2d(refine, fused, 3, stride=2, padding=1)
        self.refine = nn.Conv2d(refine, refine, 3, padding=1)
        self.head = nn.Conv2d(refine, 12, 3, padding=1)
        # A near-zero head makes the untrained model (almost) the identity on the target frame.
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(cast(torch.Tensor, self.head.bias))

    @property
    def feature_channels(self) -> tuple[int, int]:
        """Channels of each cached feature map, in ``encode``'s output order."""
        return (self.half_channels, self.quarter_channels)

    def config(self) -> dict[str, int | str]:
        """The constructor's arguments, for checkpoints and model cards."""
        return {
            "t": self.t,
            "position": self.output_position.value,
            "half": self.half_channels,
            "quarter": self.quarter_channels,
            "fused": self.fused,
            "refine": self.refine_channels,
            "mixing": self.mixing,
        }

    def encode(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, 3, H, W) frames in [0, 1] -> their (N, half, H/2, W/2) and (N, quarter, H/4, W/4) features."""
        h = self.entry(frames - 0.5)
        q = activation(self.spatial(activation(h)))
        q = self.frame_block(activation(self.down(q)))
        return h, q

    def fuse(self, halves: torch.Tensor, quarters: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """A window's features, (B, T*half, H/2, W/2) and (B, T*quarter, H/4, W/4) stacked in slot order,
        and its target frame (B, 3, H, W) -> the enhanced target frame."""
        h = activation(self.mix_half(halves))
        q = self.window_block(activation(self.mix_quarter(quarters) + self.fused_down(h)))
        y = activation(h + F.pixel_shuffle(self.up(q), 2))
        y = self.head(activation(self.refine(y)))
        return target + F.pixel_shuffle(y, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, c, h, w = x.shape
        t = self.t  # a Python int, not a traced size: export needs the kernels' shapes static
        halves, quarters = self.encode(x.reshape(b * t, c, h, w))
        return self.fuse(
            halves.reshape(b, t * self.half_channels, h // 2, w // 2),
            quarters.reshape(b, t * self.quarter_channels, h // 4, w // 4),
            x[:, self.slot],
        )
