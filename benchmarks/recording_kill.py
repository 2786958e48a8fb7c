"""A recording killed with SIGKILL: how much of it plays (issue 44's target: >= 58 s of 60).

Runs ``streamer run`` on a live synthetic 640x360@25 stream (``model.path: auto``) into an mp4 with the
operations endpoint on loopback, kills it with SIGKILL once ``/streams`` counts ``--seconds`` of frames
written, and counts the frames PyAV decodes and GStreamer's mp4 demuxer reads from what is left.

    .venv/bin/python benchmarks/recording_kill.py [--seconds 60] [--out /tmp/recording.mp4]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import av

FPS = 25


def frames_out(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/streams", timeout=10) as answer:
        (stream,) = json.loads(answer.read())["streams"]
    return int(stream["counters"]["out"])


def gstreamer_frames(path: Path) -> int:
    command = (
        f"gst-launch-1.0 -v filesrc location={path} ! qtdemux ! h264parse ! fakesink sync=false silent=false"
    )
    result = subprocess.run(command.split(), capture_output=True, text=True, timeout=300, check=True)
    return len(re.findall(r"last-message = chain", result.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="recorded before the kill (60)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/recording.mp4"), help="the recording")
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args.out.unlink(missing_ok=True)
    settings = {
        "source.kind": "synthetic",
        "source.realtime": "true",
        "source.frames": "null",
        "source.fps": str(FPS),
        "http.port": str(port),
        "model.path": "auto",
    }
    command = [sys.executable, "-m", "streamer", "run", "--output", str(args.out), "--no-progress"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    written = 0
    try:
        while written < args.seconds * FPS:
            time.sleep(0.5)
            try:
                written = frames_out(port)
            except (OSError, ValueError):
                written = 0
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    with av.open(str(args.out)) as container:
        decoded = sum(1 for _ in container.decode(video=0))
    size, gstreamer = args.out.stat().st_size, gstreamer_frames(args.out)
    print(
        f"killed with {written} frames written ({written / FPS:.2f} s); the file: PyAV {decoded} frames "
        f"({decoded / FPS:.2f} s), GStreamer {gstreamer} frames, {size} bytes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
