"""``streamer bench NAME ...`` as the CLI parses it, for the benchmark tests."""

from __future__ import annotations

import argparse

from streamer.bench import register


def run_bench(name: str, argv: list[str]) -> int:
    """Runs ``streamer bench NAME *argv`` in this process; its exit code."""
    parser = argparse.ArgumentParser(prog="streamer")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", name, *argv])
    result: int = args.func(args)
    return result
