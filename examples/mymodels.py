"""Three small PyTorch models that declare nothing, as a user's own would be (a window model, a per-frame
one, a recurrent one); examples/README.md exports and runs each. Untrained: they show the contract, not
quality."""

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn


class Denoiser3D(nn.Module):
    """A Conv3d over a 3-frame window: (B, 3, T, H, W) in 0..1 -> the centre frame enhanced."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fuse = nn.Conv3d(3, width, (3, 3, 3), padding=(0, 1, 1))
        self.out = nn.Conv2d(width, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centre = x[:, :, 1]
        enhanced: torch.Tensor = centre + self.out(torch.relu(self.fuse(x).squeeze(2)))
        return enhanced


class LevelsDenoiser(nn.Module):
    """A per-frame 2D network trained on pixel levels: (B, 3, H, W) in 0..255 -> the same, enhanced."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, 3, 3, padding=1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        enhanced: torch.Tensor = x + self.body(x / 255.0)
        return enhanced


def make_denoiser(width: int = 16) -> nn.Module:
    return Denoiser3D(width)


def make_levels_denoiser(width: int = 16) -> nn.Module:
    return LevelsDenoiser(width)


class RecurrentDenoiser(nn.Module):
    """Causal and recurrent: the newest frame (B, 1, 3, H, W) in 0..1 and a memory (B, width, H/2, W/2)
    -> the frame enhanced and the memory for the next call. H and W must be even (--pad-multiple 2)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.encode = nn.Conv2d(3, width, 3, stride=2, padding=1)
        self.update = nn.Conv2d(2 * width, width, 3, padding=1)
        self.decode = nn.Conv2d(width, 12, 3, padding=1)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        frame = x[:, 0]
        features = torch.relu(self.encode(frame))
        memory = torch.tanh(self.update(torch.cat([features, memory], dim=1)))
        enhanced: torch.Tensor = frame + F.pixel_shuffle(self.decode(memory), 2)
        return enhanced, memory


def make_recurrent_denoiser(width: int = 8) -> nn.Module:
    return RecurrentDenoiser(width)
