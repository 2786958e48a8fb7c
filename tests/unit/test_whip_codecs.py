"""Which video formats WHIP ingest takes, and the relabelling that gets aiortc to answer them."""

from __future__ import annotations

import pytest

from streamer.media.sdp import video_section
from streamer.webrtc.codecs import h264_profile, refusal, relabel_h264, video_formats

OFFER = "\r\n".join(
    [
        "v=0",
        "o=- 1 1 IN IP4 0.0.0.0",
        "m=audio 9 UDP/TLS/RTP/SAVPF 111",
        "a=rtpmap:111 opus/48000/2",
        "a=fmtp:111 minptime=10;useinbandfec=1",
        "m=video 9 UDP/TLS/RTP/SAVPF 96 97 98 99 100",
        "a=rtpmap:96 H264/90000",
        "a=fmtp:96 packetization-mode=1;profile-level-id=640C1F;sprop-parameter-sets=Z0IAH5WoFAFuQA==",
        "a=rtpmap:97 rtx/90000",
        "a=fmtp:97 apt=96",
        "a=rtpmap:98 H264/90000",
        "a=fmtp:98 profile-level-id=640c1f",
        "a=rtpmap:99 VP8/90000",
        "a=rtpmap:100 H264/90000",
        "a=fmtp:100 Packetization-Mode = 1 ; profile-level-id=4d001f",
        "",
    ]
)


@pytest.mark.parametrize(
    ("profile_level_id", "profile"),
    [
        ("42e01f", "Constrained Baseline"),
        ("42c01f", "Constrained Baseline"),
        ("42001f", "Baseline"),
        ("4d001f", "Main"),
        ("4d4033", "Main"),
        ("64001f", "High"),
        ("640C1F", "Constrained High"),
        ("640c3c", "Constrained High"),  # level 6.0: aiortc knows no such level, FFmpeg needs none
        ("6e001f", None),  # High 10
        ("f4001f", None),  # High 4:4:4
        ("64001", None),
        ("zz001f", None),
    ],
)
def test_profiles_are_told_by_their_first_two_bytes_whatever_the_level(
    profile_level_id: str, profile: str | None
) -> None:
    assert h264_profile(profile_level_id) == profile


def test_decodable_h264_formats_are_shown_to_aiortc_as_its_own_and_answered_as_offered() -> None:
    relabelled = relabel_h264(OFFER)
    lines = relabelled.sdp.split("\r\n")
    assert "a=fmtp:96 packetization-mode=1;profile-level-id=42e01f" in lines
    assert "a=fmtp:100 packetization-mode=1;profile-level-id=42e01f" in lines
    assert "a=fmtp:98 profile-level-id=640c1f" in lines  # packetization-mode 0: aiortc still refuses it
    assert "a=fmtp:111 minptime=10;useinbandfec=1" in lines
    assert relabelled.sdp.count("\r\n") == OFFER.count("\r\n")
    assert relabelled.offered == {(1, 96): "640C1F", (1, 100): "4d001f"}

    aiortc_answer = "\r\n".join(
        [
            "v=0",
            "m=audio 9 UDP/TLS/RTP/SAVPF 111",
            "a=fmtp:111 minptime=10;useinbandfec=1",
            "m=video 9 UDP/TLS/RTP/SAVPF 96 100",
            "a=fmtp:96 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
            "a=fmtp:100 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
            "",
        ]
    )
    answer = relabelled.answer(aiortc_answer)
    assert answer.split("\r\n")[4:6] == [
        "a=fmtp:96 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640C1F",
        "a=fmtp:100 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=4d001f",
    ]
    assert relabel_h264(aiortc_answer).offered == {}  # aiortc's own answer has no profile to hide


def test_formats_are_read_in_the_offers_order_and_named_in_a_refusal() -> None:
    section = video_section(OFFER)
    assert section is not None
    formats = video_formats(section)
    assert [str(f) for f in formats] == [
        "H264 640C1F (Constrained High)",
        "rtx",
        "H264 640c1f (Constrained High) packetization-mode=0",
        "VP8",
        "H264 4d001f (Main)",
    ]
    assert [f.decodable for f in formats] == [True, False, False, True, True]
    reason = refusal(formats[1:3])
    assert reason.startswith(
        "the offer's video has no codec this server decodes "
        "(it offers H264 640c1f (Constrained High) packetization-mode=0); offer VP8, or H.264"
    )
    assert "(it offers none)" in refusal([])
