"""Every command's --help renders: argparse expands '%' in help strings, so a bare one is a traceback."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from streamer.cli import _parser


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_every_command_and_subcommand_formats_its_help() -> None:
    parsers = list(_parsers(_parser()))
    progs = {p.prog for p in parsers}
    assert {"streamer bench", "streamer bench live", "streamer bench machine"} <= progs
    for parser in parsers:
        assert parser.format_help().startswith("usage: "), parser.prog
