"""The WHIP receiver's jitter buffer: a frame leaves on its marker bit, with no packet before it missing."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiortc import RTCPeerConnection
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtp import RtpPacket

from streamer.webrtc import jitter
from streamer.webrtc.jitter import MarkerJitterBuffer, release_on_marker


def packet(sequence: int, timestamp: int, data: bytes, marker: bool = False) -> RtpPacket:
    """An RTP packet as aiortc's receiver hands it on: its payload already depayloaded into ``_data``."""
    p = RtpPacket(payload_type=96, marker=int(marker), sequence_number=sequence, timestamp=timestamp)
    p._data = data  # type: ignore[attr-defined]
    return p


def frames(buffer: JitterBuffer, packets: list[RtpPacket]) -> list[tuple[int, JitterFrame | None]]:
    """(sequence number, frame released by adding it) for each packet, in order."""
    return [(p.sequence_number, buffer.add(p)[1]) for p in packets]


def test_a_frame_leaves_on_its_marked_packet_where_aiortc_waits_for_the_next() -> None:
    first = [packet(10, 3000, b"a"), packet(11, 3000, b"b"), packet(12, 3000, b"c", marker=True)]
    released = frames(MarkerJitterBuffer(), first)
    assert [f is None for _, f in released] == [True, True, False]
    frame = released[-1][1]
    assert frame is not None
    assert (frame.data, frame.timestamp) == (b"abc", 3000)
    # aiortc's own buffer holds the same complete frame until a packet of the next one arrives
    assert all(f is None for _, f in frames(JitterBuffer(512, is_video=True), first))


def test_frames_follow_one_another_each_on_its_own_marker() -> None:
    buffer = MarkerJitterBuffer()
    out = frames(
        buffer,
        [packet(1, 0, b"x", marker=True), packet(2, 3000, b"y"), packet(3, 3000, b"z", marker=True)],
    )
    assert [(s, f.data if f else None) for s, f in out] == [(1, b"x"), (2, None), (3, b"yz")]


def test_a_frame_missing_a_packet_waits_for_it_then_leaves_whole() -> None:
    buffer = MarkerJitterBuffer()
    out = frames(buffer, [packet(20, 90, b"1"), packet(22, 90, b"3", marker=True)])
    assert [f for _, f in out] == [None, None]  # 21 is missing: nothing leaves incomplete
    ((_, late),) = frames(buffer, [packet(21, 90, b"2")])  # a retransmission fills the gap
    assert late is not None
    assert late.data == b"123"


def test_a_sender_that_never_marks_still_gets_its_frames_on_the_next_timestamp() -> None:
    buffer = MarkerJitterBuffer()
    out = frames(buffer, [packet(5, 0, b"p"), packet(6, 0, b"q"), packet(7, 3000, b"r")])
    assert [f.data if f else None for _, f in out] == [None, None, b"pq"]


def test_a_video_receiver_of_this_aiortc_takes_the_buffer() -> None:
    async def check() -> None:
        pc = RTCPeerConnection()
        try:
            receiver = pc.addTransceiver("video", direction="recvonly").receiver
            assert release_on_marker(receiver)
            assert isinstance(getattr(receiver, jitter._BUFFER), MarkerJitterBuffer)
        finally:
            await pc.close()

    asyncio.run(check())


def test_an_aiortc_without_the_buffer_is_said_once_and_left_as_it_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Elsewhere:
        """A receiver that keeps its buffer under another name."""

    jitter._unsupported.cache_clear()
    with caplog.at_level(logging.WARNING, logger="streamer.webrtc.jitter"):
        assert not release_on_marker(Elsewhere())  # type: ignore[arg-type]
        assert not release_on_marker(Elsewhere())  # type: ignore[arg-type]
    assert [r.message.count("a frame period late") for r in caplog.records] == [1]
