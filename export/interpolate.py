"""Weights between two models of one architecture (``python -m export.interpolate A B --weight W --out P``).

A fine-tune that wins on the data it was tuned on can lose a property the model had before it, one
the tuning data never asked for (a recurrent model tuned on a camera's 4:2:0 noise leaning on the
previous frame where a pixel flips). The weights on the straight line between the model it started
from (A) and the fine-tune (B), ``(1 - W) * A + W * B``, keep much of both (weight-space ensembling,
as in WiSE-FT): the two share a start, so their weights lie in one basin. Either side is a training
checkpoint or an exported ONNX file (rebuilt by ``export.recover``); the result is a state_dict for
``streamer export --arch ... --weights``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from export.recover import weights_of
from streamer.errors import ConfigError, ModelError, StreamerError

__all__ = ["interpolate", "main"]


def interpolate(
    start: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], weight: float
) -> dict[str, torch.Tensor]:
    """``(1 - weight) * start + weight * tuned``, tensor by tensor; integer tensors (counters) from
    ``tuned``. Raises ModelError where the two do not hold the same tensors of the same shapes."""
    if not 0.0 <= weight <= 1.0:
        raise ConfigError(f"weight is the share of the second model, 0..1; got {weight}")
    if start.keys() != tuned.keys():
        differ = sorted(start.keys() ^ tuned.keys())
        raise ModelError(
            f"the two models hold different tensors ({', '.join(differ[:5])}): not one architecture"
        )
    out: dict[str, torch.Tensor] = {}
    for name, value in tuned.items():
        if start[name].shape != value.shape:
            raise ModelError(
                f"tensor {name!r} is {tuple(start[name].shape)} in the first model and {tuple(value.shape)} "
                "in the second: not one architecture"
            )
        out[name] = (
            torch.lerp(start[name].to(value.dtype), value, weight) if value.is_floating_point() else value
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.interpolate",
        description="Write (1 - W) * A + W * B of two models of one architecture (a model and its fine-tune) "
        "as a state_dict for streamer export --weights.",
    )
    parser.add_argument(
        "start", type=Path, help="A: the model the fine-tune started from (checkpoint or ONNX)"
    )
    parser.add_argument("tuned", type=Path, help="B: the fine-tune (checkpoint or ONNX)")
    parser.add_argument("--weight", type=float, required=True, help="W, the share of B, 0..1")
    parser.add_argument("--out", type=Path, required=True, help="the state_dict .pt to write")
    args = parser.parse_args(argv)
    try:
        state = interpolate(weights_of(args.start), weights_of(args.tuned), args.weight)
    except StreamerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.save(state, args.out)
    print(f"wrote {args.out}: {1 - args.weight:g} x {args.start} + {args.weight:g} x {args.tuned}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
