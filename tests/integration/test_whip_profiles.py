"""WHIP ingest of H.264 in every profile a publisher sends, with real aiortc publishers on loopback.

aiortc only negotiates H.264 in the two profiles its encoder makes, so the publisher here sends
bitstreams libx264 made in the named profile as pre-encoded packets, and its offer's fmtp is edited to
name that profile-level-id: what OBS, GStreamer or a camera would offer. Refusals are offers edited to
hold only codecs nothing here decodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
from collections.abc import AsyncIterator
from fractions import Fraction
from typing import Any

import aiohttp
import av
import numpy as np
import pytest
from aiortc import RTCPeerConnection, RTCRtpSender, RTCSessionDescription, VideoStreamTrack
from aiortc.codecs import CODECS

from streamer.frame import Frame
from streamer.media import framecode
from streamer.webrtc import WebRtcServer, WhepSink, WhipSource
from streamer.webrtc.ice import restrict_host_addresses, rtc_configuration

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

WIDTH, HEIGHT = 256, 144
TOKEN = "test-token"
HEADERS = {"Content-Type": "application/sdp", "Authorization": f"Bearer {TOKEN}"}
AIORTC_PROFILE = "42e01f"
"""The H.264 profile-level-id an aiortc publisher offers and can take back in an answer."""
X264_PROFILES = {0x42: "baseline", 0x4D: "main", 0x64: "high"}
"""libx264's profile for each H.264 profile_idc (the first byte of a profile-level-id)."""


class H264Camera(VideoStreamTrack):
    """A 30 fps camera whose frames libx264 encodes in ``profile``; sends the packets as they are.

    aiortc's sender packetizes a pre-encoded packet without re-encoding it, so the publisher's bytes
    are this profile's. Each frame carries its number; a keyframe (with SPS) comes every 15 frames.
    """

    def __init__(self, profile: str) -> None:
        super().__init__()
        self._encoder = av.CodecContext.create("libx264", "w")
        self._encoder.width, self._encoder.height, self._encoder.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        self._encoder.time_base = Fraction(1, 30)
        self._encoder.gop_size = 15
        # veryfast, not ultrafast: ultrafast leaves out CABAC and 8x8 transforms, so its stream is Baseline
        self._encoder.options = {"profile": profile, "preset": "veryfast", "tune": "zerolatency"}
        ramp = np.linspace(40, 200, WIDTH, dtype=np.uint8)
        self._scene = np.ascontiguousarray(np.broadcast_to(ramp[None, :, None], (HEIGHT, WIDTH, 3)))
        self._code = 0
        self.sps: bytes | None = None
        """The first sequence parameter set sent: what profile the bitstream really is."""

    async def recv(self) -> av.Packet:  # type: ignore[override]
        pts, time_base = await self.next_timestamp()
        frame = av.VideoFrame.from_ndarray(framecode.stamp(self._scene, self._code), format="rgb24")
        frame = frame.reformat(format="yuv420p")
        frame.pts = self._code
        self._code += 1
        data = b"".join(bytes(p) for p in await asyncio.to_thread(self._encoder.encode, frame))
        if self.sps is None and (found := re.search(rb"\x00\x00\x01[\x27\x47\x67]", data)):
            self.sps = data[found.end() : found.end() + 3]
        packet = av.Packet(data)
        packet.pts, packet.time_base = pts, time_base
        return packet


def formats(sdp: str) -> tuple[list[str], list[str]]:
    """The codec names (rtx left out) and H.264 profile-level-ids of an SDP's video section, in order."""
    video = sdp.split("m=video", 1)[1].split("\nm=", 1)[0]
    names = re.findall(r"a=rtpmap:\d+ ([^/]+)/", video)
    return [n for n in names if n != "rtx"], re.findall(r"profile-level-id=(\w+)", video)


@contextlib.asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[tuple[WebRtcServer, WhipSource, aiohttp.ClientSession]]:
    """A server (``options`` over the defaults here) with WHIP stream ``cam``, and an HTTP client."""
    server = WebRtcServer(**{"port": 0, "token": TOKEN, "connect_timeout_s": 20.0, **options})
    source = WhipSource(server, "cam", open_timeout_s=60.0, relay_original=False)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield server, source, http
    finally:
        await source.aclose()
        await server.stop()


async def offer_of(pc: RTCPeerConnection) -> str:
    with restrict_host_addresses(["127.0.0.1"]):
        await pc.setLocalDescription(await pc.createOffer())
    sdp: str = pc.localDescription.sdp
    return sdp


async def publish_h264(
    http: aiohttp.ClientSession, server: WebRtcServer, camera: H264Camera, profile_level_id: str
) -> tuple[RTCPeerConnection, str]:
    """Offer only H.264, labelled ``profile_level_id``; returns the publisher and the server's answer.

    The aiortc publisher cannot take an answer in a profile it does not know, so it is shown the answer
    with its own label back; the server's answer is returned as sent.
    """
    pc = RTCPeerConnection(rtc_configuration())
    transceiver = pc.addTransceiver(camera, direction="sendonly")
    h264 = [
        c
        for c in RTCRtpSender.getCapabilities("video").codecs
        if c.mimeType == "video/H264" and c.parameters.get("profile-level-id") == AIORTC_PROFILE
    ]
    transceiver.setCodecPreferences(h264)
    offer = (await offer_of(pc)).replace(
        f"profile-level-id={AIORTC_PROFILE}", f"profile-level-id={profile_level_id}"
    )
    async with http.post(f"{server.url}/whip/cam", data=offer, headers=HEADERS) as response:
        answer = await response.text()
        assert response.status == 201, answer
    mine = answer.replace(f"profile-level-id={profile_level_id}", f"profile-level-id={AIORTC_PROFILE}")
    await pc.setRemoteDescription(RTCSessionDescription(sdp=mine, type="answer"))
    return pc, answer


@pytest.mark.parametrize(
    "profile_level_id",
    ["42e01f", "42c01f", "42001f", "4d001f", "4d401f", "64001f", "640c1f", "640c34"],
)
def test_each_h264_profile_is_answered_in_its_own_profile_and_its_frames_decode(
    profile_level_id: str,
) -> None:
    """Constrained Baseline, Baseline, Main, High and Constrained High (any level) arrive as frames."""

    async def scenario() -> tuple[str, bytes | None, list[Frame]]:
        async with serving() as (server, source, http):
            camera = H264Camera(X264_PROFILES[int(profile_level_id[:2], 16)])
            publisher, answer = await publish_h264(http, server, camera, profile_level_id)
            try:
                await source.open()
                frames = [await asyncio.wait_for(source.recv(), 30) for _ in range(20)]
            finally:
                await publisher.close()
            return answer, camera.sps, frames

    answer, sps, frames = asyncio.run(scenario())
    assert "a=recvonly" in answer
    assert formats(answer) == (["H264"], [profile_level_id])
    assert sps is not None
    assert sps[0] == int(profile_level_id[:2], 16)  # the bitstream is of the offered profile family
    assert {f.pixels.shape for f in frames} == {(HEIGHT, WIDTH, 3)}
    codes = [framecode.read(f.pixels) for f in frames]
    assert None not in codes
    assert codes == sorted(codes)


REFUSED = {
    "H265 and AV1": ("a=rtpmap:120 H265/90000", "a=rtpmap:45 AV1/90000"),
    "High 10": ("a=rtpmap:120 H264/90000", "a=fmtp:120 packetization-mode=1;profile-level-id=6e001f"),
    "packetization-mode 0": ("a=rtpmap:120 H264/90000", "a=fmtp:120 profile-level-id=42e01f"),
}


@pytest.mark.parametrize("codecs", REFUSED.values(), ids=REFUSED.keys())
def test_an_offer_without_a_codec_ingest_decodes_is_refused_naming_what_it_takes(
    codecs: tuple[str, ...],
) -> None:
    """A 400 with one line naming what the offer had and what ingest takes; the stream stays free."""

    async def scenario() -> tuple[int, str, int]:
        async with serving() as (server, _, http):
            pc = RTCPeerConnection(rtc_configuration())
            pc.addTransceiver("video", direction="sendonly")
            offer = await offer_of(pc)
            await pc.close()
            kept = [
                line
                for line in offer.splitlines()
                if not line.startswith(("a=rtpmap", "a=fmtp", "a=rtcp-fb"))
            ]
            types = " ".join(line.split(":")[1].split()[0] for line in codecs if line.startswith("a=rtpmap"))
            lines = [re.sub(r"^(m=video \S+ \S+) .*", rf"\1 {types}", line) for line in kept]
            video = next(i for i, line in enumerate(lines) if line.startswith("m=video"))
            lines[video + 1 : video + 1] = codecs
            async with http.post(
                f"{server.url}/whip/cam", data="\r\n".join(lines) + "\r\n", headers=HEADERS
            ) as r:
                refused = (r.status, await r.text())
            pc = RTCPeerConnection(rtc_configuration())
            pc.addTransceiver("video", direction="sendonly")
            async with http.post(f"{server.url}/whip/cam", data=await offer_of(pc), headers=HEADERS) as r:
                await pc.close()
                return (*refused, r.status)

    status, reason, after = asyncio.run(scenario())
    assert status == 400, reason
    assert reason.endswith("\n")
    assert "\n" not in reason.strip()
    assert "has no codec this server decodes" in reason
    offered = [line.split()[1].split("/")[0] for line in codecs if line.startswith("a=rtpmap")]
    assert all(name in reason for name in offered)
    for accepted in ("VP8", "packetization-mode=1", "42e0xx", "4200xx", "4d00xx", "6400xx", "640cxx"):
        assert accepted in reason
    assert after == 201  # the refused offer held nothing


def test_players_are_still_offered_and_sent_only_what_aiortc_encodes() -> None:
    """Taking High-profile publishers leaves aiortc's codec list, and so every WHEP answer, as it was:
    a player offering aiortc's own formats is answered in the H.264 formats the shared encode plays on
    (Baseline, Constrained Baseline; VP8 left for players without them), and one offering only High
    profile is refused."""

    async def scenario() -> tuple[str, int]:
        async with serving() as (server, _, http):
            WhepSink(server, "out")
            publisher, _ = await publish_h264(http, server, H264Camera("high"), "640c1f")
            await publisher.close()
            pc = RTCPeerConnection(rtc_configuration())
            pc.addTransceiver("video", direction="recvonly")
            offer = await offer_of(pc)
            await pc.close()
            async with http.post(f"{server.url}/whep/out", data=offer, headers=HEADERS) as r:
                assert r.status == 201, await r.text()
                answer = await r.text()
            high = offer.replace(f"profile-level-id={AIORTC_PROFILE}", "profile-level-id=640c1f")
            high = high.replace("profile-level-id=42001f", "profile-level-id=640c1f")
            high = re.sub(r"a=rtpmap:(\d+) VP8/90000", r"a=rtpmap:\1 H265/90000", high)
            async with http.post(f"{server.url}/whep/out", data=high, headers=HEADERS) as r:
                return answer, r.status

    codecs = copy.deepcopy(CODECS)
    answer, high_only = asyncio.run(scenario())
    assert codecs == CODECS
    assert formats(answer) == (["H264", "H264"], ["42001f", AIORTC_PROFILE])
    assert high_only == 400  # this server encodes no High profile for players
