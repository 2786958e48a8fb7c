"""streamer.sources.rtp: H.264 RTP packets into whole frames, the session description, the credentials."""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest

from streamer.sources.rtp import (
    START_CODE,
    Challenge,
    Depacketizer,
    RtspProtocolError,
    UnsupportedStream,
    authorization,
    credentials,
    h265_payload,
    parse_challenges,
    rtcp_says_bye,
    video_track,
)

PT = 96
IDR = bytes([0x65]) + bytes(range(1, 200))
SLICE = bytes([0x41]) + b"\x11" * 50
SPS, PPS = bytes([0x67, 0x42, 0x00, 0x1E]), bytes([0x68, 0xCE, 0x38, 0x80])


def rtp(payload: bytes, seq: int, ts: int, marker: bool, pt: int = PT) -> bytes:
    return (
        struct.pack("!BBHLL", 0x80, (0x80 if marker else 0) | pt, seq & 0xFFFF, ts & 0xFFFFFFFF, 1) + payload
    )


def fu_a(nal: bytes, size: int) -> list[bytes]:
    """``nal`` cut into FU-A payloads of ``size`` bytes of its body each."""
    indicator, kind, body = (nal[0] & 0xE0) | 28, nal[0] & 0x1F, nal[1:]
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    out = []
    for i, piece in enumerate(pieces):
        header = kind | (0x80 if i == 0 else 0) | (0x40 if i == len(pieces) - 1 else 0)
        out.append(bytes([indicator, header]) + piece)
    return out


def stap_a(*nals: bytes) -> bytes:
    return bytes([0x18]) + b"".join(struct.pack("!H", len(n)) + n for n in nals)


def test_a_frame_comes_out_with_its_marked_packet_not_the_next_frames() -> None:
    depacketizer = Depacketizer(PT)
    payloads = [stap_a(SPS, PPS), *fu_a(IDR, 60)]
    out = [depacketizer.push(rtp(p, 10 + i, 3000, i == len(payloads) - 1)) for i, p in enumerate(payloads)]
    assert out[:-1] == [[]] * (len(payloads) - 1)
    (unit,) = out[-1]
    assert unit.data == START_CODE + SPS + START_CODE + PPS + START_CODE + IDR
    assert (unit.timestamp, unit.damaged) == (0, False)
    (second,) = depacketizer.push(rtp(SLICE, 10 + len(payloads), 6000, True))
    assert (second.data, second.timestamp, second.damaged) == (START_CODE + SLICE, 3000, False)


def test_without_markers_a_frame_closes_when_the_next_begins() -> None:
    depacketizer = Depacketizer(PT)
    assert depacketizer.push(rtp(IDR, 1, 100, False)) == []
    (unit,) = depacketizer.push(rtp(SLICE, 2, 103600, False))
    assert (unit.data, unit.timestamp) == (START_CODE + IDR, 0)


def test_parameter_sets_from_the_description_go_before_the_first_frame_only() -> None:
    depacketizer = Depacketizer(PT, START_CODE + SPS + START_CODE + PPS)
    (first,) = depacketizer.push(rtp(IDR, 1, 0, True))
    (second,) = depacketizer.push(rtp(SLICE, 2, 3000, True))
    assert first.data == START_CODE + SPS + START_CODE + PPS + START_CODE + IDR
    assert second.data == START_CODE + SLICE


def test_a_lost_packet_marks_its_frame_damaged_and_the_next_is_whole() -> None:
    depacketizer = Depacketizer(PT)
    first, _, last = fu_a(IDR, 70)
    depacketizer.push(rtp(first, 1, 0, False))
    (damaged,) = depacketizer.push(rtp(last, 3, 0, True))
    (whole,) = depacketizer.push(rtp(SLICE, 4, 3000, True))
    assert damaged.damaged
    assert not whole.damaged


def test_a_fragment_whose_start_was_lost_is_not_taken_for_a_frame() -> None:
    depacketizer = Depacketizer(PT)
    _, middle, last = fu_a(IDR, 70)
    assert depacketizer.push(rtp(middle, 2, 0, False)) == []
    assert depacketizer.push(rtp(last, 3, 0, True)) == []
    (unit,) = depacketizer.push(rtp(SLICE, 4, 3000, True))
    assert unit.data == START_CODE + SLICE


def test_other_payload_types_and_garbage_are_ignored() -> None:
    depacketizer = Depacketizer(PT)
    assert depacketizer.push(rtp(SLICE, 1, 0, True, pt=97)) == []
    assert depacketizer.push(b"\x00\x01") == []
    (unit,) = depacketizer.push(rtp(SLICE, 2, 0, True))
    assert unit.damaged  # the garbage stood where a packet should have been


def test_timestamps_count_on_across_the_32_bit_wrap() -> None:
    depacketizer = Depacketizer(PT)
    start = (1 << 32) - 3000
    stamps = [depacketizer.push(rtp(SLICE, i, start + 3000 * i, True))[0].timestamp for i in range(3)]
    assert stamps == [0, 3000, 6000]


def test_an_oversized_frame_is_dropped_as_damage() -> None:
    depacketizer = Depacketizer(PT)
    body = fu_a(bytes([0x65]) + b"\x00" * 60_000, 1400)
    for i, payload in enumerate(body * 300):  # ~18 MB under one timestamp, never marked
        assert depacketizer.push(rtp(payload, i, 0, False)) == []
    (unit,) = depacketizer.push(rtp(SLICE, len(body) * 300, 0, True))
    assert unit.damaged
    assert len(unit.data) < 17 << 20


SDP = """v=0
o=- 1 1 IN IP4 127.0.0.1
s=cam
a=control:*
m=audio 0 RTP/AVP 8
a=control:stream=1
m=video 0 RTP/AVP 96
a=rtpmap:96 H264/90000
a=fmtp:96 packetization-mode=1;profile-level-id=42001e;sprop-parameter-sets={sets}
a=framerate:25
a=control:stream=0
"""


def test_the_first_video_track_is_found_with_its_control_url_and_parameter_sets() -> None:
    sets = base64.b64encode(SPS).decode() + "," + base64.b64encode(PPS).decode()
    track = video_track(SDP.format(sets=sets), "rtsp://cam/live/")
    assert track.control == "rtsp://cam/live/stream=0"
    assert track.session_control == "rtsp://cam/live/"
    assert (track.payload_type, track.clock_rate, track.fps) == (96, 90_000, 25)
    assert track.parameter_sets == START_CODE + SPS + START_CODE + PPS


def test_an_absolute_control_url_is_kept() -> None:
    sdp = "v=0\r\nm=video 0 RTP/AVP 97\r\na=rtpmap:97 H264/90000\r\na=control:rtsp://other/x/trackID=1\r\n"
    track = video_track(sdp, "rtsp://cam/live")
    assert (track.control, track.payload_type, track.fps, track.parameter_sets) == (
        "rtsp://other/x/trackID=1",
        97,
        None,
        b"",
    )


@pytest.mark.parametrize(
    ("sdp", "error", "words"),
    [
        ("v=0\r\ns=audio only\r\nm=audio 0 RTP/AVP 0\r\n", RtspProtocolError, "no video track"),
        (
            "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 MP4V-ES/90000\r\n",
            UnsupportedStream,
            "MP4V-ES, not H.264 or",
        ),
        (
            "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H265/90000\r\na=fmtp:96 sprop-max-don-diff=2\r\n",
            UnsupportedStream,
            "decoding order numbers",
        ),
        (
            "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=2\r\n",
            UnsupportedStream,
            "interleaved",
        ),
        (
            "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 sprop-parameter-sets=@@@\r\n",
            RtspProtocolError,
            "not base64",
        ),
    ],
)
def test_descriptions_it_cannot_play_say_why(sdp: str, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        video_track(sdp, "rtsp://cam/")


def test_digest_answers_rfc_2617s_worked_example() -> None:
    (challenge,) = parse_challenges(
        [
            'Digest realm="testrealm@host.com", qop="auth,auth-int", '
            'nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"'
        ]
    )
    value = authorization([challenge], "GET", "/dir/index.html", "Mufasa", "Circle Of Life")
    assert value is not None
    fields = dict(part.strip().split("=", 1) for part in value.removeprefix("Digest ").split(","))
    cnonce = fields["cnonce"].strip('"')
    ha1 = hashlib.md5(b"Mufasa:testrealm@host.com:Circle Of Life").hexdigest()
    ha2 = hashlib.md5(b"GET:/dir/index.html").hexdigest()
    nonce = "dcd98b7102dd2f0e8b11d0f600bfb0c093"
    expected = hashlib.md5(f"{ha1}:{nonce}:00000001:{cnonce}:auth:{ha2}".encode()).hexdigest()
    assert fields["response"] == f'"{expected}"'
    assert (fields["nc"], fields["qop"], fields["opaque"]) == (
        "00000001",
        "auth",
        '"5ccc069c403ebaf9f0171e9517f40e41"',
    )


def test_digest_without_qop_and_basic() -> None:
    digest = Challenge("digest", {"realm": "cam", "nonce": "n1"})
    value = authorization([digest], "DESCRIBE", "rtsp://cam/x", "u", "p")
    ha1, ha2 = hashlib.md5(b"u:cam:p").hexdigest(), hashlib.md5(b"DESCRIBE:rtsp://cam/x").hexdigest()
    assert value is not None
    assert f'response="{hashlib.md5(f"{ha1}:n1:{ha2}".encode()).hexdigest()}"' in value
    assert "qop" not in value
    assert authorization(parse_challenges(['Basic realm="cam"']), "DESCRIBE", "u", "admin", "pw") == (
        "Basic " + base64.b64encode(b"admin:pw").decode()
    )
    assert (
        authorization(
            parse_challenges(['Digest realm="x", nonce="y", algorithm=SHA-256']), "M", "u", "a", "b"
        )
        is None
    )


def test_credentials_are_percent_decoded() -> None:
    assert credentials("rtsp://ad%40min:p%3Aw%20d@cam:554/x") == ("ad@min", "p:w d")
    assert credentials("rtsp://cam/x") is None


def test_an_rtcp_bye_in_a_compound_packet_is_seen() -> None:
    report = struct.pack("!BBHL", 0x80, 200, 6, 1) + b"\x00" * 20  # SR, no report blocks
    bye = struct.pack("!BBHL", 0x81, 203, 1, 1)
    assert rtcp_says_bye(report + bye)
    assert not rtcp_says_bye(report)
    assert not rtcp_says_bye(b"\x00" * 8)


VPS, SPS5, PPS5 = bytes([0x40, 0x01, 0x0C]), bytes([0x42, 0x01, 0x01]), bytes([0x44, 0x01, 0xC1])
IDR5 = bytes([0x26, 0x01]) + bytes(range(2, 150))  # IDR_W_RADL, layer 0, tid 1


def test_h265_aggregation_and_fragments_make_one_frame_on_its_marker() -> None:
    aggregate = bytes([0x60, 0x01]) + b"".join(struct.pack("!H", len(n)) + n for n in (VPS, SPS5, PPS5))
    fu_header = bytes([(49 << 1), 0x01])
    body = IDR5[2:]
    fragments = [
        fu_header + bytes([0x80 | 19]) + body[:70],
        fu_header + bytes([19]) + body[70:140],
        fu_header + bytes([0x40 | 19]) + body[140:],
    ]
    depacketizer = Depacketizer(PT, codec="hevc")
    packets = [aggregate, *fragments]
    out = [depacketizer.push(rtp(p, 5 + i, 9000, i == len(packets) - 1)) for i, p in enumerate(packets)]
    assert out[:-1] == [[]] * (len(packets) - 1)
    (unit,) = out[-1]
    assert unit.data == b"".join(START_CODE + n for n in (VPS, SPS5, PPS5, IDR5))
    assert not unit.damaged


@pytest.mark.parametrize(
    "payload",
    [b"\x26", bytes([0x60, 0x01, 0x00, 0x09, 0x40]), bytes([50 << 1, 0x01, 0x00])],
    ids=["short", "truncated-aggregate", "paci"],
)
def test_h265_payloads_it_cannot_read_are_damage(payload: bytes) -> None:
    with pytest.raises(ValueError, match=r"short|truncated|not supported"):
        h265_payload(payload)


def test_an_h265_track_gives_its_vps_sps_and_pps() -> None:
    b64 = [base64.b64encode(n).decode() for n in (VPS, SPS5, PPS5)]
    sdp = (
        "v=0\r\nm=video 0 RTP/AVP 98\r\na=rtpmap:98 H265/90000\r\n"
        f"a=fmtp:98 sprop-vps={b64[0]};sprop-sps={b64[1]};sprop-pps={b64[2]}\r\na=control:trackID=1\r\n"
    )
    track = video_track(sdp, "rtsp://cam/x")
    assert (track.codec, track.payload_type, track.control) == ("hevc", 98, "rtsp://cam/x/trackID=1")
    assert track.parameter_sets == b"".join(START_CODE + n for n in (VPS, SPS5, PPS5))
