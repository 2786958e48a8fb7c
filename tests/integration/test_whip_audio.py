"""WHIP ingest keeps the publisher's sound: a real aiortc publisher sends video that flashes and audio
that beeps at the same moments (both paced by one clock, as a camera captures them); the pipeline writes
a file whose beeps and flashes are compared. The sound is placed on the video's clock by the publisher's
RTCP sender reports, so it starts once both streams have reported (aiortc: within 1.5 s)."""

from __future__ import annotations

import asyncio
import fractions
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from aiortc import MediaStreamTrack, RTCPeerConnection

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.core.windower import Windower
from streamer.engine.pipeline import Pipeline
from streamer.sinks import FileSink
from streamer.webrtc import WhipSource
from streamer.webrtc.ice import rtc_configuration
from tests.integration.test_audio import pictures_and_sound
from tests.integration.test_webrtc import negotiate, serving

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FPS = 30
RATE = 48_000
SIZE = (160, 120)
FLASHES = (2.5, 4.5)
"""Seconds after the publisher starts: after aiortc's first sender reports (0.5 to 1.5 s)."""
LENGTH = 5.5
BEEP_S = 0.1


class Capture:
    """The publisher's one clock: each track's frames are due at ``start`` plus their own time."""

    def __init__(self) -> None:
        self.start: float | None = None

    async def at(self, seconds: float) -> None:
        if self.start is None:
            self.start = time.time()
        await asyncio.sleep(max(0.0, self.start + seconds - time.time()))


class FlashingCamera(MediaStreamTrack):
    kind = "video"

    def __init__(self, clock: Capture) -> None:
        super().__init__()
        self._clock = clock
        self._index = 0
        self._flashes = {round(t * FPS) for t in FLASHES}

    async def recv(self) -> av.VideoFrame:
        await self._clock.at(self._index / FPS)
        level = 255 if self._index in self._flashes else 20
        frame = av.VideoFrame.from_ndarray(np.full((SIZE[1], SIZE[0], 3), level, np.uint8), format="rgb24")
        frame.pts, frame.time_base = self._index * 3000, fractions.Fraction(1, 90_000)
        self._index += 1
        return frame


class BeepingMicrophone(MediaStreamTrack):
    kind = "audio"

    def __init__(self, clock: Capture) -> None:
        super().__init__()
        self._clock = clock
        self._sample = 0

    async def recv(self) -> av.AudioFrame:
        await self._clock.at(self._sample / RATE)
        t = (self._sample + np.arange(960)) / RATE
        wave = np.zeros(960)
        for start in FLASHES:
            on = (t >= start) & (t < start + BEEP_S)
            wave[on] = 0.5 * np.sin(2 * np.pi * 1000 * (t[on] - start))
        pcm = (wave * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(np.repeat(pcm, 2)[None], format="s16", layout="stereo")
        frame.sample_rate, frame.pts, frame.time_base = RATE, self._sample, fractions.Fraction(1, RATE)
        self._sample += 960
        return frame


def flashes_and_beeps(path: Path) -> tuple[list[float], list[float]]:
    """Times of the frames brighter than midway, and of the first loud sample of each beep, in the file."""
    frames, at, level = pictures_and_sound(path)
    loud = at[level > 0.25]
    onsets = [float(t) for k, t in enumerate(loud) if k == 0 or t - loud[k - 1] > 0.5]
    flashes = [t for t, luma in frames if luma > 128]
    return flashes, onsets


def test_the_publishers_sound_is_kept_in_sync(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    out = tmp_path / "out.mkv"

    async def scenario() -> int:
        async with serving() as (server, http):
            source = WhipSource(server, "cam", keep_audio=True, end_on_unpublish=True, relay_original=False)
            pipeline = Pipeline(source, FileSink(out), OnnxBackend(TEMPORAL_FILTER, threads=1), Windower(5))
            running = asyncio.create_task(pipeline.run())
            clock = Capture()
            publisher = RTCPeerConnection(rtc_configuration())
            publisher.addTransceiver(FlashingCamera(clock), direction="sendonly")
            publisher.addTransceiver(BeepingMicrophone(clock), direction="sendonly")
            location = await negotiate(http, f"{server.url}/whip/cam", publisher)
            assert location.startswith("/whip/cam/")
            assert "a=recvonly" in publisher.remoteDescription.sdp.split("m=audio", 1)[1]
            await asyncio.sleep(LENGTH + 0.5)
            await publisher.close()
            report = await asyncio.wait_for(running, 30)
            return report.frames_out

    frames_out = asyncio.run(scenario())

    assert frames_out > 0
    flashes, beeps = flashes_and_beeps(out)
    assert len(flashes) == len(FLASHES), flashes
    assert len(beeps) == len(FLASHES), beeps
    offsets = [round((b - f) * 1000, 1) for f, b in zip(flashes, beeps, strict=True)]
    record_property("beep_minus_flash_ms", offsets)
    assert all(abs(o) <= 1000 / FPS * 2 for o in offsets), offsets


def test_a_source_that_keeps_no_sound_answers_the_publishers_audio_inactive() -> None:
    async def scenario() -> str:
        async with serving() as (server, http):
            source = WhipSource(server, "cam", relay_original=False)  # keep_audio off: video only
            clock = Capture()
            publisher = RTCPeerConnection(rtc_configuration())
            publisher.addTransceiver(FlashingCamera(clock), direction="sendonly")
            publisher.addTransceiver(BeepingMicrophone(clock), direction="sendonly")
            try:
                await negotiate(http, f"{server.url}/whip/cam", publisher)
                await source.open()
                return str(publisher.remoteDescription.sdp)
            finally:
                await publisher.close()
                await source.aclose()

    answer = asyncio.run(scenario())

    assert "a=inactive" in answer.split("m=audio", 1)[1].split("\nm=", 1)[0]
    assert "a=recvonly" in answer.split("m=video", 1)[1].split("\nm=", 1)[0]
