"""The video codecs WHIP ingest takes, and how an offer of any of them gets answered by aiortc.

aiortc negotiates H.264 only in the two profiles its own encoder produces (42001f Baseline and 42e01f
Constrained Baseline, ``aiortc.codecs.CODECS``), matching an offer by profile: a High-profile offer, as
OBS, GStreamer and many cameras send, fails with "Failed to set remote video description send
parameters". Receiving needs no such limit, since aiortc decodes H.264 with FFmpeg, which takes every
profile in :data:`ACCEPTED`. So :func:`relabel_h264` shows aiortc each such format as Constrained
Baseline and :meth:`Relabelled.answer` puts each format's offered profile-level-id back into the answer,
as RFC 6184 asks of an answer (the offer's profile; any level, FFmpeg has none it cannot take).
aiortc's codec list is left alone, so what WHEP players are offered and sent does not change.

A WHEP player's offer is cut by :func:`shared_h264_offer` to its H.264 formats that play the one
Constrained Baseline stream its players share (``streamer.webrtc.shared_h264``), so aiortc answers H.264
even where the player lists VP8 first, as browsers do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from streamer.media.sdp import FMTP, Payload, media_sections, payloads

__all__ = [
    "ACCEPTED",
    "Format",
    "Relabelled",
    "h264_profile",
    "refusal",
    "relabel_h264",
    "shared_h264_offer",
    "video_formats",
]

ACCEPTED = (
    "VP8, or H.264 with packetization-mode=1 in profile Constrained Baseline (42e0xx, 42c0xx), "
    "Baseline (4200xx), Main (4d00xx, 4d40xx), High (6400xx) or Constrained High (640cxx)"
)
"""What a WHIP offer's video must include, as a refusal names it."""

_H264_PROFILES: tuple[tuple[int, str, str], ...] = (
    (0x42, "x1xx0000", "Constrained Baseline"),
    (0x4D, "1xxx0000", "Constrained Baseline"),
    (0x58, "11xx0000", "Constrained Baseline"),
    (0x42, "x0xx0000", "Baseline"),
    (0x58, "10xx0000", "Baseline"),
    (0x4D, "0x0x0000", "Main"),
    (0x64, "00000000", "High"),
    (0x64, "00001100", "Constrained High"),
)
"""(profile_idc, profile-iop bits with x for either, profile), as libwebrtc's and aiortc's tables have them.
High 10, 4:2:2 and 4:4:4 are left out: FFmpeg decodes them, but WebRTC publishers do not send them and
nothing here is tested with frames that are not 8-bit 4:2:0."""

_AIORTC_H264 = "packetization-mode=1;profile-level-id=42e01f"
"""The fmtp aiortc is shown for every H.264 format it is to answer: Constrained Baseline, its own."""

_NOT_CODECS = frozenset({"RTX", "RED", "ULPFEC", "FLEXFEC-03"})
"""Formats that repair or resend another one, left out when a refusal lists what an offer has."""

_SHARED_PROFILES = ("Constrained Baseline", "Baseline")
"""Profiles whose decoders play the shared stream (Constrained Baseline), as aiortc sends them."""
_PAYLOAD_LINE = re.compile(r"a=(?:rtpmap|fmtp|rtcp-fb):([0-9]{1,3})[ \t]")

_ANSWER_PROFILE = re.compile(r"a=fmtp:([0-9]{1,3}) .*profile-level-id=([0-9A-Fa-f]{6})")


def h264_profile(profile_level_id: str) -> str | None:
    """The profile an H.264 profile-level-id names if ingest decodes it (any level), else None."""
    if not re.fullmatch(r"[0-9A-Fa-f]{6}", profile_level_id):
        return None
    idc, iop = int(profile_level_id[:2], 16), int(profile_level_id[2:4], 16)
    for profile_idc, bits, profile in _H264_PROFILES:
        if profile_idc == idc and all(b == "x" or int(b) == (iop >> (7 - i)) & 1 for i, b in enumerate(bits)):
            return profile
    return None


@dataclass(frozen=True, slots=True)
class Format(Payload):
    """One payload format of a video m-section, as WHIP ingest judges and names it."""

    @property
    def decodable(self) -> bool:
        """Whether ingest takes it: one of :data:`ACCEPTED` (no profile-level-id counts as 42e01f)."""
        if self.name.upper() == "VP8":
            return self.clock_rate == 90000
        profile = self.parameters.get("profile-level-id", "42e01f")
        return self.h264 and self.parameters.get("packetization-mode") == "1" and bool(h264_profile(profile))

    def __str__(self) -> str:
        if not self.name:
            return f"payload type {self.payload_type}"
        if not self.h264:
            return self.name
        text = self.name
        profile_level_id = self.parameters.get("profile-level-id")
        if profile_level_id is not None:
            profile = h264_profile(profile_level_id)
            text += f" {profile_level_id}" + (f" ({profile})" if profile else "")
        mode = self.parameters.get("packetization-mode", "0")
        return text if mode == "1" else f"{text} packetization-mode={mode}"


def video_formats(section: Sequence[str]) -> list[Format]:
    """The formats of an m-section (as :func:`~streamer.media.sdp.media_sections` gives it), in the
    offer's order."""
    return [Format(p.payload_type, p.name, p.clock_rate, p.parameters) for p in payloads(section)]


def refusal(formats: Sequence[Format]) -> str:
    """Why ingest cannot take a video m-section with only ``formats``, naming what it would take."""
    offered = list(dict.fromkeys(str(f) for f in formats if f.name.upper() not in _NOT_CODECS))
    listed = ", ".join(offered[:8]) if offered else "none"
    if len(offered) > 8:
        listed += ", …"
    return f"the offer's video has no codec this server decodes (it offers {listed}); offer {ACCEPTED}"


@dataclass(frozen=True, slots=True)
class Relabelled:
    """A WHIP offer as aiortc is shown it, and the profile-level-ids it no longer shows."""

    sdp: str
    offered: Mapping[tuple[int, int], str]
    """(m-section index, payload type) -> the profile-level-id the publisher offered."""

    def answer(self, sdp: str) -> str:
        """aiortc's answer to :attr:`sdp`, with each H.264 format's offered profile-level-id put back."""
        lines = []
        for index, line in _by_section(sdp):
            match = _ANSWER_PROFILE.match(line)
            value = self.offered.get((index, int(match[1]))) if match is not None else None
            if match is not None and value is not None:
                line = line[: match.start(2)] + value + line[match.end(2) :]
            lines.append(line)
        return "".join(lines)


def relabel_h264(offer: str) -> Relabelled:
    """``offer`` with the fmtp of each H.264 format ingest decodes made the one aiortc answers."""
    chosen: set[tuple[int, int]] = set()
    offered: dict[tuple[int, int], str] = {}
    for index, section in enumerate(media_sections(offer)):
        if section[0].startswith("m=video "):
            for f in video_formats(section):
                if f.h264 and f.decodable:
                    chosen.add((index, f.payload_type))
                    if "profile-level-id" in f.parameters:
                        offered[(index, f.payload_type)] = f.parameters["profile-level-id"]
    return Relabelled("".join(_refmtp(offer, chosen)), offered)


def _refmtp(offer: str, chosen: set[tuple[int, int]]) -> Iterator[str]:
    for index, line in _by_section(offer):
        fmtp = FMTP.match(line.lstrip())
        if fmtp is not None and (index, int(fmtp[1])) in chosen:
            line = f"a=fmtp:{fmtp[1]} {_AIORTC_H264}{_ending(line)}"
        yield line


def _by_section(sdp: str) -> Iterator[tuple[int, str]]:
    """Each line of ``sdp``, its ending kept, beside the index of its m-section (-1: the session's)."""
    index = -1
    for line in sdp.splitlines(keepends=True):
        index += line.lstrip().startswith("m=")
        yield index, line


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def shared_h264_offer(offer: str) -> str | None:
    """A WHEP ``offer`` with its first video m-section cut to the H.264 formats the shared stream plays
    on (packetization-mode 1, Constrained Baseline or Baseline) and their retransmission formats, so
    aiortc answers with one of them; None where it offers none (the player then gets its own encoder)."""
    sections = media_sections(offer)
    video = next((i for i, s in enumerate(sections) if s[0].startswith("m=video ")), None)
    if video is None:
        return None
    formats = video_formats(sections[video])
    kept = {
        f.payload_type
        for f in formats
        if f.h264
        and f.parameters.get("packetization-mode") == "1"
        and h264_profile(f.parameters.get("profile-level-id", "42e01f")) in _SHARED_PROFILES
    }
    if not kept:
        return None
    kept |= {f.payload_type for f in formats if f.name.upper() == "RTX" and _apt(f) in kept}
    return "".join(_cut(offer, video, kept))


def _apt(f: Format) -> int | None:
    apt = f.parameters.get("apt", "")
    return int(apt) if apt.isdigit() else None


def _cut(sdp: str, section: int, kept: set[int]) -> Iterator[str]:
    """``sdp``'s lines, m-section ``section`` keeping only the payload types ``kept``."""
    for index, line in _by_section(sdp):
        bare = line.strip()
        if index == section:
            if bare.startswith("m="):
                fields = bare.split()
                types = [t for t in fields[3:] if not t.isdigit() or int(t) in kept]
                line = " ".join(fields[:3] + types) + _ending(line)
            elif (match := _PAYLOAD_LINE.match(bare)) is not None and int(match[1]) not in kept:
                continue
        yield line
