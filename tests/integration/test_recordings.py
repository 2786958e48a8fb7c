"""Recordings that survive the process and stay within the disk: a real ``streamer run`` killed with
SIGKILL mid-recording leaves an mp4 that PyAV and GStreamer play to within about two seconds of the
frames it had written; an output past its size or free-space limit stops in one line with a playable
file while the stream's other output goes on."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.errors import SinkError
from streamer.frame import Frame, StreamInfo
from streamer.sinks import FileSink
from tests.integration.rtsp_fixtures import free_port

FPS = 25


def _decoded(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def _boxes(path: Path) -> list[str]:
    """The top-level ISO BMFF boxes of ``path``, in order."""
    data, found, at = path.read_bytes(), [], 0
    while at + 8 <= len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        found.append(data[at + 4 : at + 8].decode("latin-1"))
        if size == 1:
            size = int.from_bytes(data[at + 8 : at + 16], "big")
        if size < 8:
            break
        at += size
    return found


def _gstreamer_frames(path: Path) -> int:
    """Video frames GStreamer's own mp4 demuxer reads from ``path`` (each a buffer into a fake sink)."""
    result = subprocess.run(
        [
            "gst-launch-1.0",
            "-v",
            "filesrc",
            f"location={path}",
            "!",
            "qtdemux",
            "!",
            "h264parse",
            "!",
            "fakesink",
            "sync=false",
            "silent=false",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return len(re.findall(r"last-message = chain", result.stdout))


def _frames_out(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/streams", timeout=10) as answer:
        (stream,) = json.loads(answer.read())["streams"]
    return int(stream["counters"]["out"])


@pytest.mark.skipif(shutil.which("gst-launch-1.0") is None, reason="needs GStreamer's gst-launch-1.0")
def test_a_recording_killed_mid_way_plays_to_within_two_seconds_in_pyav_and_gstreamer(tmp_path: Path) -> None:
    output, port = tmp_path / "recording.mp4", free_port()
    settings = {
        "source.kind": "synthetic",
        "source.realtime": "true",
        "source.frames": "null",
        "source.width": "320",
        "source.height": "240",
        "source.fps": str(FPS),
        "http.port": str(port),
    }
    command = [sys.executable, "-m", "streamer", "run", "--output", str(output), "--no-progress"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        written = 0
        while written < 6 * FPS:
            assert process.poll() is None, process.communicate()[1]
            time.sleep(0.2)
            try:
                written = _frames_out(port)
            except (OSError, ValueError):
                written = 0  # not serving yet
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    pyav, gstreamer = _decoded(output), _gstreamer_frames(output)
    assert pyav >= written - 2 * FPS, (pyav, written)
    assert gstreamer >= written - 2 * FPS, (gstreamer, written)


def test_an_output_past_its_size_stops_in_one_line_and_its_file_plays(tmp_path: Path) -> None:
    path = tmp_path / "capped.mp4"
    sink = FileSink(path, crf=0, max_bytes=200_000)
    with pytest.raises(SinkError, match=r"past the output's max_mb \(0.2 MB\); the recording stops"):
        asyncio.run(_raise_after(sink, 20 * FPS))
    assert path.stat().st_size < 200_000 + 2 * _one_second_bytes(tmp_path)
    assert _decoded(path) >= FPS


async def _raise_after(sink: FileSink, count: int) -> None:
    rng = np.random.default_rng(0)
    info = StreamInfo(width=128, height=96, fps=Fraction(FPS), time_base=Fraction(1, FPS))
    await sink.open(info)
    try:
        for index in range(count):
            pixels = rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)
            await sink.send(Frame(pixels, index, index, info.time_base, 0.0))
    finally:
        await sink.aclose()


def _one_second_bytes(tmp_path: Path) -> int:
    """What one second of the same noise costs at CRF 0, from a recording of it."""
    path = tmp_path / "second.mp4"
    asyncio.run(_raise_after(FileSink(path, crf=0), FPS))
    return path.stat().st_size


def test_an_output_stops_when_its_disk_would_fall_under_the_free_space_floor(tmp_path: Path) -> None:
    path = tmp_path / "floor.mp4"
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    sink = FileSink(path, min_free_bytes=free + 10**12)
    with pytest.raises(SinkError, match="under the output's min_free_mb"):
        asyncio.run(_raise_after(sink, 5 * FPS))
    assert _decoded(path) >= 1


def test_fragment_s_null_writes_one_index_at_the_end(tmp_path: Path) -> None:
    fragmented, plain = tmp_path / "fragmented.mp4", tmp_path / "plain.mp4"
    asyncio.run(_raise_after(FileSink(fragmented), 2 * FPS))
    asyncio.run(_raise_after(FileSink(plain, fragment_s=None), 2 * FPS))
    assert "moof" in _boxes(fragmented)
    assert "moof" not in _boxes(plain)
    assert _decoded(fragmented) == _decoded(plain) == 2 * FPS
