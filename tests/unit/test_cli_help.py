"""Every command's --help renders: argparse expands '%' in help strings, so a bare one is a traceback."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

from streamer.cli.main import _parser


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_every_command_and_subcommand_formats_its_help() -> None:
    # The export package's commands are built in full only when one of them is the command.
    parsers = [*_parsers(_parser(["run"])), *_parsers(_parser(["train"])), *_parsers(_parser(["export"]))]
    progs = {p.prog for p in parsers}
    assert {"streamer bench", "streamer bench live", "streamer bench machine", "streamer train"} <= progs
    for parser in parsers:
        assert parser.format_help().startswith("usage: "), parser.prog


def test_the_runtime_commands_start_without_the_export_package() -> None:
    code = (
        "import sys; from streamer.cli.main import _parser; _parser(['run']).parse_args(['run']); "
        "print('export.cli' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
    train = _parser(["train"]).parse_args(["train", "--out", "runs/x"])
    assert train.command == "train"
