"""A blocking RTSP client that plays one stream's H.264 or H.265 video over TCP and hands on its RTP packets.

It speaks what a player of a camera needs and no more: DESCRIBE (answering a Basic or Digest
challenge with the URL's credentials), SETUP of the first video track interleaved on the RTSP
connection (``RTP/AVP/TCP``), PLAY, a keep-alive within the session's timeout, and TEARDOWN. Every
socket operation has a deadline: ``open_timeout_s`` for each answer while the session is set up,
``read_timeout_s`` for each read while it plays. What a server sends is bounded (a header block, a body,
an interleaved frame), since a camera's address is all it takes to send anything.

Redirects are not followed: the URL configured is the one played, so a server cannot send streamer
to another host.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

from streamer.errors import EndOfStream
from streamer.redact import redact_url
from streamer.sources.rtp import (
    Challenge,
    RtspProtocolError,
    UnsupportedStream,
    VideoTrack,
    authorization,
    credentials,
    parse_challenges,
    rtcp_says_bye,
    video_track,
)

__all__ = ["RtspClient", "RtspTimeout"]

DEFAULT_PORT = 554
_STATUS_PREFIX = b"RTSP/"
_CLOSED = "the server closed the connection"
_MAX_HEAD = 64 << 10
_MAX_BODY = 1 << 20
_RECV = 256 << 10
_DEFAULT_SESSION_TIMEOUT_S = 60.0
_TEARDOWN_TIMEOUT_S = 0.5


class RtspTimeout(RtspProtocolError):
    """Raised when the server does not answer, or sends nothing, within the deadline."""


@dataclass(slots=True)
class _Response:
    status: int
    reason: str
    headers: dict[str, list[str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None


class RtspClient:
    """One playing session: ``open`` sets it up and returns the video track; ``packets`` yields the
    track's RTP packets until the server ends the stream (EndOfStream) or fails (RtspProtocolError)."""

    def __init__(self, url: str, open_timeout_s: float, read_timeout_s: float, audio: bool = False) -> None:
        """``audio``: the audio is wanted, which this client does not carry: a stream with an audio track
        is refused as UnsupportedStream before SETUP."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "rtsp" or not parts.hostname:
            raise RtspProtocolError(f"the RTP reader plays rtsp:// URLs, not {redact_url(url)!r}")
        self._host = parts.hostname
        self._port = parts.port or DEFAULT_PORT
        netloc = f"[{self._host}]" if ":" in self._host else self._host
        if parts.port:
            netloc += f":{parts.port}"
        self._url = urllib.parse.urlunsplit(("rtsp", netloc, parts.path or "/", parts.query, ""))
        self._credentials = credentials(url)
        self._open_timeout_s = open_timeout_s
        self._audio = audio
        self._read_timeout_s = read_timeout_s
        self._sock: socket.socket | None = None
        self._buffer = bytearray()
        self._cseq = 0
        self._auth: list[Challenge] = []
        self._nonce_count = 0
        self._session: str | None = None
        self._keepalive_s = _DEFAULT_SESSION_TIMEOUT_S / 2
        self._channel = 0
        self._rtcp_channel = 1
        self._track: VideoTrack | None = None

    def open(self) -> VideoTrack:
        """Connect, DESCRIBE, SETUP the first video track and PLAY it."""
        try:
            return self._open()
        except EndOfStream as exc:
            raise RtspProtocolError(str(exc)) from None

    def _open(self) -> VideoTrack:
        try:
            self._sock = socket.create_connection((self._host, self._port), timeout=self._open_timeout_s)
        except TimeoutError:
            raise RtspTimeout(f"no answer within {self._open_timeout_s:g} s (open_timeout_s)") from None
        except OSError as exc:
            raise RtspProtocolError(exc.strerror or type(exc).__name__) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        described = self._request("DESCRIBE", self._url, {"Accept": "application/sdp"})
        base = described.header("Content-Base") or described.header("Content-Location") or self._url
        track = video_track(described.body.decode("utf-8", "replace"), base)
        if track.audio and self._audio:
            raise UnsupportedStream("the camera sends audio, which FFmpeg's reader carries to the outputs")
        setup = self._request("SETUP", track.control, {"Transport": "RTP/AVP/TCP;unicast;interleaved=0-1"})
        session = setup.header("Session")
        if not session:
            raise RtspProtocolError("the server's answer to SETUP names no session")
        self._session, _, options = session.partition(";")
        self._session = self._session.strip()
        timeout = re.search(r"timeout\s*=\s*(\d+)", options)
        if timeout and int(timeout.group(1)) > 0:
            self._keepalive_s = int(timeout.group(1)) / 2
        channels = re.search(r"interleaved\s*=\s*(\d+)(?:-(\d+))?", setup.header("Transport") or "")
        if channels:
            self._channel = int(channels.group(1))
            self._rtcp_channel = int(channels.group(2)) if channels.group(2) else self._channel + 1
        self._request("PLAY", track.session_control, {"Range": "npt=0.000-"})
        self._track = track
        return track

    def packets(self) -> Iterator[bytes]:
        """The video track's RTP packets as they arrive; a keep-alive goes out when it is due, whether or
        not the server is sending."""
        assert self._track is not None
        keepalive_at = time.monotonic() + self._keepalive_s
        heard_at = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= keepalive_at:
                self._send("OPTIONS", self._url, {})
                keepalive_at = now + self._keepalive_s
            if not self._buffer:
                silent_for = heard_at + self._read_timeout_s - now
                if silent_for <= 0:
                    raise RtspTimeout(f"no data for {self._read_timeout_s} s")
                if not self._receive(min(silent_for, keepalive_at - now)):
                    continue
                heard_at = time.monotonic()
            if self._buffer[0] == 0x24:  # '$': an interleaved frame
                channel, data = self._take_frame(None, self._read_timeout_s)
                if channel == self._channel:
                    yield data
                elif channel == self._rtcp_channel and rtcp_says_bye(data):
                    raise EndOfStream("the server ended the stream")
            else:
                answer = self._read_message(None, self._read_timeout_s)  # a keep-alive's
                if answer is not None and answer.status == 401 and _stale(answer):
                    self._challenged(answer)  # the next keep-alive answers the fresh nonce

    def abort(self) -> None:
        """From another thread: shut the connection down, so a blocked read returns at once."""
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """TEARDOWN (without waiting for the answer) and close the connection."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._session is not None:
            with contextlib.suppress(OSError):
                sock.settimeout(_TEARDOWN_TIMEOUT_S)
                url = self._track.session_control if self._track is not None else self._url
                sock.sendall(self._message("TEARDOWN", url, {}))
        with contextlib.suppress(OSError):
            sock.close()

    def _request(self, method: str, url: str, headers: dict[str, str]) -> _Response:
        """Send a request and wait for its answer, answering one authentication challenge: the first,
        or one that says the nonce went stale."""
        self._send(method, url, headers)
        response = self._answer(method)
        if response.status == 401 and self._credentials is not None and (not self._auth or _stale(response)):
            self._challenged(response)
            self._send(method, url, headers)
            response = self._answer(method)
        if response.status == 401:
            if self._credentials is None:
                reason = "the server asks for a user and password (401 Unauthorized); put them in the URL"
            elif authorization(self._auth, method, url, "", "") is None:
                reason = "the server asks for an authentication other than Basic or Digest (401 Unauthorized)"
            else:
                reason = "the server refused the user and password in the URL (401 Unauthorized)"
            raise RtspProtocolError(reason)
        if response.status != 200:
            raise RtspProtocolError(f"the server answered {response.status} {response.reason} to {method}")
        return response

    def _challenged(self, response: _Response) -> None:
        """Answer the challenges of a 401 from now on, counting uses of its nonce afresh."""
        self._auth = parse_challenges(response.headers.get("www-authenticate", []))
        self._nonce_count = 0

    def _answer(self, method: str) -> _Response:
        while True:
            response = self._read_message("open_timeout_s", self._open_timeout_s)
            if response is not None:
                return response

    def _send(self, method: str, url: str, headers: dict[str, str]) -> None:
        assert self._sock is not None
        self._sock.settimeout(self._open_timeout_s)
        try:
            self._sock.sendall(self._message(method, url, headers))
        except TimeoutError:
            raise RtspTimeout(f"the server took no request within {self._open_timeout_s:g} s") from None
        except ConnectionError:
            raise RtspProtocolError(_CLOSED) from None
        except OSError as exc:
            raise RtspProtocolError(exc.strerror or type(exc).__name__) from None

    def _message(self, method: str, url: str, headers: dict[str, str]) -> bytes:
        self._cseq += 1
        lines = [f"{method} {url} RTSP/1.0", f"CSeq: {self._cseq}", "User-Agent: streamer"]
        if self._session is not None:
            lines.append(f"Session: {self._session}")
        if self._auth and self._credentials is not None:
            self._nonce_count += 1
            value = authorization(self._auth, method, url, *self._credentials, count=self._nonce_count)
            if value is not None:
                lines.append(f"Authorization: {value}")
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def _read_message(self, knob: str | None, timeout_s: float) -> _Response | None:
        """The next RTSP message: a response, or None for a request from the server (skipped) or an
        interleaved frame met while waiting for an answer (dropped: nothing plays yet)."""
        self._fill(1, knob, timeout_s)
        if self._buffer[0] == 0x24:
            self._take_frame(knob, timeout_s)
            return None
        self._fill(len(_STATUS_PREFIX), knob, timeout_s)
        start = bytes(self._buffer[: len(_STATUS_PREFIX)])  # a reply's, or a request's method
        if start != _STATUS_PREFIX and not re.fullmatch(rb"[A-Z_ ]+", start):
            raise RtspProtocolError("the server's answer is not RTSP")
        end = self._buffer.find(b"\r\n\r\n")
        while end < 0:
            if len(self._buffer) > _MAX_HEAD:
                raise RtspProtocolError(f"the server's answer has over {_MAX_HEAD} bytes of headers")
            self._fill(len(self._buffer) + 1, knob, timeout_s)
            end = self._buffer.find(b"\r\n\r\n")
        head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        status = re.fullmatch(r"RTSP/1\.\d (\d{3}) ?(.*)", head[0])
        request = re.fullmatch(r"[A-Z_]+ \S+ RTSP/1\.\d", head[0])
        if status is None and request is None:
            raise RtspProtocolError("the server's answer is not RTSP")
        headers: dict[str, list[str]] = {}
        for line in head[1:]:
            name, colon, value = line.partition(":")
            if colon:
                headers.setdefault(name.strip().lower(), []).append(value.strip())
        length_text = (headers.get("content-length") or ["0"])[0]
        if not length_text.isdigit() or int(length_text) > _MAX_BODY:
            raise RtspProtocolError(f"the server's answer states a body of {length_text[:20]!r} bytes")
        length = int(length_text)
        self._fill(length, knob, timeout_s)
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        if status is None:
            return None
        return _Response(int(status.group(1)), status.group(2), headers, body)

    def _take_frame(self, knob: str | None, timeout_s: float) -> tuple[int, bytes]:
        """The interleaved frame (``$``, channel, 16-bit length, data) the buffer starts with: its
        channel and data, read in full and taken off the buffer."""
        self._fill(4, knob, timeout_s)
        channel, size = self._buffer[1], int.from_bytes(self._buffer[2:4], "big")
        self._fill(4 + size, knob, timeout_s)
        data = bytes(self._buffer[4 : 4 + size])
        del self._buffer[: 4 + size]
        return channel, data

    def _fill(self, size: int, knob: str | None, timeout_s: float) -> None:
        """Read until the buffer holds ``size`` bytes, each read within ``timeout_s``; ``knob``: the
        setting a timeout names (None while the stream plays)."""
        while len(self._buffer) < size:
            if not self._receive(timeout_s):
                said = f"no answer within {timeout_s:g} s ({knob})" if knob else f"no data for {timeout_s} s"
                raise RtspTimeout(said)

    def _receive(self, timeout_s: float) -> bool:
        """One read into the buffer; False when nothing came within ``timeout_s``."""
        assert self._sock is not None
        self._sock.settimeout(timeout_s)
        try:
            chunk = self._sock.recv(_RECV)
        except TimeoutError:
            return False
        except ConnectionError:
            raise RtspProtocolError(_CLOSED) from None
        except OSError as exc:
            raise RtspProtocolError(exc.strerror or type(exc).__name__) from None
        if not chunk:
            raise EndOfStream(_CLOSED)
        self._buffer += chunk
        return True


def _stale(response: _Response) -> bool:
    """Whether a 401 says only that the nonce expired (Digest's ``stale=true``): the credentials stand."""
    return any(
        c.scheme == "digest" and c.params.get("stale", "").lower() == "true"
        for c in parse_challenges(response.headers.get("www-authenticate", []))
    )
