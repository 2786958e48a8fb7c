"""The pure core must stay free of IO libraries: a fresh interpreter imports it and checks."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("asyncio", "av", "aiortc", "aiohttp", "onnxruntime", "socket", "torch", "threading")


def test_core_imports_no_io_library() -> None:
    code = (
        "import sys, streamer.core; "
        f"bad = [m for m in {FORBIDDEN!r} if m in sys.modules]; "
        "print(','.join(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
