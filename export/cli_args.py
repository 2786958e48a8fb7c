"""What ``streamer train`` and ``streamer export`` share on the command line: the architectures one may
name, the flags that choose a model's constructor arguments, and the check that the export extra is
installed.

Nothing here imports torch: the runtime CLI loads these modules to list the subcommands.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Sequence
from typing import Any

from streamer.errors import ConfigError

__all__ = ["ARCH_NAMES", "add_model_flags", "model_kwargs", "parse_model_args", "require_export_extra"]

ARCH_NAMES = ("temporal_filter", "conv3d", "convgru", "convlstm", "streaming")
"""The registry's names, repeated here so listing them needs no torch; a test keeps the two equal."""

_EXPORT_EXTRA = {"torch": "torch", "cv2": "opencv-python-headless", "skimage": "scikit-image"}
"""What ``pip install -e '.[export]'`` adds, import name to distribution: train and export need each."""


def require_export_extra(command: str) -> None:
    """Raises ConfigError naming the install where the export extra is absent, before any work starts."""
    missing = [dist for module, dist in _EXPORT_EXTRA.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(
            f"streamer {command} needs {', '.join(missing)}, which the runtime install leaves out; "
            "install the export extra: pip install -e '.[export]'"
        )


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


def model_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The architecture's constructor arguments: ``--model-arg`` pairs, then ``--t`` and ``--position``."""
    kwargs = parse_model_args(args.model_arg)
    if args.t is not None:
        kwargs["t"] = args.t
    if args.position is not None:
        kwargs["position"] = args.position
    return kwargs


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """``--t``, ``--position`` and the repeatable ``--model-arg KEY=VALUE``."""
    parser.add_argument("--t", type=int, help="window length T (window models)")
    parser.add_argument("--position", choices=("center", "last"), help="output slot (window models)")
    parser.add_argument(
        "--model-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="constructor argument of the architecture, repeatable (e.g. channels=64 blocks=3)",
    )
