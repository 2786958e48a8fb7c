"""WHIP in, WHEP out, with real aiortc peers on loopback: publish, enhance, play back."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
import av
import numpy as np
import numpy.typing as npt
import pytest
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription, VideoStreamTrack
from aiortc.mediastreams import MediaStreamError

from streamer.app import build_pipeline
from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.config import load_config
from streamer.core.gate import MotionGate
from streamer.core.windower import Windower
from streamer.engine.pipeline import Outcome, Pipeline
from streamer.frame import Frame
from streamer.media import framecode
from streamer.media.sdp import video_section
from streamer.webrtc import ORIGINAL_SUFFIX, WebRtcServer, WhepSink, WhipSource
from streamer.webrtc.codecs import video_formats
from streamer.webrtc.ice import restrict_host_addresses, rtc_configuration
from tests.integration.rtsp_fixtures import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

WIDTH, HEIGHT = 320, 240
BAND = framecode.ROWS * framecode.CELL
"""The top rows, where the frame's number is drawn; brightness is measured below them."""
TOKEN = "test-token"
LOOPBACK = ["127.0.0.1"]


def level(pixels: npt.NDArray[np.uint8]) -> float:
    """Mean brightness below the frame code: what flicker moves and a temporal denoiser steadies."""
    return float(pixels[BAND:].mean())


class CountingCamera(VideoStreamTrack):
    """A 30 fps camera on a static scene whose exposure flickers from frame to frame.

    Flicker is the noise a temporal denoiser removes that survives WebRTC's codecs: VP8's own
    denoiser wipes out fine per-pixel noise, but keeps each frame's brightness. Each frame also
    carries its number, and the camera records when each was captured.
    """

    def __init__(self, first_code: int = 0, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        ramp = np.linspace(60, 190, WIDTH, dtype=np.float32)[None, :, None]
        self._scene = np.broadcast_to(ramp, (HEIGHT, WIDTH, 3))
        self._flicker = rng.uniform(-10, 10, 64).astype(np.float32)
        self.code = first_code
        self.captured: dict[int, float] = {}

    async def recv(self) -> av.VideoFrame:
        pts, time_base = await self.next_timestamp()
        scene = (self._scene + self._flicker[self.code % 64]).astype(np.uint8)
        frame = av.VideoFrame.from_ndarray(framecode.stamp(scene, self.code), format="rgb24")
        frame.pts, frame.time_base = pts, time_base
        self.captured[self.code] = time.monotonic()
        self.code += 1
        return frame


@dataclass
class Peer:
    pc: RTCPeerConnection
    location: str
    received: list[tuple[int | None, float, npt.NDArray[np.uint8]]] = field(default_factory=list)
    """(frame code, None if unreadable; monotonic arrival; pixels) of each decoded frame, for a player."""
    enough: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task[None] | None = None


async def negotiate(http: aiohttp.ClientSession, url: str, pc: RTCPeerConnection) -> str:
    """Offer (all candidates included, on loopback only), post it, apply the answer; returns Location."""
    with restrict_host_addresses(LOOPBACK):
        await pc.setLocalDescription(await pc.createOffer())
    headers = {"Content-Type": "application/sdp", "Authorization": f"Bearer {TOKEN}"}
    async with http.post(url, data=pc.localDescription.sdp, headers=headers) as response:
        assert response.status == 201, await response.text()
        answer, location = await response.text(), response.headers["Location"]
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    return location


async def publish(
    http: aiohttp.ClientSession, server: WebRtcServer, stream: str, track: MediaStreamTrack
) -> Peer:
    pc = RTCPeerConnection(rtc_configuration())
    pc.addTransceiver(track, direction="sendonly")
    return Peer(pc, await negotiate(http, f"{server.url}/whip/{stream}", pc))


async def play(http: aiohttp.ClientSession, server: WebRtcServer, name: str, wanted: int) -> Peer:
    pc = RTCPeerConnection(rtc_configuration())
    pc.addTransceiver("video", direction="recvonly")
    tracks: asyncio.Queue[MediaStreamTrack] = asyncio.Queue(maxsize=1)
    pc.on("track", tracks.put_nowait)
    peer = Peer(pc, await negotiate(http, f"{server.url}/whep/{name}", pc))
    track = await tracks.get()

    async def read() -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:  # the player left
                return
            arrived = time.monotonic()
            assert isinstance(frame, av.VideoFrame)
            pixels = np.asarray(await asyncio.to_thread(frame.to_ndarray, format="rgb24"), dtype=np.uint8)
            peer.received.append((framecode.read(pixels), arrived, pixels))
            if len(peer.received) >= wanted:
                peer.enough.set()

    peer.reader = asyncio.create_task(read())
    return peer


async def leave(http: aiohttp.ClientSession, server: WebRtcServer, peer: Peer) -> None:
    async with http.delete(server.url + peer.location, headers={"Authorization": f"Bearer {TOKEN}"}) as r:
        assert r.status == 200, await r.text()
    await peer.pc.close()
    if peer.reader is not None:
        await peer.reader


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[tuple[WebRtcServer, aiohttp.ClientSession]]:
    server = WebRtcServer(port=0, token=TOKEN, connect_timeout_s=10.0)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield server, http
    finally:
        await server.stop()


def test_published_video_comes_back_enhanced(record_property: Callable[[str, object], None]) -> None:
    """aiortc -> WHIP -> pipeline (shipped temporal denoiser) -> WHEP -> aiortc, both panes played."""

    async def scenario() -> None:
        async with serving() as (server, http):
            source = WhipSource(server, "cam", open_timeout_s=20.0)
            sink = WhepSink(server, "cam")
            seen: dict[int, tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]] = {}

            def keep(src: Frame, out: Frame, outcome: Outcome) -> None:
                code = framecode.read(src.pixels)
                if code is not None:
                    seen[code] = (src.pixels, out.pixels)

            pipeline = Pipeline(
                source,
                sink,
                OnnxBackend(TEMPORAL_FILTER, threads=1),
                Windower(5),
                MotionGate(enabled=False),
                queue_size=4,
                on_output=keep,
            )
            running = asyncio.create_task(pipeline.run())
            enhanced = await play(http, server, "cam", wanted=45)
            original = await play(http, server, "cam" + ORIGINAL_SUFFIX, wanted=20)
            camera = CountingCamera()
            publisher = await publish(http, server, "cam", camera)
            await asyncio.wait_for(asyncio.gather(enhanced.enough.wait(), original.enough.wait()), 60)
            for peer in (publisher, enhanced, original):
                await leave(http, server, peer)
            source.interrupt()
            report = await asyncio.wait_for(running, 20)

        assert source.info.width == WIDTH
        assert source.info.height == HEIGHT
        assert source.info.live
        assert report.frames_in >= 45
        assert report.model_calls > 0
        assert sink.frames_written == report.frames_out
        assert report.outcomes["enhanced"] == report.frames_out  # gate off, no budget: all through the model
        shapes = {pixels.shape for _, _, pixels in enhanced.received + original.received}
        assert shapes == {(HEIGHT, WIDTH, 3)}
        codes = [code for code, _, _ in enhanced.received if code is not None]
        assert len(codes) >= 0.9 * len(enhanced.received)
        assert codes == sorted(codes)
        assert len(set(codes)) == len(codes)

        def closer_to_output(peer: Peer) -> list[bool]:
            """Per decoded frame, whether its brightness is the model's output's rather than the input's.

            Frames the model barely changed (under 2 levels) cannot tell and are left out.
            """
            matched = [(level(pixels), seen[code]) for code, _, pixels in peer.received if code in seen]
            assert len(matched) >= 0.9 * len(peer.received)
            told = [
                (got, level(src), level(out))
                for got, (src, out) in matched
                if abs(level(src) - level(out)) > 2
            ]
            assert len(told) >= 0.3 * len(matched)
            return [abs(got - out) < abs(got - src) for got, src, out in told]

        # The enhanced player decodes what the model made, the original player what came in.
        verdicts = closer_to_output(enhanced)
        assert sum(verdicts) >= 0.9 * len(verdicts)
        verdicts = closer_to_output(original)
        assert sum(verdicts) <= 0.1 * len(verdicts)
        latencies = [
            (at - camera.captured[code]) * 1000 for code, at, _ in enhanced.received if code is not None
        ]
        record_property("latency_p50_ms", round(statistics.median(latencies), 1))
        record_property("frames", (report.frames_in, len(enhanced.received), report.source_dropped))

    asyncio.run(scenario())


def test_a_new_publisher_after_the_first_left_starts_a_new_run() -> None:
    async def scenario() -> None:
        async with serving() as (server, http):
            source = WhipSource(server, "cam", open_timeout_s=20.0)
            first = await publish(http, server, "cam", CountingCamera(first_code=0))
            await source.open()
            before = [await source.recv() for _ in range(10)]
            pc = RTCPeerConnection(rtc_configuration())
            pc.addTransceiver("video", direction="sendonly")
            with restrict_host_addresses(LOOPBACK):
                await pc.setLocalDescription(await pc.createOffer())
            sdp = {"Content-Type": "application/sdp", "Authorization": f"Bearer {TOKEN}"}
            async with http.post(f"{server.url}/whip/cam", data=pc.localDescription.sdp, headers=sdp) as r:
                assert r.status == 409  # the first is connected: it keeps the slot
                assert "already has a publisher sending video" in await r.text()
            await pc.close()
            await leave(http, server, first)
            second = await publish(http, server, "cam", CountingCamera(first_code=500, seed=1))
            after = [await source.recv()]
            while not after[-1].discontinuity:
                after.append(await source.recv())
            after += [await source.recv() for _ in range(5)]
            await leave(http, server, second)
            await source.aclose()

        frames = before + after
        assert [f.index for f in frames] == list(range(len(frames)))
        flagged = [f for f in frames if f.discontinuity]
        assert len(flagged) == 1
        codes = [framecode.read(f.pixels) for f in frames]
        assert None not in codes
        assert all(code < 500 for code in codes[: flagged[0].index] if code is not None)
        assert all(code >= 500 for code in codes[flagged[0].index :] if code is not None)  # the second's
        assert all(f.time_base == before[0].time_base for f in frames)

    asyncio.run(scenario())


class SilencedCamera(CountingCamera):
    """Sends ``frames`` frames, then nothing, its connection left up: a browser tab closed abruptly."""

    def __init__(self, frames: int) -> None:
        super().__init__()
        self._frames = frames
        self._never = asyncio.Event()

    async def recv(self) -> av.VideoFrame:
        if self.code >= self._frames:
            await self._never.wait()
        return await super().recv()


def test_a_publisher_connected_but_silent_is_replaced_by_the_next_offer() -> None:
    """A reload after an abrupt close publishes again at once, not after ~30 s of 409: a connected
    publisher that sent no video for publisher_stale_s gives its slot to the next offer."""

    async def scenario() -> tuple[list[Frame], str]:
        server = WebRtcServer(port=0, token=TOKEN, connect_timeout_s=10.0, publisher_stale_s=1.0)
        await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                source = WhipSource(server, "cam", open_timeout_s=20.0, relay_original=False)
                first = await publish(http, server, "cam", SilencedCamera(frames=15))
                await source.open()
                before = [await source.recv() for _ in range(10)]
                await until(
                    lambda: (source.idle_s(time.monotonic()) or 0.0) > 1.0, 20, "the first to go quiet"
                )
                second = await publish(http, server, "cam", CountingCamera(first_code=500, seed=1))
                after = [await asyncio.wait_for(source.recv(), 20)]
                while not after[-1].discontinuity:
                    after.append(await asyncio.wait_for(source.recv(), 20))
                await until(
                    lambda: first.pc.connectionState in ("closed", "failed"), 20, "the first to be ended"
                )
                state = first.pc.connectionState
                await leave(http, server, second)
                await first.pc.close()
                await source.aclose()
                return before + after, state
        finally:
            await server.stop()

    frames, first_state = asyncio.run(scenario())
    assert first_state in ("closed", "failed")
    codes = [framecode.read(f.pixels) for f in frames]
    assert frames[-1].discontinuity
    assert codes[-1] is not None
    assert codes[-1] >= 500  # the second publisher's frames flow


def test_a_frame_is_taken_on_its_last_packet_not_when_the_next_begins() -> None:
    """The publisher's last frame before it goes quiet reaches the pipeline while it stays connected:
    aiortc's own jitter buffer would hold it until a packet of a next frame that never comes."""

    async def scenario() -> list[int | None]:
        async with serving() as (server, http):
            source = WhipSource(server, "cam", open_timeout_s=20.0, relay_original=False)
            publisher = await publish(http, server, "cam", SilencedCamera(frames=6))
            await source.open()
            frames = [await asyncio.wait_for(source.recv(), 10) for _ in range(6)]
            await leave(http, server, publisher)
            await source.aclose()
            return [framecode.read(f.pixels) for f in frames]

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4, 5]


def answered_codec(answer: str) -> str:
    """The codec an answer sends video in: its video m-line's first format."""
    section = video_section(answer)
    assert section is not None
    return video_formats(section)[0].name


@pytest.mark.parametrize("shared", [True, False])
def test_players_offering_h264_share_one_encode_of_the_stream(shared: bool) -> None:
    """Two aiortc players (their offers list VP8 first, then H.264, as browsers' do) on one stream: with
    ``shared_h264`` both get H.264 from one encode per frame; without it, each its own VP8 encoder."""

    async def scenario() -> tuple[list[list[int | None]], int, int, list[str]]:
        server = WebRtcServer(port=0, token=TOKEN, connect_timeout_s=10.0, shared_h264=shared)
        hub = server.declare_playback("out")
        await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                players = [await play(http, server, "out", wanted=20) for _ in range(2)]
                codecs = [answered_codec(p.pc.remoteDescription.sdp) for p in players]
                camera = CountingCamera()
                async with asyncio.timeout(60):
                    while not all(p.enough.is_set() for p in players):
                        video = await camera.recv()
                        pixels = np.asarray(video.to_ndarray(format="rgb24"), dtype=np.uint8)
                        hub.publish(Frame(pixels, camera.code, video.pts, video.time_base, time.monotonic()))
                for player in players:
                    await leave(http, server, player)
                return (
                    [[c for c, _, _ in p.received] for p in players],
                    hub.published,
                    hub.shared.encoded,
                    codecs,
                )
        finally:
            await server.stop()

    received, published, encoded, codecs = asyncio.run(scenario())
    assert codecs == (["H264", "H264"] if shared else ["VP8", "VP8"])
    for codes in received:
        assert len(codes) >= 20
        readable = [c for c in codes if c is not None]
        assert len(readable) >= 18  # each player decodes the stream it is sent
        assert readable == sorted(readable)
    if shared:
        assert 0 < encoded <= published  # one encode per frame for both players (none skipped while free)
    else:
        assert encoded == 0  # each player's sender encoded for itself


def test_with_end_on_unpublish_the_publisher_leaving_ends_the_stream() -> None:
    async def scenario() -> list[Frame]:
        async with serving() as (server, http):
            source = WhipSource(server, "cam", open_timeout_s=20.0, end_on_unpublish=True)
            publisher = await publish(http, server, "cam", CountingCamera())
            await source.open()
            frames = [await source.recv()]
            await leave(http, server, publisher)
            frames += [frame async for frame in source]  # iteration stops at EndOfStream
            await source.aclose()
            return frames

    frames = asyncio.run(scenario())
    assert [f.index for f in frames] == list(range(len(frames)))


@pytest.mark.parametrize("original", [True, False], ids=["original", "no-original"])
def test_any_source_plays_its_original_beside_the_enhanced(original: bool) -> None:
    """A synthetic source (not WHIP) behind a WHEP output: /whep/cam.original plays the frames as they
    came in, beside /whep/cam, unless the output says original: false (then it is 404)."""
    config = load_config(
        None,
        {
            "source": {
                "kind": "synthetic",
                "realtime": True,
                "frames": 900,
                "width": WIDTH,
                "height": HEIGHT,
            },
            "sink": {"kind": "whep", "stream": "cam", "original": original},
            "model.path": str(TEMPORAL_FILTER),
        },
    )

    async def scenario() -> tuple[int, int, int]:
        async with serving() as (server, http):
            pipeline = build_pipeline(config, server=server)
            running = asyncio.create_task(pipeline.run())
            enhanced = await play(http, server, "cam", wanted=20)
            headers = {"Content-Type": "application/sdp", "Authorization": f"Bearer {TOKEN}"}
            if original:
                side = await play(http, server, "cam" + ORIGINAL_SUFFIX, wanted=20)
                await asyncio.wait_for(side.enough.wait(), 30)
                status, seen = 201, len(side.received)
                await side.pc.close()
            else:
                pc = RTCPeerConnection(rtc_configuration())
                pc.addTransceiver("video", direction="recvonly")
                with restrict_host_addresses(LOOPBACK):
                    await pc.setLocalDescription(await pc.createOffer())
                async with http.post(
                    f"{server.url}/whep/cam{ORIGINAL_SUFFIX}", data=pc.localDescription.sdp, headers=headers
                ) as r:
                    status, seen = r.status, 0
                await pc.close()
            await asyncio.wait_for(enhanced.enough.wait(), 30)
            await enhanced.pc.close()
            pipeline.stop()
            await asyncio.wait_for(running, 30)
            return status, seen, len(enhanced.received)

    status, original_frames, enhanced_frames = asyncio.run(scenario())
    assert enhanced_frames >= 20
    if original:
        assert (status, original_frames >= 20) == (201, True)
    else:
        assert status == 404
