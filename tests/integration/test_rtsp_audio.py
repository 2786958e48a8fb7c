"""Sound through RTSP: a file's or a camera's audio out of the RTSP sink, and a camera's into any sink.

The clip is the one of ``test_audio``: flashes and beeps that start together. What the RTSP sink
publishes is read back by FFmpeg's own RTSP server in listen mode (``rtsp_recorder.py``, a process of
its own, not the project's client), which copies both tracks it receives into a file; the camera is
GStreamer's RTSP server playing the clip at its pace (``rtsp_camera.py``). The A/V offset and the
audio packets are measured in the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import av
import pytest

from streamer.app import build_pipeline
from streamer.assets import TEMPORAL_FILTER
from streamer.config import Config, load_config
from streamer.engine.pipeline import PipelineReport
from streamer.measure import rtsp_relay
from tests.integration.rtsp_fixtures import free_port
from tests.integration.test_audio import FPS, Clip, audio_of, make_clip, offsets

RECORDER = Path(__file__).with_name("rtsp_recorder.py")
CAMERA = Path(__file__).with_name("rtsp_camera.py")


@contextlib.contextmanager
def camera(clip: Clip, payload: str = "aac") -> Iterator[str]:
    """GStreamer's RTSP server playing ``clip`` as a camera; yields its URL."""
    missing = rtsp_relay.unavailable()
    if missing is not None:
        pytest.skip(f"{missing}; install it with: {rtsp_relay.INSTALL_HINT}")
    port = free_port()
    server = subprocess.Popen(
        [rtsp_relay.SYSTEM_PYTHON, str(CAMERA), str(port), str(clip.path), payload],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready", server.stderr.read() if server.stderr else ""
        yield f"rtsp://127.0.0.1:{port}/cam"
    finally:
        server.kill()
        server.wait()


def listening(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port``, read from the kernel's table: connecting to ask
    would be taken by FFmpeg as its one publisher."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A" and int(local.split(":")[1], 16) == port:  # 0A: LISTEN
            return True
    return False


async def wait_listening(port: int, timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not listening(port):
        assert loop.time() < deadline, f"the recorder did not listen on port {port} in {timeout_s} s"
        await asyncio.sleep(0.05)


async def run(config: Config, port: int) -> PipelineReport:
    await wait_listening(port)
    return await build_pipeline(config).run()


def publish(
    clip: Clip, recording: Path, source: dict[str, object] | None = None, **overrides: object
) -> tuple[PipelineReport, str]:
    """Run ``clip`` (or ``source``) through the pipeline into an RTSP sink; what the recorder saw, and
    its first line."""
    port = free_port()
    url = f"rtsp://127.0.0.1:{port}/live"
    recorder = subprocess.Popen(
        [sys.executable, str(RECORDER), url, str(recording), "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        config = load_config(
            None,
            {
                "source": source or {"kind": "file", "path": str(clip.path)},
                "sink": {"kind": "rtsp", "url": url, "reconnect": False},
                "model.path": str(TEMPORAL_FILTER),
                **overrides,
            },
        )
        report = asyncio.run(run(config, port))
        out, err = recorder.communicate(timeout=60)
    finally:
        recorder.kill()
        recorder.wait()
    assert recorder.returncode == 0, err[-2000:]
    return report, out.splitlines()[0]


@pytest.mark.parametrize("realtime", [False, True], ids=["as-fast-as-processed", "paced"])
def test_the_rtsp_sink_publishes_the_files_aac_in_sync_packet_for_packet(
    tmp_path: Path, realtime: bool
) -> None:
    clip = make_clip(tmp_path / "camera.mp4")
    recording = tmp_path / "received.mkv"
    report, tracks = publish(clip, recording, **{"source.realtime": realtime})
    assert tracks == "tracks video:h264 audio:aac"
    assert report.frames_out == 120
    sent, received = audio_of(clip.path), audio_of(recording)
    assert (received.codec, received.rate, received.channels) == ("aac", 48000, 1)
    # The packets arrive as they left the file, none missing between the first and the last.
    got, gave = [data for _, data in received.packets], [data for _, data in sent.packets]
    assert len(got) >= len(gave) - 2
    assert any(gave[i : i + len(got)] == got for i in range(len(gave) - len(got) + 1))
    measured = offsets(recording, clip.flashes)
    assert all(abs(offset) < 1 / FPS for offset in measured), measured


def test_g711_goes_out_as_it_is(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "camera.mov", codec="pcm_mulaw", rate=8000)
    recording = tmp_path / "received.mov"  # Matroska holds no G.711
    _, tracks = publish(clip, recording)
    assert tracks == "tracks video:h264 audio:pcm_mulaw"
    sent, received = audio_of(clip.path), audio_of(recording)
    assert b"".join(data for _, data in received.packets) in b"".join(data for _, data in sent.packets)
    measured = offsets(recording, clip.flashes)
    assert all(abs(offset) < 1 / FPS for offset in measured), measured


def test_audio_drop_publishes_video_only(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "camera.mp4")
    _, tracks = publish(clip, tmp_path / "received.mkv", **{"sink.audio": "drop"})
    assert tracks == "tracks video:h264"


@pytest.mark.parametrize("codec", ["mp3"])
def test_a_codec_rtp_does_not_carry_as_it_is_goes_out_as_aac(tmp_path: Path, codec: str) -> None:
    clip = make_clip(tmp_path / "camera.mkv", codec=codec, rate=44100)
    recording = tmp_path / "received.mkv"
    _, tracks = publish(clip, recording)
    assert tracks == "tracks video:h264 audio:aac"
    with av.open(str(recording)) as container:
        assert container.streams.audio[0].sample_rate == 44100
    measured = offsets(recording, clip.flashes)
    assert all(abs(offset) < 1 / FPS for offset in measured), measured


def camera_source(url: str) -> dict[str, object]:
    """The camera, read to its end: the server ending the stream ends the run."""
    return {"kind": "rtsp", "url": url, "reconnect": False}


def test_a_cameras_aac_goes_into_a_file_in_sync(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "camera.mp4")
    out = tmp_path / "out.mkv"
    with camera(clip) as url:
        config = load_config(
            None,
            {
                "source": camera_source(url),
                "sink": {"kind": "file", "path": str(out)},
                "model.path": str(TEMPORAL_FILTER),
            },
        )
        report = asyncio.run(build_pipeline(config).run())
    assert report.frames_out >= 110  # the server's first frames may precede the client's PLAY
    written = audio_of(out)
    assert (written.codec, written.rate, written.channels) == ("aac", 48000, 1)
    got, gave = [data for _, data in written.packets], [data for _, data in audio_of(clip.path).packets]
    assert any(gave[i : i + len(got)] == got for i in range(len(gave) - len(got) + 1))
    measured = offsets(out, clip.flashes)
    assert all(abs(offset) < 1 / FPS for offset in measured), measured


@pytest.mark.parametrize(
    ("container", "payload", "codec"), [("mp4", "aac", "aac"), ("mov", "mulaw", "pcm_mulaw")]
)
def test_a_camera_through_the_sidecar_keeps_its_sound_in_sync(
    tmp_path: Path, container: str, payload: str, codec: str
) -> None:
    clip = make_clip(tmp_path / f"camera.{container}", codec=codec, rate=48000 if codec == "aac" else 8000)
    recording = tmp_path / f"received.{container}"
    with camera(clip, payload) as url:
        _, tracks = publish(clip, recording, source=camera_source(url))
    assert tracks == f"tracks video:h264 audio:{codec}"
    measured = offsets(recording, clip.flashes)
    assert all(abs(offset) < 1 / FPS for offset in measured), measured
