"""WHEP players hear the source's audio: a file's AAC goes out as Opus beside its video, in sync, to a
real aiortc player; a stream without audio (or with ``audio: drop``) answers the player's audio m-line
inactive. The clip flashes and beeps at the same moments (test_audio.make_clip)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import av
import numpy as np
import pytest
from aiortc import MediaStreamTrack, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.core.windower import Windower
from streamer.engine.pipeline import Pipeline, PipelineReport
from streamer.sources import FileSource
from streamer.webrtc import WebRtcServer, WhepSink
from streamer.webrtc.ice import rtc_configuration
from tests.integration.rtsp_fixtures import until
from tests.integration.test_audio import make_clip
from tests.integration.test_webrtc import negotiate, serving

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SECONDS = 6.0
"""The clip's length: its second flash and beep, 0.5 s before the end, come well after the player joined."""


class Player:
    """A WHEP player offering video and audio; keeps each frame's arrival and what it shows or sounds."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(rtc_configuration())
        self.pc.addTransceiver("video", direction="recvonly")
        self.pc.addTransceiver("audio", direction="recvonly")
        self.pictures: list[tuple[float, float]] = []
        """(monotonic arrival, mean luma) of each video frame."""
        self.sounds: list[tuple[float, float, int, int]] = []
        """(monotonic arrival, peak of |sample| / 32768, sample rate, channels) of each audio frame."""
        self.readers: list[asyncio.Task[None]] = []
        self.pc.on("track", self._read)

    def _read(self, track: MediaStreamTrack) -> None:
        async def read() -> None:
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    return
                arrived = time.monotonic()
                if isinstance(frame, av.VideoFrame):
                    self.pictures.append((arrived, float(frame.to_ndarray(format="gray").mean())))
                elif isinstance(frame, av.AudioFrame):
                    peak = float(np.abs(frame.to_ndarray().astype(np.float64)).max()) / 32768
                    self.sounds.append((arrived, peak, frame.sample_rate, len(frame.layout.channels)))

        self.readers.append(asyncio.create_task(read()))


async def watch(clip: Path, keep_audio: bool) -> tuple[str, Player, PipelineReport, WhepSink]:
    """Plays ``clip`` paced as a camera into a WHEP sink and one player who joins once it is open."""
    async with serving() as (server, http):
        sink = WhepSink(server, "cam", keep_audio=keep_audio)
        source = FileSource(clip, "cam", keep_audio=True, realtime=True)
        pipeline = Pipeline(source, sink, OnnxBackend(TEMPORAL_FILTER, threads=1), Windower(5))
        running = asyncio.create_task(pipeline.run())
        await until(lambda: sink.frames_written > 0 or running.done(), 30, "the sink's first frame")
        player = Player()
        answer = await play(http, server, player)
        report = await asyncio.wait_for(running, 60)
        await asyncio.wait_for(asyncio.gather(*player.readers), 30)
        await player.pc.close()
        return answer, player, report, sink


async def play(http: aiohttp.ClientSession, server: WebRtcServer, player: Player) -> str:
    """Joins ``player`` to the stream; the server's answer."""
    location = await negotiate(http, f"{server.url}/whep/cam", player.pc)
    assert location.startswith("/whep/cam/")
    answer: str = player.pc.remoteDescription.sdp
    return answer


def audio_section(sdp: str) -> str:
    return "m=audio" + sdp.split("m=audio", 1)[1].split("\nm=", 1)[0]


def test_a_files_aac_reaches_whep_players_as_opus_in_sync(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    clip = make_clip(tmp_path / "camera.mp4", seconds=SECONDS)

    answer, player, report, _ = asyncio.run(watch(clip.path, keep_audio=True))

    assert "a=sendonly" in audio_section(answer)
    assert "opus/48000/2" in audio_section(answer).lower()
    assert report.frames_out == round(SECONDS * 30)
    assert {(rate, channels) for _, _, rate, channels in player.sounds} == {(48000, 2)}
    heard = sum(1 for _, peak, _, _ in player.sounds if peak > 0.25)
    assert heard >= 3  # the last beep: 0.1 s is five 20 ms Opus frames
    last_flash = max(player.pictures, key=lambda p: p[1])[0]
    beeps = [at for at, peak, _, _ in player.sounds if peak > 0.25]
    onset = min(beeps, key=lambda at: abs(at - last_flash))
    offset = onset - last_flash
    record_property("beep_minus_flash_ms", round(offset * 1000, 1))
    # Sent together; the player's audio jitter buffer holds 4 packets (80 ms) before it plays any.
    assert abs(offset) < 0.3, f"the beep arrived {offset * 1000:.0f} ms after the flash"


@pytest.mark.parametrize("with_audio", [True, False], ids=["audio-drop", "no-audio"])
def test_without_audio_to_give_the_players_audio_is_inactive(tmp_path: Path, with_audio: bool) -> None:
    clip = make_clip(tmp_path / "camera.mp4", seconds=2.0, audio=with_audio)

    answer, player, report, sink = asyncio.run(watch(clip.path, keep_audio=not with_audio))

    assert "a=inactive" in audio_section(answer)
    assert player.sounds == []
    assert player.pictures
    assert not sink.hub.carries_audio
    assert report.frames_out == 60
