"""A real Triton Inference Server for tests: PyTriton's bundled tritonserver, in its own interpreter.

deploy/triton/pytriton_serve.py serves a repository ``streamer export --triton-repo`` wrote; it needs an
interpreter with nvidia-pytriton (Debian's python3.11: deploy/triton/README.md), found at
``.triton-venv/bin/python`` or ``$STREAMER_TRITON_PYTHON``. Without one the tests skip, except under CI,
which installs it (.ci/run) and fails them instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.rtsp_fixtures import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "triton" / "pytriton_serve.py"
TOKEN = "streamer-tests-token"
"""The shared-memory protocol's access token; tests give it through model.triton.access_token_env."""
TOKEN_ENV = "STREAMER_TRITON_TOKEN"


def triton_python() -> Path:
    """The interpreter with PyTriton, or a skip (a failure under CI) naming how to make one."""
    python = Path(os.environ.get("STREAMER_TRITON_PYTHON", ROOT / ".triton-venv" / "bin" / "python"))
    if not python.is_file():
        message = (
            f"no PyTriton interpreter at {python}: /usr/bin/python3.11 -m venv .triton-venv && "
            ".triton-venv/bin/pip install -r deploy/triton/requirements.txt (deploy/triton/README.md)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


class TritonServer:
    """One server on fixed loopback ports; ``stop`` then ``start`` is a restart at the same address."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.python = triton_python()
        self.grpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self._process: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 240.0) -> None:
        command = [
            str(self.python),
            str(SCRIPT),
            "--repo",
            str(self.repo),
            "--grpc-port",
            str(self.grpc_port),
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
        ]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, TOKEN_ENV: TOKEN},
            start_new_session=True,  # its tritonserver and model processes are stopped as one group
        )
        self._process = process
        ready = threading.Event()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.log.append(line.rstrip())
                if line.strip() == "ready":
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.2):
            if process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the Triton server did not start:\n" + "\n".join(self.log[-40:]))

    def stop(self) -> None:
        """SIGTERM to the server's process group; SIGKILL after 30 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        # The group's model processes may outlive the parent by a moment; wait for them too.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)


@contextlib.contextmanager
def serving(repo: Path) -> Iterator[TritonServer]:
    server = TritonServer(repo)
    server.start()
    try:
        yield server
    finally:
        server.stop()
