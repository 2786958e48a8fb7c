"""Session descriptions (SDP, RFC 8866) as streamer reads them: the session's own lines, the media
sections, a section's payload formats (``a=rtpmap`` and ``a=fmtp``) and its attributes.

WHIP ingest reads a publisher's offer with these (:mod:`streamer.webrtc.codecs`), the RTSP reader a
camera's DESCRIBE answer (:mod:`streamer.sources.rtp`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "FMTP",
    "Payload",
    "attribute",
    "media_sections",
    "payloads",
    "session_lines",
    "video_section",
]

_RTPMAP = re.compile(r"a=rtpmap:([0-9]{1,3}) ([^/\s]{1,32})/([0-9]{1,6})")
FMTP = re.compile(r"a=fmtp:([0-9]{1,3}) ")
"""An ``a=fmtp`` line's start, its payload type the first group."""


@dataclass(frozen=True, slots=True)
class Payload:
    """One payload format of a media section: its ``a=rtpmap`` and ``a=fmtp`` lines."""

    payload_type: int
    name: str
    """The encoding name as offered ("H264", "VP8"); empty without an rtpmap line."""
    clock_rate: int
    parameters: Mapping[str, str]
    """fmtp parameters, names lower-cased."""

    @property
    def h264(self) -> bool:
        """Whether it is H.264 (whatever its profile or packetization)."""
        return self.name.upper() == "H264" and self.clock_rate == 90000

    @property
    def h265(self) -> bool:
        """Whether it is H.265 (whatever its profile)."""
        return self.name.upper() == "H265" and self.clock_rate == 90000


def session_lines(sdp: str) -> list[str]:
    """The stripped lines before the first m-section: the session's own."""
    lines = []
    for line in sdp.splitlines():
        if line.strip().startswith("m="):
            break
        lines.append(line.strip())
    return lines


def media_sections(sdp: str) -> list[list[str]]:
    """The m-sections of ``sdp``, each its stripped lines from the m-line on."""
    sections: list[list[str]] = []
    for line in sdp.splitlines():
        line = line.strip()
        if line.startswith("m="):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
    return sections


def video_section(sdp: str) -> list[str] | None:
    """The first video m-section of ``sdp``, as :func:`media_sections` has it."""
    return next((s for s in media_sections(sdp) if s[0].startswith("m=video ")), None)


def payloads(section: Sequence[str]) -> list[Payload]:
    """The payload formats of an m-section (as :func:`media_sections` gives it), in the m-line's order."""
    rtpmaps: dict[int, tuple[str, int]] = {}
    fmtps: dict[int, dict[str, str]] = {}
    for line in section[1:]:
        if (rtpmap := _RTPMAP.match(line)) is not None:
            rtpmaps[int(rtpmap[1])] = (rtpmap[2], int(rtpmap[3]))
        elif (fmtp := FMTP.match(line)) is not None:
            pairs = (p.split("=", 1) for p in line[fmtp.end() :].split(";") if "=" in p)
            fmtps[int(fmtp[1])] = {k.strip().lower(): v.strip() for k, v in pairs}
    formats = []
    for token in section[0].split()[3:]:
        if re.fullmatch(r"[0-9]{1,3}", token):
            pt = int(token)
            name, clock_rate = rtpmaps.get(pt, ("", 0))
            formats.append(Payload(pt, name, clock_rate, fmtps.get(pt, {})))
    return formats


def attribute(lines: Sequence[str], name: str) -> str | None:
    """The value of the first ``a=NAME:VALUE`` line among ``lines``; None without one."""
    prefix = f"a={name}:"
    return next((line[len(prefix) :].strip() for line in lines if line.startswith(prefix)), None)
