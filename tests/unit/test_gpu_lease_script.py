"""benchmarks/gpu_lease.sh runs on a lent GPU machine only: its bench command lines are parsed here, so
a renamed flag fails in CI rather than in a lease's few minutes."""

from __future__ import annotations

import argparse
import shlex
import subprocess
from pathlib import Path

from streamer.bench import register

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_lease.sh"


def _bench_lines() -> list[list[str]]:
    joined = SCRIPT.read_text().replace("\\\n", " ")
    lines = []
    for line in joined.splitlines():
        words = shlex.split(line.strip(), comments=True)
        if "streamer.bench" in words:
            lines.append(words[words.index("streamer.bench") + 1 :])
    return lines


def test_the_script_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0


def test_every_bench_it_runs_parses_with_todays_flags() -> None:
    lines = _bench_lines()
    assert [words[0] for words in lines] == ["streams", "streams", "gpu", "gpu", "gpu", "codecs"]
    parser = argparse.ArgumentParser(prog="python -m streamer.bench")
    register(parser.add_subparsers(dest="command", required=True))
    for words in lines:
        args = parser.parse_args(["bench", *(w.replace("$OUT", "/tmp/out") for w in words)])
        assert args.json.startswith("/tmp/out/")
