"""What training optimises and how a model is measured, in plain torch: loss, PSNR, MACs, a clip's run.

Both trainers use it: ``export.train`` (``streamer train``, CPU, PyAV's data) and ``export.gpu_train``
(a data pack on a lent GPU, where PyAV, onnx and onnxruntime may be absent), and the exporter counts
MACs with it; so it imports nothing but torch and the runtime's pure modules.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from streamer.backend.base import Layout
from streamer.core.noise import noise_sigma

__all__ = [
    "LOSSES",
    "LOSS_SPACES",
    "LUMA_WEIGHTS",
    "count_macs",
    "delivered_420",
    "enhance_clip",
    "is_recurrent",
    "noise_strengths",
    "psnr",
    "training_loss",
    "window_input",
    "zero_states",
]

LOSSES = ("charbonnier", "l1", "l2")

LOSS_SPACES = ("rgb", "yuv420")
"""Where the loss compares a model's output with the clean frames: as RGB, or as the picture a 4:2:0
stream delivers of it (:func:`delivered_420`)."""

LUMA_WEIGHTS = (0.299, 0.587, 0.114)
"""R, G and B's shares of luma in BT.601, the matrix the training streams are coded in (swscale's
default for RGB to 4:2:0, which x264's input goes through in ``export.data`` and ``export.camera``)."""


def delivered_420(frames: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) RGB, H and W even -> the same frames as a 4:2:0 stream delivers them: each pixel's
    luma as it is, its colour (the pixel less its luma, per channel) averaged over its 2x2 block.

    Streamer carries a model's change back onto the decoder's 4:2:0 planes, and a player shows each
    chroma sample over its block, so colour detail finer than a block never reaches anyone. A loss taken
    on this picture gives such detail no credit and lets the model spend itself on what is delivered:
    the luma and the blocks' colour. Linear, so it costs one pooling per step."""
    red, green, blue = LUMA_WEIGHTS
    luma = (
        red * frames[..., 0, :, :] + green * frames[..., 1, :, :] + blue * frames[..., 2, :, :]
    ).unsqueeze(-3)
    colour = frames - luma
    height, width = frames.shape[-2:]
    blocks = nn.functional.avg_pool2d(colour.reshape(-1, 3, height, width), 2)
    shown = nn.functional.interpolate(blocks, scale_factor=2.0, mode="nearest")
    return luma + shown.reshape(colour.shape)


def training_loss(kind: str, output: torch.Tensor, target: torch.Tensor, space: str = "rgb") -> torch.Tensor:
    """Charbonnier (a smooth L1 that does not blur as L2 does), plain L1, or L2 (the mean squared error,
    which PSNR scores: for a last fine-tune that aims at PSNR), averaged; in ``space`` ``yuv420`` on
    the picture a 4:2:0 stream delivers of ``output`` (:func:`delivered_420`) against the clean
    ``target``, which is what a viewer's PSNR scores."""
    if space == "yuv420":
        output = delivered_420(output)
    if kind == "l1":
        return (output - target).abs().mean()
    if kind == "l2":
        return ((output - target) ** 2).mean()
    return torch.sqrt((output - target) ** 2 + 1e-6).mean()


def psnr(output: torch.Tensor, target: torch.Tensor) -> float:
    """PSNR in dB of outputs in [0, 1] (clipped first) against targets."""
    mse = float(torch.mean((output.float().clamp(0.0, 1.0) - target.float()) ** 2))
    return 10.0 * math.log10(1.0 / max(mse, 1e-12))


def is_recurrent(module: nn.Module) -> bool:
    """Whether ``module`` declares recurrent states (``state_specs``), which its forward takes and returns."""
    return len(getattr(module, "state_specs", ())) > 0


def noise_strengths(frames: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) in [0, 1] -> (B, 1): each frame's noise sigma as ``streamer.core.noise`` reads it,
    which is what ``model.strength: auto`` feeds a model live. Both trainers give a model that takes a
    strength this of each sequence's first degraded frame: Gaussian noise reads as its sigma, compressed
    or clean frames as about 0..1, so the strength tells noise from compression."""
    pixels = (frames.detach() * 255.0).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    return torch.tensor([[noise_sigma(p)] for p in pixels], dtype=torch.float32, device=frames.device)


def zero_states(module: nn.Module, frames: torch.Tensor) -> list[torch.Tensor]:
    """The runtime's start: one zero tensor per ``state_specs`` entry for frames (B, T, 3, H, W), float32."""
    b, h, w = frames.shape[0], frames.shape[-2], frames.shape[-1]
    specs: Any = getattr(module, "state_specs", ())
    return [
        torch.zeros(b, s.channels, -(-h // s.scale), -(-w // s.scale), device=frames.device) for s in specs
    ]


def enhance_clip(model: nn.Module, noisy: torch.Tensor, strength: float | None = None) -> torch.Tensor:
    """(N, 3, H, W) -> (N, 3, H, W) enhanced as the runtime runs it; H, W must fit the pad multiple.

    A recurrent model runs the clip in order from zero states; a window model enhances every frame
    from its window, edges replicated; either is given ``strength`` (0..255) if it takes one.
    """
    module: Any = model  # the registry's attributes (t, layout, output_position) are not nn.Module's
    n = noisy.shape[0]
    # A model that takes a strength and is given none says so itself (a ConfigError naming it).
    extra: tuple[torch.Tensor, ...] = ()
    if strength is not None and getattr(module, "takes_strength", False):
        extra = (torch.full((1, 1), float(strength), device=noisy.device),)
    if is_recurrent(module):
        states = zero_states(module, noisy[None, :1])
        outs = []
        for i in range(n):
            out, *states = module(noisy[None, i : i + 1], *states, *extra)
            outs.append(out[0])
        return torch.stack(outs)
    t = int(module.t)
    slot = module.output_position.slot(t)
    index = torch.arange(n)[:, None] + torch.arange(t)[None, :] - slot
    windows = noisy[index.clamp(0, n - 1)]
    return torch.cat([module(window_input(w[None], module.layout), *extra) for w in windows])


def window_input(frames: torch.Tensor, layout: Layout) -> torch.Tensor:
    """(B, T, 3, H, W) -> the window model's layout (NTCHW as it is, NCTHW transposed)."""
    return frames if layout is Layout.NTCHW else frames.transpose(1, 2)


def count_macs(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    """Multiply-accumulates of the convolutions and matrix products in one forward call on ``inputs``.

    Counted on the operators PyTorch dispatches, not on the layers: the models apply most weights
    through ``F.conv2d`` (folded or reshaped at export), which hooks on ``nn.Conv2d`` never see (they
    would miss conv3d_t5's Conv3d, a large part of its work)."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(*inputs)
    return int(counter.get_total_flops()) // 2  # a multiply-accumulate is two of its FLOPs
