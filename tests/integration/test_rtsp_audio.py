"""A file's audio through the RTSP sink, read back by FFmpeg's own RTSP server (not the project's client).

The clip is the one of ``test_audio``: flashes and beeps that start together. The recorder
(``rtsp_recorder.py``, FFmpeg in listen mode, a process of its own) copies both tracks it receives
into a file, where the A/V offset and the audio packets are measured.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import av
import pytest

from streamer.app import build_pipeline
from streamer.assets import TEMPORAL_FILTER
from streamer.config import Config, load_config
from streamer.pipeline import PipelineReport
from tests.integration.rtsp_fixtures import free_port
from tests.integration.test_audio import FPS, Clip, audio_of, make_clip, offsets

RECORDER = Path(__file__).with_name("rtsp_recorder.py")


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


def publish(clip: Clip, recording: Path, **overrides: object) -> tuple[PipelineReport, str]:
    """Run ``clip`` through the pipeline into an RTSP sink; what the recorder saw, and its first line."""
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
                "source": {"kind": "file", "path": str(clip.path)},
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
