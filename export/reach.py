"""A model's reach: how far, in pixels, an input pixel can move an output pixel
(``python -m export.reach MODEL.onnx ... [--write-card]``).

The tile gate (``gate.tile``) runs only the box around what changed, widened by a halo that must cover
this reach, or the box's border pixels differ from the whole frame's (a seam). A fixed halo is either
wasteful for a model of short reach or wrong for one of long reach: conv3d_t5 reaches 25 pixels, the
720p tier, whose fusion runs at 1/4 and 1/8 resolution, 35 (past a 32-pixel halo that covers the first). The
reach is measured exactly, from the gradient of output pixels with respect to the window (every
LeakyReLU passes some gradient, so each input pixel within the receptive field gets a non-zero one;
``PHASES`` pixels cover every position against the model's strides), and
kept in the model card as ``reach_px``, which the runtime reads for ``gate.halo: null``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch
from torch import nn

from streamer.backend.base import Layout
from streamer.contract import CARD_REACH_KEY
from streamer.errors import ConfigError, StreamerError

__all__ = ["module_reach", "receptive_reach"]

logger = logging.getLogger(__name__)

MAX_SIZE = 1024
"""The widest window measured: a model that reaches past half of it (a global pooling, say) has no
reach a halo could cover."""

PHASES = 16
"""Output pixels measured, along the diagonal: at least the model's largest stride product (8 here), so
every position against the strides is taken."""


def receptive_reach(
    module: nn.Module, layout: Layout | None = None, t: int | None = None, size: int = 256
) -> int:
    """The largest distance, along either axis, from an output pixel to an input pixel (of any frame of
    the window) with a non-zero gradient, over ``PHASES`` output pixels at the centre of a ``size`` x
    ``size`` window."""
    layout = layout or cast(Layout, getattr(module, "layout", Layout.NTCHW))
    t = t or int(getattr(module, "t", 1))
    shapes = {
        Layout.NTCHW: (1, t, 3, size, size),
        Layout.NCTHW: (1, 3, t, size, size),
        Layout.STACKED: (1, 3 * t, size, size),
        Layout.NCHW: (1, 3, size, size),
    }
    window = torch.full(shapes[layout], 0.5, dtype=torch.float64, requires_grad=True)
    module = copy.deepcopy(module).double().eval()
    out = module(window)
    if isinstance(out, tuple):
        raise ConfigError(
            "reach is measured on window models; a recurrent model's step returns its state too"
        )
    if tuple(out.shape[-2:]) != (size, size):
        raise ConfigError(
            f"reach is measured on the input's grid; the model turns {size}x{size} into {out.shape}"
        )
    reach = 0
    for centre in range(size // 2, size // 2 + PHASES):  # the diagonal: every row phase and column phase
        (grad,) = torch.autograd.grad(out[0, :, centre, centre].sum(), window, retain_graph=True)
        ys, xs = torch.nonzero(grad.abs().reshape(-1, size, size).sum(dim=0), as_tuple=True)
        reach = max(
            reach, int(max(centre - ys.min(), ys.max() - centre, centre - xs.min(), xs.max() - centre))
        )
    if reach >= size // 2 - PHASES:
        if size >= MAX_SIZE:
            raise ConfigError(
                f"{type(module).__name__} reaches past {size // 2 - PHASES} px (a global operation?): no "
                "reach to record; the tile gate needs gate.halo set for it"
            )
        return receptive_reach(module, layout, t, size * 2)
    return reach


def module_reach(module: nn.Module, layout: Layout, t: int) -> int | None:
    """The reach of a window model whose forward takes the window alone and keeps its grid, for its
    card; None for any other (a recurrent or scaling model, one that takes a strength: the tile gate
    does not cut boxes for those)."""
    try:
        return receptive_reach(module, layout, t)
    except (ConfigError, RuntimeError, TypeError) as err:  # a module of another shape: no reach recorded
        logger.info("no reach recorded for %s: %s", type(module).__name__, err)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    from export.recover import rebuild

    parser = argparse.ArgumentParser(prog="python -m export.reach", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "models", nargs="+", type=Path, metavar="MODEL.onnx", help="Conv3d or streaming models"
    )
    parser.add_argument(
        "--write-card", action="store_true", help=f"store it as {CARD_REACH_KEY} in each card"
    )
    args = parser.parse_args(argv)
    try:
        for path in args.models:
            reach = receptive_reach(rebuild(path))
            line = f"{path.name}: reach {reach} px"
            if args.write_card:
                card = path.with_suffix(".json")
                body = json.loads(card.read_text())
                body[CARD_REACH_KEY] = reach
                card.write_text(json.dumps(body, indent=2) + "\n")
                line += f", written to {card.name}"
            print(line)
    except (StreamerError, OSError, ValueError) as err:
        print(f"export.reach: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
