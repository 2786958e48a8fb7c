"""The ``streamer train`` and ``streamer export`` subcommands; ``register`` adds them to a CLI's subparsers.

torch is imported inside the handlers only: the runtime CLI (``streamer run``) loads this module to
list the subcommands and must stay free of torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streamer.errors import ConfigError, StreamerError

__all__ = ["main", "parse_model_args", "register"]

_ARCHS = ("temporal_filter", "conv3d", "convgru")
"""The registry's names, repeated here so listing them needs no torch; a test keeps the two equal."""


def parse_model_args(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, VALUE read as JSON when it parses (numbers, true, null) else as a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--model-arg takes KEY=VALUE (e.g. channels=64), got {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _model_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = parse_model_args(args.model_arg)
    if args.t is not None:
        kwargs["t"] = args.t
    if args.position is not None:
        kwargs["position"] = args.position
    return kwargs


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--t", type=int, help="window length T (window models)")
    parser.add_argument("--position", choices=("center", "last"), help="output slot (window models)")
    parser.add_argument(
        "--model-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="constructor argument of the architecture, repeatable (e.g. channels=64 blocks=3)",
    )


def _add_train(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "train",
        help="train a model on the bundled clips and photographs",
        description="Train a registry architecture; checkpoints go to OUT/checkpoint.pt.",
    )
    p.add_argument("--arch", choices=_ARCHS, default="conv3d", help="architecture (default: conv3d)")
    _add_model_flags(p)
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps in the schedule (default: 2000)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (default: 16)")
    p.add_argument("--crop", type=int, default=96, help="crop size in pixels (default: 96)")
    p.add_argument(
        "--lr", type=float, default=1e-3, help="peak learning rate, cosine-annealed (default: 1e-3)"
    )
    p.add_argument("--loss", choices=("charbonnier", "l1"), default="charbonnier")
    p.add_argument("--seq-len", type=int, default=8, help="unrolled frames for recurrent models (default: 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--checkpoint-every", type=int, default=500, help="steps between checkpoints (default: 500)"
    )
    p.add_argument("--clip-frames", type=int, help="decode only this many frames per clip (quick runs)")
    p.add_argument("--out", type=Path, required=True, help="run folder; holds checkpoint.pt")
    p.add_argument("--resume", action="store_true", help="continue OUT/checkpoint.pt with its stored config")
    p.add_argument("--stop-after", type=int, help="stop at this step (the schedule still spans --steps)")
    p.add_argument("--threads", type=int, help="torch intra-op threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from export.train import TrainConfig, train  # noqa: PLC0415  # torch stays out of the runtime CLI

    config = TrainConfig(
        arch=args.arch,
        model=_model_kwargs(args),
        steps=args.steps,
        batch=args.batch,
        crop=args.crop,
        lr=args.lr,
        loss=args.loss,
        seed=args.seed,
        seq_len=args.seq_len,
        checkpoint_every=args.checkpoint_every,
        clip_frames=args.clip_frames,
    )
    result = train(
        config,
        args.out,
        resume=args.resume,
        stop_after=args.stop_after,
        threads=args.threads,
        progress=not args.no_progress,
    )
    print(
        f"trained to step {result.step} in {result.seconds:.0f} s; checkpoint {result.checkpoint}; "
        f"validation {json.dumps(result.validation)}"
    )
    return 0


def register(subparsers: Any) -> None:
    """Adds ``train`` and ``export`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    _add_train(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``train`` or ``export`` on their own; a StreamerError is one line on stderr and exit code 2."""
    parser = argparse.ArgumentParser(prog="streamer", description="Train and export temporal models.")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except StreamerError as err:
        print(f"streamer {args.command}: error: {err}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
