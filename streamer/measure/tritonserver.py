"""A stand-in Triton Inference Server on loopback, for tests and ``streamer bench triton``.

deploy/triton/pytriton_serve.py serves a repository ``streamer export --triton-repo`` wrote with the
``tritonserver`` binary nvidia-pytriton bundles; it runs under an interpreter of its own (Debian's
python3.11 with deploy/triton/requirements.txt: deploy/triton/README.md), found at
``.triton-venv/bin/python`` in the checkout or ``$STREAMER_TRITON_PYTHON``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from streamer.errors import ConfigError

__all__ = ["SCRIPT", "TOKEN_ENV", "TritonServer", "triton_python"]

_CHECKOUT = Path(__file__).resolve().parents[2]
SCRIPT = _CHECKOUT / "deploy" / "triton" / "pytriton_serve.py"
READY = "streamer-triton-ready"
"""What the server script prints once every model is loaded."""
TOKEN_ENV = "STREAMER_TRITON_TOKEN"
"""Where the server script reads the access token of Triton's restricted protocols (shared memory)."""


def triton_python() -> Path:
    """The interpreter with PyTriton; ConfigError naming how to make one where there is none."""
    python = Path(os.environ.get("STREAMER_TRITON_PYTHON", _CHECKOUT / ".triton-venv" / "bin" / "python"))
    if not python.is_file() or not SCRIPT.is_file():
        raise ConfigError(
            f"no PyTriton interpreter at {python} (or no {SCRIPT}: run from a checkout): "
            "/usr/bin/python3.11 -m venv .triton-venv && .triton-venv/bin/pip install -r "
            "deploy/triton/requirements.txt, or set STREAMER_TRITON_PYTHON (deploy/triton/README.md)"
        )
    return python


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TritonServer:
    """One server on fixed loopback ports; ``stop`` then ``start`` is a restart at the same address."""

    def __init__(self, repo: Path, token: str, threads: int = 1) -> None:
        self.repo = repo
        self.token = token
        self.threads = threads
        self.python = triton_python()
        self.grpc_port, self.http_port, self.metrics_port = _free_port(), _free_port(), _free_port()
        self._process: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 240.0) -> float:
        """Starts it and waits until every model is loaded; returns the seconds that took."""
        started = time.monotonic()
        command = [str(self.python), str(SCRIPT), "--repo", str(self.repo), "--threads", str(self.threads)]
        command += ["--grpc-port", str(self.grpc_port), "--http-port", str(self.http_port)]
        command += ["--metrics-port", str(self.metrics_port)]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, TOKEN_ENV: self.token},
            start_new_session=True,  # its tritonserver and model processes stop as one group
        )
        self._process = process
        ready = threading.Event()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.log.append(line.rstrip())
                del self.log[:-200]
                if READY in line:  # the server's own log lines may be written around it
                    ready.set()

        threading.Thread(target=read, daemon=True, name="tritonserver-log").start()
        while not ready.wait(0.1):
            if process.poll() is not None or time.monotonic() - started > timeout:
                self.stop()
                raise RuntimeError("the Triton server did not start:\n" + "\n".join(self.log[-40:]))
        return time.monotonic() - started

    def stop(self) -> None:
        """SIGTERM to the server's process group (SIGKILL after 30 s), then waits for all of it."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
