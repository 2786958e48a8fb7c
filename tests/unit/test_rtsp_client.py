"""streamer.sources.rtsp_client against a scripted RTSP server on loopback: the requests it makes, in
order, with their headers; interleaved RTP handed on; a keep-alive when the session asks for one; the
end of the stream; and servers that send too much."""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from streamer.errors import EndOfStream
from streamer.sources.rtp import RtspProtocolError, VideoTrack
from streamer.sources.rtsp_client import RtspClient

SDP = (
    b"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=cam\r\nt=0 0\r\na=control:*\r\n"
    b"m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:track1\r\n"
)


def rtp(seq: int) -> bytes:
    return struct.pack("!BBHLL", 0x80, 0x80 | 96, seq, seq * 3000, 7) + bytes([0x41, seq & 0xFF])


def interleaved(channel: int, data: bytes) -> bytes:
    return b"$" + bytes([channel]) + struct.pack("!H", len(data)) + data


BYE = struct.pack("!BBHL", 0x81, 203, 1, 7)


class Script:
    """A one-connection RTSP server: ``answer(method, headers)`` gives the bytes to send back for each
    request (and may send more through ``send``); every request is kept in ``requests``."""

    def __init__(self, answer: Callable[[Script, str, dict[str, str]], bytes]) -> None:
        self.answer = answer
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self.port = int(self._sock.getsockname()[1])
        self._client: socket.socket | None = None
        self.got = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, userinfo: str = "") -> str:
        return f"rtsp://{userinfo}127.0.0.1:{self.port}/live"

    def send(self, data: bytes) -> None:
        assert self._client is not None
        self._client.sendall(data)

    def close(self) -> None:
        self._sock.close()
        if self._client is not None:
            with contextlib.suppress(OSError):
                self._client.close()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            self._client, _ = self._sock.accept()
            pending = b""
            while chunk := self._client.recv(4096):
                pending += chunk
                while b"\r\n\r\n" in pending:
                    head, _, pending = pending.partition(b"\r\n\r\n")
                    first, *lines = head.decode().split("\r\n")
                    method, url, _ = first.split(" ")
                    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
                    with self.got:
                        self.requests.append((method, url, headers))
                        self.got.notify_all()
                    self.send(self.answer(self, method, headers))


def ok(headers: dict[str, str], extra: str = "", body: bytes = b"") -> bytes:
    head = f"RTSP/1.0 200 OK\r\nCSeq: {headers['cseq']}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.fixture
def scripts() -> Iterator[list[Script]]:
    made: list[Script] = []
    yield made
    for script in made:
        script.close()


def camera(session: str = "Session: 12345678;timeout=60\r\n", then: bytes = b"") -> Callable[..., bytes]:
    """A camera asking for Digest credentials, which plays two packets and ``then`` after PLAY."""

    def answer(script: Script, method: str, headers: dict[str, str]) -> bytes:
        if method == "DESCRIBE" and "authorization" not in headers:
            challenge = 'WWW-Authenticate: Digest realm="cam", nonce="abc", qop="auth"\r\n'
            return f"RTSP/1.0 401 Unauthorized\r\nCSeq: {headers['cseq']}\r\n{challenge}\r\n".encode()
        if method == "DESCRIBE":
            return ok(
                headers, "Content-Base: rtsp://127.0.0.1/live/\r\nContent-Type: application/sdp\r\n", SDP
            )
        if method == "SETUP":
            return ok(headers, session + "Transport: RTP/AVP/TCP;unicast;interleaved=4-5\r\n")
        if method == "PLAY":
            return (
                ok(headers)
                + interleaved(4, rtp(1))
                + interleaved(5, b"\x80\xc8")
                + interleaved(4, rtp(2))
                + then
            )
        return ok(headers)

    return answer


def played(script: Script, userinfo: str) -> tuple[VideoTrack, list[bytes]]:
    """The track a client opens on ``script`` and every video packet it yields until the server ends the
    stream (an RTCP BYE); the client is closed (TEARDOWN) after."""
    client = RtspClient(script.url(userinfo), 5.0, 5.0)
    track = client.open()
    packets: list[bytes] = []
    with pytest.raises(EndOfStream, match="the server ended the stream"):
        packets.extend(client.packets())
    client.close()
    return track, packets


def test_the_session_is_set_up_with_credentials_and_plays_the_interleaved_track(
    scripts: list[Script],
) -> None:
    script = Script(camera(then=interleaved(5, BYE)))
    scripts.append(script)
    track, packets = played(script, "admin:pw@")
    with script.got:
        script.got.wait_for(lambda: len(script.requests) == 5, 10)
    methods = [m for m, _, _ in script.requests]
    assert methods == ["DESCRIBE", "DESCRIBE", "SETUP", "PLAY", "TEARDOWN"]
    assert packets == [rtp(1), rtp(2)]  # the RTCP on channel 5 is not video
    (_, describe, first), (_, _, second), (_, setup_url, setup), (_, play_url, play), _ = script.requests
    assert describe == f"rtsp://127.0.0.1:{script.port}/live"  # the credentials are not in the request line
    assert "authorization" not in first
    assert re.match(
        r'Digest username="admin", realm="cam", nonce="abc", uri="rtsp://', second["authorization"]
    )
    assert setup_url == track.control == "rtsp://127.0.0.1/live/track1"
    assert setup["transport"] == "RTP/AVP/TCP;unicast;interleaved=0-1"
    assert play_url == "rtsp://127.0.0.1/live/"
    assert play["session"] == "12345678"
    assert "nc=00000003" in play["authorization"]  # a fresh count for each request with the nonce


def test_a_keep_alive_goes_out_within_the_sessions_timeout(scripts: list[Script]) -> None:
    def answer(script: Script, method: str, headers: dict[str, str]) -> bytes:
        if method == "OPTIONS":  # the stream goes on once the keep-alive came
            return ok(headers) + interleaved(4, rtp(3)) + interleaved(5, BYE)
        return camera("Session: 99;timeout=1\r\n")(script, method, headers)

    script = Script(answer)
    scripts.append(script)
    _, seen = played(script, "a:b@")  # two packets, then silence until the keep-alive
    assert seen == [rtp(1), rtp(2), rtp(3)]
    options = [h for m, _, h in script.requests if m == "OPTIONS"]
    assert options
    assert options[0]["session"] == "99"


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (
            b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n" + b"X-Filler: " + b"a" * (70 << 10),
            "over 65536 bytes of headers",
        ),
        (b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Length: 99999999\r\n\r\n", "a body of '99999999' bytes"),
        (b"RTSP/1.0 302 Moved\r\nCSeq: 1\r\nLocation: rtsp://elsewhere/\r\n\r\n", "302 Moved to DESCRIBE"),
        (b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Length: 3\r\n\r\nv=0", "no video track"),
    ],
)
def test_answers_it_does_not_take_say_why(scripts: list[Script], reply: bytes, words: str) -> None:
    script = Script(lambda script, method, headers: reply)
    scripts.append(script)
    client = RtspClient(script.url(), 5.0, 5.0)
    with pytest.raises(RtspProtocolError, match=words):
        client.open()
    client.close()


def test_a_camera_without_credentials_in_the_url_is_told_to_add_them(scripts: list[Script]) -> None:
    script = Script(camera())
    scripts.append(script)
    client = RtspClient(script.url(), 5.0, 5.0)
    with pytest.raises(RtspProtocolError, match="asks for a user and password"):
        client.open()
    client.close()


def test_a_stale_nonce_is_answered_afresh_without_giving_up(scripts: list[Script]) -> None:
    stale = {"sent": False}

    def answer(script: Script, method: str, headers: dict[str, str]) -> bytes:
        if method == "SETUP" and not stale["sent"]:
            stale["sent"] = True
            challenge = 'WWW-Authenticate: Digest realm="cam", nonce="def", qop="auth", stale=true\r\n'
            return f"RTSP/1.0 401 Unauthorized\r\nCSeq: {headers['cseq']}\r\n{challenge}\r\n".encode()
        return camera(then=interleaved(5, BYE))(script, method, headers)

    script = Script(answer)
    scripts.append(script)
    client = RtspClient(script.url("admin:pw@"), 5.0, 5.0)
    client.open()
    client.close()
    setups = [h["authorization"] for m, _, h in script.requests if m == "SETUP"]
    assert len(setups) == 2
    assert 'nonce="abc"' in setups[0]
    assert 'nonce="def"' in setups[1]
    assert "nc=00000001" in setups[1]  # the fresh nonce's first use


def test_a_request_from_the_server_is_skipped_even_when_its_first_bytes_come_alone(
    scripts: list[Script],
) -> None:
    request = b"SET_PARAMETER rtsp://127.0.0.1/live RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 0\r\n\r\n"

    def answer(script: Script, method: str, headers: dict[str, str]) -> bytes:
        if method != "PLAY":
            return camera()(script, method, headers)
        script.send(ok(headers) + interleaved(4, rtp(1)) + request[:5])
        time.sleep(0.2)  # the rest in a later segment: the client has seen only "SET_P"
        return request[5:] + interleaved(4, rtp(2)) + interleaved(5, BYE)

    script = Script(answer)
    scripts.append(script)
    _, seen = played(script, "a:b@")
    assert seen == [rtp(1), rtp(2)]
