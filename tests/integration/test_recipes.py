"""The README's first recipe, end to end on loopback: a camera re-published enhanced through an RTSP
server, from deploy/compose/streamer.yaml as it ships, run as a real `streamer run` process.

GStreamer's RTSP server stands in for MediaMTX (the same RTSP paths); only the addresses change (all
loopback, free ports) and the model (the fast temporal filter, to keep CI short; the recipe's `auto`
probes the tiers on this CPU first). An independent PyAV reader plays the enhanced path; the operations
endpoint and the viewer answer under the stream's name; SIGTERM stops it cleanly.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from streamer.assets import TEMPORAL_FILTER
from streamer.measure import rtsp_relay
from tests.integration.rtsp_fixtures import Publisher, Reader, RtspServer, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "deploy" / "compose" / "streamer.yaml"


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


@pytest.fixture
def relay() -> Iterator[RtspServer]:
    """GStreamer's RTSP server serving the recipe's paths, /cam and /cam_enhanced (publishers add
    /publish, where MediaMTX takes them on the path itself)."""
    missing = rtsp_relay.unavailable()
    if missing is not None:
        pytest.skip(f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    server = RtspServer(free_port(), names=("cam", "cam_enhanced"))
    try:
        server.start()
        yield server
    finally:
        server.kill()


def test_a_camera_enhanced_and_republished_through_an_rtsp_server(relay: RtspServer, tmp_path: Path) -> None:
    rtsp_server = relay
    config = yaml.safe_load(RECIPE.read_text())
    config["source"]["url"] = rtsp_server.url("cam")
    config["sinks"][0]["url"] = rtsp_server.publish_url("cam_enhanced")
    web, ops = free_port(), free_port()
    config["webrtc"].update(
        host="127.0.0.1", port=web, ice_addresses=["127.0.0.1"], token="a-token-of-our-own"
    )
    config["http"].update(host="127.0.0.1", port=ops)
    config["model"]["path"] = str(TEMPORAL_FILTER)
    recipe = tmp_path / "streamer.yaml"
    recipe.write_text(yaml.safe_dump(config))
    camera = Publisher(rtsp_server.publish_url("cam"))
    reader = Reader(rtsp_server.url("cam_enhanced"))
    process = subprocess.Popen(
        [sys.executable, "-m", "streamer", "run", "--config", str(recipe)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        camera.start()
        rtsp_server.wait_for("publish cam", timeout=30)
        rtsp_server.wait_for("publish cam_enhanced", timeout=60)
        reader.start()
        for _ in range(900):  # up to 90 s
            if (
                sum(1 for code, _ in reader.snapshot() if code is not None) >= 30
                or process.poll() is not None
            ):
                break
            time.sleep(0.1)
        status, body = get(f"http://127.0.0.1:{ops}/streams/cam")
        viewer = get(f"http://127.0.0.1:{web}/view/cam")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        reader.stop()
        camera.stop()
    codes = [code for code, _ in reader.snapshot() if code is not None]
    assert len(codes) >= 30, err[-2000:]
    assert codes == sorted(codes)
    assert status == 200
    assert '"state": "live"' in body or '"state":"live"' in body
    assert viewer[0] == 200
    assert "<video" in viewer[1]
    assert process.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    assert out.startswith("stream cam\nframes ")
    said = [json.loads(line).get("message", "") for line in err.splitlines() if line.startswith("{")]
    assert f"stream cam: viewer http://127.0.0.1:{web}/view/cam" in said  # in the JSON log the recipe writes
