"""The stand-in Triton server (streamer.measure.tritonserver) for tests: skipped where no PyTriton
interpreter is installed, except under CI, which installs one (.ci/run) and fails instead."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamer.errors import ConfigError
from streamer.measure.tritonserver import TOKEN_ENV, TritonServer, triton_python

__all__ = ["TOKEN", "TOKEN_ENV", "TritonServer", "server_for", "serving"]

TOKEN = "streamer-tests-token"
"""The shared-memory protocol's access token; tests give it through model.triton.access_token_env."""


def server_for(repo: Path) -> TritonServer:
    try:
        triton_python()
    except ConfigError as err:
        if os.environ.get("CI"):
            pytest.fail(str(err))
        pytest.skip(str(err))
    return TritonServer(repo, TOKEN)


@contextlib.contextmanager
def serving(repo: Path) -> Iterator[TritonServer]:
    server = server_for(repo)
    server.start()
    try:
        yield server
    finally:
        server.stop()
