"""The training checkpoint file: what ``streamer train`` writes and training, distillation and export read.

Its own module so that each of those imports it and none imports another for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from streamer.errors import ConfigError, ModelError

__all__ = ["CHECKPOINT", "FORMAT", "load_checkpoint", "save_checkpoint"]

CHECKPOINT = "checkpoint.pt"
"""The file name inside a run folder."""
FORMAT = 1
"""The payload's ``format``; a checkpoint of another format is refused."""


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Writes the checkpoint atomically, so an interrupted save never replaces a good one with half a file."""
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint written by ``train``, checked for the keys the exporter and ``--resume`` read."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"checkpoint {str(file)!r} does not exist; train first (streamer train --out DIR)")
    try:
        payload: dict[str, Any] = torch.load(file, map_location="cpu", weights_only=False)
    except Exception as err:
        raise ModelError(f"cannot read checkpoint {str(file)!r}: {err}") from err
    missing = {"format", "architecture", "model_config", "model", "step", "train_config"} - set(payload)
    if missing or payload.get("format") != FORMAT:
        raise ModelError(
            f"{str(file)!r} is not a streamer training checkpoint (format {FORMAT}); "
            f"missing {sorted(missing)}"
        )
    return payload
