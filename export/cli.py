"""The ``streamer train`` and ``streamer export`` subcommands; ``register`` adds them to a CLI's subparsers.

Each command is a module of its own (``export.cli_train``, ``export.cli_export``), the flags they share
are in ``export.cli_args``. torch is imported inside the handlers only: the runtime CLI (``streamer
run``) loads these modules to list the subcommands and must stay free of torch. The runtime install
leaves the export extra out, so each handler first checks for it and says in one line what to install.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from export.cli_export import add_export
from export.cli_train import add_train
from streamer.errors import StreamerError

__all__ = ["main", "register"]


def register(subparsers: Any) -> None:
    """Adds ``train`` and ``export`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    add_train(subparsers)
    add_export(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``train`` or ``export`` on their own; a StreamerError is one line on stderr and exit code 2."""
    parser = argparse.ArgumentParser(prog="streamer", description="Train and export temporal models.")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except StreamerError as err:
        print(f"streamer {args.command}: error: {err}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
