"""The pure parts of reading H.264 or H.265 from an RTSP server: the session description, the
credentials, and RTP packets put back together into whole frames.

:class:`Depacketizer` hands on an access unit (one frame's NAL units, Annex B) the moment its last
packet arrives, which the sender marks with the RTP marker bit (RFC 6184 5.1, RFC 7798 4.1); a reader
that instead waits for the next frame to begin holds every frame one frame period. H.264's single NAL
unit packets, STAP-A and FU-A (non-interleaved mode, what cameras and servers send) are taken apart by
aiortc (a dependency for WebRTC); H.265's single NAL unit packets, aggregation packets and
fragmentation units (without decoding order numbers) here.

Nothing here touches a socket: :mod:`streamer.sources.rtsp_client` does, with these.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import struct
import urllib.parse
from dataclasses import dataclass
from fractions import Fraction

from aiortc.codecs.h264 import H264PayloadDescriptor
from aiortc.rtp import RtpPacket

from streamer.errors import SourceError
from streamer.media.sdp import attribute, media_sections, payloads, session_lines, video_section

__all__ = [
    "START_CODE",
    "AccessUnit",
    "Challenge",
    "Depacketizer",
    "RtspProtocolError",
    "UnsupportedStream",
    "VideoTrack",
    "authorization",
    "credentials",
    "h264_payload",
    "h265_payload",
    "parse_challenges",
    "rtcp_says_bye",
    "video_track",
]

START_CODE = b"\x00\x00\x00\x01"
_RTCP_BYE = 203
_MAX_ACCESS_UNIT = 16 << 20
"""Bytes one frame may grow to before it is dropped as damage: a 4K intra frame is well below it."""


class RtspProtocolError(SourceError):
    """Raised when an RTSP server's answer breaks the protocol or describes nothing streamer can play."""


class UnsupportedStream(RtspProtocolError):
    """Raised when the server's video is a codec or packetization the RTP reader does not read."""


@dataclass(frozen=True, slots=True)
class VideoTrack:
    """The first video track of a session description, as an RTP reader needs it."""

    codec: str
    """FFmpeg's decoder for it: ``h264`` or ``hevc``."""
    control: str
    """The URL to SETUP the track on."""
    session_control: str
    """The URL to PLAY (the whole session's)."""
    payload_type: int
    clock_rate: int
    parameter_sets: bytes
    """The parameter sets the description gives (H.264's ``sprop-parameter-sets``, H.265's
    ``sprop-vps``, ``-sps`` and ``-pps``), Annex B; empty without them."""
    fps: Fraction | None
    """From ``a=framerate``, when stated."""
    audio: bool
    """The description also has an audio track."""


def _resolve(base: str, control: str) -> str:
    if control == "*" or not control:
        return base
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", control):
        return control
    return base.rstrip("/") + "/" + control


_SETS = {"h264": ("sprop-parameter-sets",), "hevc": ("sprop-vps", "sprop-sps", "sprop-pps")}


def video_track(sdp: str, base: str) -> VideoTrack:
    """The first ``m=video`` section of ``sdp`` and its first H.264 or H.265 format, its control URL
    resolved against ``base``.

    Raises RtspProtocolError when there is no video track, UnsupportedStream when it has neither codec
    in a packetization the reader takes (H.264 modes 0 and 1; H.265 without decoding order numbers).
    """
    section = video_section(sdp)
    if section is None:
        raise RtspProtocolError("the stream has no video track")
    formats = payloads(section)
    chosen = next((f for f in formats if f.h264 or f.h265), None)
    if chosen is None:
        names = ", ".join(dict.fromkeys(f.name or f"payload type {f.payload_type}" for f in formats))
        stated = names or "of no stated format"
        raise UnsupportedStream(f"the stream's video is {stated}, not H.264 or H.265")
    codec = "h264" if chosen.h264 else "hevc"
    if codec == "h264" and chosen.parameters.get("packetization-mode", "0") not in ("0", "1"):
        raise UnsupportedStream("the stream's H.264 is interleaved (packetization-mode 2)")
    if codec == "hevc" and chosen.parameters.get("sprop-max-don-diff", "0") != "0":
        raise UnsupportedStream("the stream's H.265 carries decoding order numbers (sprop-max-don-diff)")
    sets = b""
    for name in _SETS[codec]:
        for item in chosen.parameters.get(name, "").split(","):
            if item:
                try:
                    sets += START_CODE + base64.b64decode(item, validate=True)
                except (binascii.Error, ValueError):
                    raise RtspProtocolError(f"the stream's {name} are not base64") from None
    try:
        fps: Fraction | None = Fraction(attribute(section, "framerate") or "")
    except (ValueError, ZeroDivisionError):
        fps = None
    return VideoTrack(
        codec=codec,
        control=_resolve(base, attribute(section, "control") or "*"),
        session_control=_resolve(base, attribute(session_lines(sdp), "control") or "*"),
        payload_type=chosen.payload_type,
        clock_rate=chosen.clock_rate,
        parameter_sets=sets,
        fps=fps if fps is not None and fps > 0 else None,
        audio=any(s[0].startswith("m=audio ") for s in media_sections(sdp)),
    )


@dataclass(frozen=True, slots=True)
class Challenge:
    """One ``WWW-Authenticate`` challenge: its scheme (``basic`` or ``digest``) and parameters."""

    scheme: str
    params: dict[str, str]


def parse_challenges(headers: list[str]) -> list[Challenge]:
    """Each ``WWW-Authenticate`` header value as a challenge (one per header, as RTSP servers send them)."""
    challenges = []
    for value in headers:
        scheme, _, rest = value.strip().partition(" ")
        params = {
            key.lower(): quoted if quoted else bare
            for key, quoted, bare in re.findall(r'(\w+)\s*=\s*(?:"([^"]*)"|([^\s,]+))', rest)
        }
        challenges.append(Challenge(scheme.lower(), params))
    return challenges


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def authorization(
    challenges: list[Challenge], method: str, uri: str, user: str, password: str, count: int = 1
) -> str | None:
    """The ``Authorization`` value answering the strongest challenge streamer speaks (Digest with MD5,
    then Basic), or None when it speaks none of them. ``count``: this nonce's use (Digest's ``nc``)."""
    for challenge in challenges:
        params = challenge.params
        if challenge.scheme != "digest" or params.get("algorithm", "MD5").upper() != "MD5":
            continue
        realm, nonce = params.get("realm", ""), params.get("nonce", "")
        ha1 = _md5(f"{user}:{realm}:{password}")
        ha2 = _md5(f"{method}:{uri}")
        fields = [f'username="{user}"', f'realm="{realm}"', f'nonce="{nonce}"', f'uri="{uri}"']
        if "auth" in [q.strip() for q in params.get("qop", "").split(",")]:
            cnonce, nc = os.urandom(8).hex(), f"{count:08x}"
            response = _md5(f"{ha1}:{nonce}:{nc}:{cnonce}:auth:{ha2}")
            fields += ["qop=auth", f"nc={nc}", f'cnonce="{cnonce}"']
        else:
            response = _md5(f"{ha1}:{nonce}:{ha2}")
        fields.append(f'response="{response}"')
        if "opaque" in params:
            fields.append(f'opaque="{params["opaque"]}"')
        return "Digest " + ", ".join(fields)
    if any(challenge.scheme == "basic" for challenge in challenges):
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return None


def credentials(url: str) -> tuple[str, str] | None:
    """The user and password an rtsp:// URL carries, percent-decoded; None without them."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return None
    return urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")


def rtcp_says_bye(data: bytes) -> bool:
    """Whether a compound RTCP packet holds a BYE: the sender has ended the stream."""
    pos = 0
    while pos + 4 <= len(data):
        first, kind, words = struct.unpack_from("!BBH", data, pos)
        if first >> 6 != 2:
            return False
        if kind == _RTCP_BYE:
            return True
        pos += 4 * (words + 1)
    return False


@dataclass(frozen=True, slots=True)
class AccessUnit:
    """One frame's NAL units, Annex B, with its RTP timestamp unwrapped from the first one seen."""

    data: bytes
    timestamp: int
    damaged: bool
    """A packet of it was lost or malformed: the decoder conceals what it can, the next keyframe repairs."""


def h264_payload(data: bytes) -> tuple[bool, bytes]:
    """One H.264 RTP payload (RFC 6184) as Annex B, and whether it starts a NAL unit (aiortc's reading)."""
    descriptor, payload = H264PayloadDescriptor.parse(data)
    return descriptor.first_fragment, payload


def h265_payload(data: bytes) -> tuple[bool, bytes]:
    """One H.265 RTP payload (RFC 7798, without decoding order numbers) as Annex B, and whether it
    starts a NAL unit: a single NAL unit, an aggregation packet (48) or a fragmentation unit (49).
    Raises ValueError for a truncated payload or another type."""
    if len(data) < 3:
        raise ValueError("NAL unit is too short")
    kind = (data[0] >> 1) & 0x3F
    if kind < 48:
        return True, START_CODE + data
    if kind == 48:
        out, pos = [], 2
        while pos < len(data):
            size = int.from_bytes(data[pos : pos + 2], "big")
            pos += 2
            if size == 0 or pos + size > len(data):
                raise ValueError("aggregation packet is truncated")
            out += [START_CODE, data[pos : pos + size]]
            pos += size
        return True, b"".join(out)
    if kind == 49:
        start, fu_type = bool(data[2] & 0x80), data[2] & 0x3F
        if start:
            return True, START_CODE + bytes([(data[0] & 0x81) | (fu_type << 1), data[1]]) + data[3:]
        return False, data[3:]
    raise ValueError(f"NAL unit type {kind} is not supported")


_PAYLOADS = {"h264": h264_payload, "hevc": h265_payload}


class Depacketizer:
    """RTP packets of one H.264 or H.265 stream in, whole access units out, each as soon as its last
    packet came.

    The marker bit closes a frame; a sender that never sets it still has each frame closed when the
    next one's first packet (a new timestamp) arrives. A gap in the sequence numbers marks the frame in
    hand as damaged. ``parameter_sets`` (from the session description) go before the first frame, so a
    stream whose keyframes do not repeat them still decodes.
    """

    def __init__(self, payload_type: int, parameter_sets: bytes = b"", codec: str = "h264") -> None:
        """``codec``: ``h264`` or ``hevc``, as :attr:`VideoTrack.codec` names it."""
        self.payload_type = payload_type
        self._payload = _PAYLOADS[codec]
        self._prefix = parameter_sets
        self._parts: list[bytes] = []
        self._size = 0
        self._timestamp: int | None = None
        self._damaged = False
        self._next_sequence: int | None = None
        self._last_raw: int | None = None
        self._unwrapped = 0

    def push(self, data: bytes) -> list[AccessUnit]:
        """The access units that ``data`` (one RTP packet) completes: none, one, or two when it both
        begins a frame whose predecessor lacked its marker and is itself the last of its frame."""
        try:
            packet = RtpPacket.parse(data)
        except ValueError:
            self._damaged = True
            return []
        if packet.payload_type != self.payload_type:
            return []
        done: list[AccessUnit] = []
        if self._next_sequence is not None and packet.sequence_number != self._next_sequence:
            self._damaged = True
        self._next_sequence = (packet.sequence_number + 1) & 0xFFFF
        timestamp = self._unwrap(packet.timestamp)
        if self._parts and timestamp != self._timestamp:
            done.append(self._close())
        self._timestamp = timestamp
        try:
            starts, payload = self._payload(packet.payload)
        except ValueError:
            self._damaged = True
        else:
            if not (starts or self._parts):
                self._damaged = True  # a fragment whose start was lost
            else:
                self._parts.append(payload)
                self._size += len(payload)
                if self._size > _MAX_ACCESS_UNIT:
                    self._parts, self._size, self._damaged = [], 0, True
        if packet.marker and self._parts:
            done.append(self._close())
        return done

    def _close(self) -> AccessUnit:
        assert self._timestamp is not None
        data = b"".join([self._prefix, *self._parts])
        unit = AccessUnit(data, self._timestamp, self._damaged)
        self._prefix = b""
        self._parts, self._size, self._damaged = [], 0, False
        return unit

    def _unwrap(self, raw: int) -> int:
        """32-bit RTP time made monotonic across wraps (each step taken as the shorter way round the
        circle), counted from the first packet."""
        if self._last_raw is not None:
            self._unwrapped += (raw - self._last_raw + (1 << 31)) % (1 << 32) - (1 << 31)
        self._last_raw = raw
        return self._unwrapped
