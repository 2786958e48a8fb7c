"""``python -m streamer.bench NAME ...``: the benchmarks without the ``streamer`` CLI, whose imports need
the service's dependencies; ``bench gpu`` needs only numpy and onnxruntime, so a GPU machine without
PyAV runs it this way."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from streamer.bench import register
from streamer.errors import StreamerError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streamer.bench")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args))
    except StreamerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
