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

from collections.abc import Callable
from functools import partial
from typing import ClassVar, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from export.models.conv3d import Conv3dEnhancer, ResidualBlock, activation, up_transposed
from streamer.backend.base import Layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

__all__ = ["StreamingEnhancer"]

_MIXING = {"pointwise", "separable", "dense"}
_SCALE_NAMES = {2: "half", 4: "quarter", 8: "eighth"}
"""A cached map's name by its downscale: the graphs' tensor names and the runtime's cache entries."""


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


def _on_levels(conv: nn.Conv2d) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight and bias of an unpadded ``conv`` applied to ``levels / 255 - 0.5``, as applied to
    the levels themselves (computed from the parameters inside an exported graph, where onnxruntime
    folds them once at load and the trained weights stay readable by name)."""
    weight = conv.weight
    bias = cast(torch.Tensor, conv.bias) - 0.5 * weight.sum(dim=(1, 2, 3))
    return weight / 255.0, bias


def _strided_on_rows(pixels: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``conv2d`` of (N, H, W, 3) pixels (NHWC) with an unpadded e x e stride-e ``weight``, without
    transposing them: each row of an NHWC frame is one row of 3W samples, so an e x e cell of it is an
    e x 3e patch of a one-channel image (a transpose of a 720p frame costs as much as the convolution)."""
    out, _, e, _ = weight.shape
    rows = pixels.flatten(2).unsqueeze(1)
    packed = weight.permute(0, 2, 3, 1).reshape(out, 1, e, 3 * e)
    return F.conv2d(rows, packed, bias, stride=(e, 3 * e))


class StreamingEnhancer(nn.Module):
    """(B, T, 3, H, W) float in [0, 1], NTCHW -> (B, 3, H, W); ``encode`` + ``fuse`` for streaming.

    Per frame (``encode``): an ``entry`` x ``entry`` strided entry (space-to-depth and a 1x1 projection
    in one op) gives linear maps at 1/``entry`` resolution (``half`` channels kept; 1/2 by default,
    whence the name); with ``quarter`` > 0, a 3x3 convolution, a strided one and a residual block also
    give maps at half that resolution (``quarter`` channels kept). Per window (``fuse``): the T entry
    maps are mixed densely by a 3x3 convolution (the early temporal fusion that denoises), halved again
    by a strided convolution and joined there by the mixed quarter maps, through ``blocks`` residual
    blocks, brought up by depth-to-space, joined with the entry-resolution fusion by a skip, refined and
    turned by depth-to-space into a residual on the target frame. ``entry=4`` runs all of that at a
    quarter of the resolution (about a third of the multiply-adds per pixel): the 720p tier. Its cached
    maps keep fewer numbers than a 4x4 cell of pixels holds, so the fusion also reads the target's own
    cells (``target_entry``, joined to the mixed maps, and ``target_skip``, a linear map of each cell
    into its residual, starting at zero): detail and noise the cache dropped are still there to act on.
    With ``entry=2, quarter=0`` this is ``Conv3dEnhancer``'s function exactly (``from_conv3d``). H and
    W must be multiples of ``pad_multiple`` (2 * ``entry``). ``half_mixing`` (dense by default) and
    ``head_kernel`` (3 or 1) trade the two costliest convolutions of a cheap tier for speed.
    """

    layout: ClassVar[Layout] = Layout.NTCHW
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    state_specs: ClassVar[tuple[()]] = ()
    pad_multiple: int

    def __init__(
        self,
        t: int = 5,
        position: OutputPosition = OutputPosition.CENTER,
        half: int = 12,
        quarter: int = 32,
        fused: int = 32,
        refine: int = 16,
        mixing: str = "separable",
        blocks: int = 1,
        entry: int = 2,
        half_mixing: str = "dense",
        head_kernel: int = 3,
    ) -> None:
        super().__init__()
        for key, kind in (("mixing", mixing), ("half_mixing", half_mixing)):
            if kind not in _MIXING:
                raise ConfigError(f"StreamingEnhancer {key} must be one of {sorted(_MIXING)}; got {kind!r}")
        if head_kernel not in (1, 3):
            raise ConfigError(f"StreamingEnhancer head_kernel must be 1 or 3; got {head_kernel!r}")
        if min(t, half, fused, refine) < 1 or min(quarter, blocks) < 0:
            raise ConfigError(
                f"StreamingEnhancer needs t, half, fused, refine >= 1 and quarter, blocks >= 0; got t={t}, "
                f"half={half}, quarter={quarter}, fused={fused}, refine={refine}, blocks={blocks}"
            )
        if entry not in _SCALE_NAMES or 2 * entry not in _SCALE_NAMES:
            raise ConfigError(f"StreamingEnhancer entry (the entry stride) must be 2 or 4; got {entry!r}")
        self.t = t
        self.output_position = position
        self.slot = position.slot(t)
        self.half_channels = half
        self.quarter_channels = quarter
        self.fused = fused
        self.refine_channels = refine
        self.mixing = mixing
        self.blocks = blocks
        self.entry_stride = entry
        self.pad_multiple = 2 * entry
        self.entry = nn.Conv2d(3, half, entry, stride=entry)
        if quarter:
            self.spatial = nn.Conv2d(half, half, 3, padding=1)
            self.down = nn.Conv2d(half, quarter, 3, stride=2, padding=1)
            self.frame_block = ResidualBlock(quarter)
            self.mix_quarter = _mixer(mixing, t * quarter, fused)
        self.half_mixing = half_mixing
        self.head_kernel = head_kernel
        self.mix_half = _mixer(half_mixing, t * half, refine)
        self.fused_down = nn.Conv2d(refine, fused, 3, stride=2, padding=1)
        self.window_blocks = nn.Sequential(*(ResidualBlock(fused) for _ in range(blocks)))
        self.up = nn.Conv2d(fused, 4 * refine, 1)
        self.refine = nn.Conv2d(refine, refine, 3, padding=1)
        self.head = nn.Conv2d(refine, 3 * entry * entry, head_kernel, padding=head_kernel // 2)
        self.target_entry: nn.Conv2d | None = None
        self.target_skip: nn.Conv2d | None = None
        if entry > 2:
            self.target_entry = nn.Conv2d(3, refine, entry, stride=entry)
            self.target_skip = nn.Conv2d(3, 3 * entry * entry, entry, stride=entry)
            nn.init.zeros_(self.target_skip.weight)
            nn.init.zeros_(cast(torch.Tensor, self.target_skip.bias))
        # A near-zero head makes the untrained model (almost) the identity on the target frame.
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(cast(torch.Tensor, self.head.bias))

    @classmethod
    def from_conv3d(cls, model: Conv3dEnhancer) -> StreamingEnhancer:
        """The same function as ``model``, split for streaming: its per-frame embedding becomes the
        encoder, its Conv3d spanning all T frames a dense 3x3 over the T stacked half maps. A model with
        a strength input or ``fine`` blocks has parts the streaming graphs do not, and is refused rather
        than converted without them."""
        if model.takes_strength or model.fine_blocks:
            raise ConfigError(
                f"a Conv3dEnhancer with strength={model.takes_strength} and fine={model.fine_blocks} cannot "
                "be split for streaming (the streaming graphs have no strength input and no fine blocks); "
                "export it as a window model, without --streaming"
            )
        t, embed, features = model.t, model.embed_channels, model.features
        out = cls(
            t=t,
            position=model.output_position,
            half=embed,
            quarter=0,
            fused=model.channels,
            refine=features,
            blocks=model.blocks,
        )
        with torch.no_grad():
            out.entry.weight.copy_(model.embed.weight.reshape(embed, 3, 2, 2))
            cast(torch.Tensor, out.entry.bias).copy_(cast(torch.Tensor, model.embed.bias))
            fuse = model.fuse.weight.permute(0, 2, 1, 3, 4)  # (out, T, embed, 3, 3): slot-major channels
            mix = cast(nn.Conv2d, out.mix_half)  # dense, the default half_mixing
            mix.weight.copy_(fuse.reshape(features, t * embed, 3, 3))
            cast(torch.Tensor, mix.bias).copy_(cast(torch.Tensor, model.fuse.bias))
            for target, source in (
                (out.fused_down, model.down),
                (out.window_blocks, model.body),
                (out.up, model.up),
                (out.refine, model.refine),
                (out.head, model.head),
            ):
                target.load_state_dict(source.state_dict())
        return out

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The maps ``encode`` returns, in order: the graphs' tensor names and the runtime's cache entries."""
        return tuple(_SCALE_NAMES[s] for s in self.feature_scales)

    @property
    def feature_scales(self) -> tuple[int, ...]:
        """Downscale of each map against the (padded) frame."""
        s = self.entry_stride
        return (s, 2 * s) if self.quarter_channels else (s,)

    @property
    def feature_channels(self) -> tuple[int, ...]:
        """Channels of each cached feature map, in ``encode``'s output order."""
        if self.quarter_channels:
            return (self.half_channels, self.quarter_channels)
        return (self.half_channels,)

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
            "blocks": self.blocks,
            "entry": self.entry_stride,
            "half_mixing": self.half_mixing,
            "head_kernel": self.head_kernel,
        }

    def encode(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(N, 3, H, W) frames in [0, 1] -> their (N, half, H/e, W/e) features (e = ``entry``) and,
        with ``quarter``, their (N, quarter, H/2e, W/2e) ones."""
        return self._encoded(self.entry(frames - 0.5))

    def encode_levels(self, pixels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``encode`` of (N, H, W, 3) frames as decoded (NHWC, 0..255 levels in float): the scale and the
        shift are folded into the entry's weights and the entry reads the rows as they are, so an
        exported encoder does no arithmetic on the full-resolution frame and does not transpose it."""
        weight, bias = _on_levels(self.entry)
        return self._encoded(_strided_on_rows(pixels, weight, bias))

    def _encoded(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not self.quarter_channels:
            return (h,)
        q = activation(self.spatial(activation(h)))
        return h, self.frame_block(activation(self.down(q)))

    def fuse(self, *inputs: torch.Tensor) -> torch.Tensor:
        """A window's features, one tensor per map in ``feature_names`` order with the T slots stacked
        on channels ((B, T*half, H/e, W/e), then (B, T*quarter, H/2e, W/2e)), and its target frame
        (B, 3, H, W) -> the enhanced target frame."""
        *maps, target = inputs
        entry = None if self.target_entry is None else self.target_entry(target - 0.5)
        y = self.head(self._refined(maps, entry, lambda q: F.pixel_shuffle(self.up(q), 2)))
        if self.target_skip is not None:
            y = y + self.target_skip(target - 0.5)
        return target + F.pixel_shuffle(y, self.entry_stride)

    def fuse_cells(self, *inputs: torch.Tensor) -> torch.Tensor:
        """``fuse`` on a target as decoded ((B, H, W, 3) 0..255 levels in float) -> the enhanced frame in
        levels, before rounding, as e x e cells (B, 3*e*e, H/e, W/e): what ``pixel_shuffle`` by e turns
        into the frame.

        The target's strided convolutions (its cells' entry, the linear skip, and the identity that adds the
        target itself) become one, and the head is scaled to levels, so an exported fusion graph touches the
        full-resolution frame only in that convolution and in a uint8 depth-to-space: no float frame is added,
        divided, rounded or reordered (each such pass costs a share of a frame's CPU time)."""
        *maps, target = inputs
        e = self.entry_stride
        cells = 3 * e * e
        # Row c*e*e + i*e + j takes pixel (i, j) of colour c: the cell order of pixel_shuffle.
        identity = torch.eye(cells, dtype=target.dtype, device=target.device).reshape(cells, 3, e, e)
        weights, biases = [], []
        if self.target_entry is not None:
            weight, bias = _on_levels(self.target_entry)
            weights.append(weight)
            biases.append(bias)
        if self.target_skip is not None:
            weight, bias = _on_levels(self.target_skip)
            weights.append(255.0 * weight + identity)
            biases.append(255.0 * bias)
        else:
            weights.append(identity)
            biases.append(torch.zeros(cells, dtype=target.dtype, device=target.device))
        joint = _strided_on_rows(target, torch.cat(weights), torch.cat(biases))
        entry = None if self.target_entry is None else joint[:, : self.refine_channels]
        head = cast(torch.Tensor, self.head.bias)
        y = F.conv2d(
            self._refined(maps, entry, partial(up_transposed, self.up)),
            255.0 * self.head.weight,
            255.0 * head,
            padding=self.head_kernel // 2,
        )
        return y + joint[:, -cells:]

    def _refined(
        self,
        maps: list[torch.Tensor],
        entry: torch.Tensor | None,
        upsample: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The fused and refined maps at entry resolution, the head's input; ``entry``: the target's
        own cells' term (``entry`` > 2); ``upsample``: 1/2e resolution to 1/e, as ``up`` and
        depth-to-space."""
        h = self.mix_half(maps[0])
        if entry is not None:
            h = h + entry
        h = activation(h)
        q = self.fused_down(h)
        if self.quarter_channels:
            q = q + self.mix_quarter(maps[1])
        q = self.window_blocks(activation(q))
        y = activation(h + upsample(q))
        return activation(self.refine(y))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, c, h, w = x.shape
        t = self.t  # a Python int, not a traced size: export needs the kernels' shapes static
        maps = self.encode(x.reshape(b * t, c, h, w))
        stacked = [
            m.reshape(b, t * channels, h // scale, w // scale)
            for m, channels, scale in zip(maps, self.feature_channels, self.feature_scales, strict=True)
        ]
        return self.fuse(*stacked, x[:, self.slot])
