"""One H.264 encode per played stream, shared by its players: offers, keyframes, queues, loss reports."""

from __future__ import annotations

import asyncio
from fractions import Fraction

import av
import numpy as np
from aiortc import RTCPeerConnection
from aiortc.rtp import RTCP_PSFB_PLI, RtcpPsfbPacket

from streamer.frame import Frame
from streamer.media.sdp import video_section
from streamer.webrtc.codecs import shared_h264_offer, video_formats
from streamer.webrtc.playback import FrameHub
from streamer.webrtc.shared_h264 import (
    ENCODER_FRAMES,
    KEYFRAME_GAP_S,
    PLAYER_PACKETS,
    Encoded,
    PacketTrack,
    SharedH264,
    keyframe_on_loss,
)

BROWSER_OFFER = """v=0\r
o=- 1 1 IN IP4 127.0.0.1\r
s=-\r
t=0 0\r
m=audio 9 UDP/TLS/RTP/SAVPF 111\r
a=rtpmap:111 opus/48000/2\r
m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103 106 127\r
a=mid:1\r
a=rtpmap:96 VP8/90000\r
a=rtcp-fb:96 nack\r
a=rtpmap:97 rtx/90000\r
a=fmtp:97 apt=96\r
a=rtpmap:102 H264/90000\r
a=rtcp-fb:102 nack pli\r
a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r
a=rtpmap:103 rtx/90000\r
a=fmtp:103 apt=102\r
a=rtpmap:106 H264/90000\r
a=fmtp:106 packetization-mode=0;profile-level-id=42e01f\r
a=rtpmap:127 H264/90000\r
a=fmtp:127 packetization-mode=1;profile-level-id=640c1f\r
"""


def test_a_browser_offer_is_cut_to_the_h264_that_plays_the_shared_stream() -> None:
    cut = shared_h264_offer(BROWSER_OFFER)
    assert cut is not None
    section = video_section(cut)
    assert section is not None
    assert section[0] == "m=video 9 UDP/TLS/RTP/SAVPF 102 103"  # VP8, mode 0 and High gone; rtx kept
    assert [f.payload_type for f in video_formats(section)] == [102, 103]
    assert "a=rtcp-fb:96" not in cut
    assert "a=fmtp:127" not in cut
    assert (
        "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=rtpmap:111 opus/48000/2\r\n" in cut
    )  # other sections as they were
    assert "a=mid:1\r\n" in cut


def test_an_offer_without_such_h264_gets_a_player_encoder_of_its_own() -> None:
    vp8_only = BROWSER_OFFER.replace("96 97 102 103 106 127", "96 97")
    assert shared_h264_offer(vp8_only) is None
    high_only = BROWSER_OFFER.replace("96 97 102 103 106 127", "127")
    assert shared_h264_offer(high_only) is None
    assert shared_h264_offer("v=0\r\nm=audio 9 RTP/AVP 0\r\n") is None


def frame(index: int, width: int = 96, height: int = 64) -> Frame:
    pixels = np.random.default_rng(index).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Frame(pixels, index, index, Fraction(1, 30), float(index))


def packet(keyframe: bool) -> Encoded:
    return Encoded(av.Packet(b"\x00\x00\x00\x01" + (b"\x65" if keyframe else b"\x41")), keyframe)


def test_a_player_starts_at_a_keyframe_and_one_a_queue_behind_waits_for_the_next() -> None:
    async def check() -> None:
        shared = SharedH264("cam")
        track = PacketTrack(shared)
        track.offer(packet(keyframe=False))  # joined mid-picture: undecodable, skipped
        track.offer(packet(keyframe=True))
        for _ in range(PLAYER_PACKETS - 1):
            track.offer(packet(keyframe=False))
        assert track.skipped == 1
        assert track.stats().depth == PLAYER_PACKETS
        shared._wanted = False
        track.offer(packet(keyframe=False))  # the player never read: all it holds is stale
        assert track.stats().depth == 0
        assert shared._wanted  # it asked for a keyframe to start again from
        track.offer(packet(keyframe=False))
        assert track.stats().depth == 0
        track.offer(packet(keyframe=True))
        assert track.stats().depth == 1
        assert track.skipped == 1 + PLAYER_PACKETS + 2

    asyncio.run(check())


def test_players_share_one_encode_and_each_starts_on_a_keyframe_of_its_own() -> None:
    async def check() -> tuple[int, list[list[av.Packet]]]:
        hub = FrameHub("cam", h264_bitrate=500_000)
        first, second = hub.subscribe_h264(), hub.subscribe_h264()
        for index in range(5):
            hub.publish(frame(index))
            await until_encoded(hub.shared, index + 1)
        late = hub.subscribe_h264()  # asks for a keyframe of its own
        await asyncio.sleep(KEYFRAME_GAP_S)  # served once the gap since the last keyframe has passed
        for index in range(5, 8):
            hub.publish(frame(index))
            await until_encoded(hub.shared, index + 1)
        got = [drained(t) for t in (first, second, late)]
        hub.close()
        assert hub.shared.players == 0  # closing the hub ended every player
        return hub.shared.encoded, got

    encoded, (first, second, late) = asyncio.run(check())
    assert encoded == 8  # once per frame, not once per player
    assert len(first) == len(second) == 8
    assert all(a is b for a, b in zip(first, second, strict=True))  # the very same packets
    assert first[0].is_keyframe
    assert len(late) == 3
    assert late[0].is_keyframe  # the keyframe it asked for, which the others get too
    assert late[0] is first[5]
    assert not any(p.is_keyframe for p in first[1:5])


def test_frames_handed_on_in_a_burst_are_each_encoded() -> None:
    """A pipeline hands frames on in bursts (a batch's outputs at once): each is encoded, none skipped,
    since a player missing one could not decode the next; past the queue the oldest go."""

    async def check() -> tuple[int, int]:
        hub = FrameHub("cam", h264_bitrate=500_000)
        player = hub.subscribe_h264()
        for index in range(ENCODER_FRAMES):
            hub.publish(frame(index))
        await until_encoded(hub.shared, ENCODER_FRAMES)
        got = len(drained(player))
        hub.close()
        return hub.shared.encoded, got

    assert asyncio.run(check()) == (ENCODER_FRAMES, ENCODER_FRAMES)


def test_a_picture_loss_report_reaches_the_shared_encoder() -> None:
    async def check() -> int:
        asked: list[int] = []
        pc = RTCPeerConnection()
        try:
            sender = pc.addTransceiver("video", direction="sendonly").sender
            assert keyframe_on_loss(sender, lambda: asked.append(1))
            pli = RtcpPsfbPacket(fmt=RTCP_PSFB_PLI, ssrc=1234, media_ssrc=sender._ssrc)
            await sender._handle_rtcp_packet(pli)
        finally:
            await pc.close()
        return len(asked)

    assert asyncio.run(check()) == 1


async def until_encoded(shared: SharedH264, count: int) -> None:
    async with asyncio.timeout(30):
        while shared.encoded < count:
            await asyncio.sleep(0.005)


def drained(track: PacketTrack) -> list[av.Packet]:
    out = []
    while (one := track._channel.get_nowait()) is not None:
        out.append(one.packet)
    return out
