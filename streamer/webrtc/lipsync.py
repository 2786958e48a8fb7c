"""A WHIP publisher's audio on its video's timeline, as players do it: by RTCP sender reports.

Each RTP stream starts its timestamps at a random value on a clock of its own (90 kHz video, 48 kHz
Opus); only the sender's reports, which pair an RTP timestamp with the sender's wall clock (NTP), say
which audio sample was captured with which frame. :class:`SenderClock` keeps one stream's latest pair;
:class:`LipSync` maps an audio timestamp through the sender's wall clock to the video's RTP timeline,
which the WHIP source's frames keep as their PTS. Arrival times would not do: aiortc's audio jitter
buffer holds four packets before it plays any, its video buffer one frame, so arrival puts sound tens
of milliseconds late. Pure: the server feeds it the reports (:func:`listen`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiortc.rtp import RtcpSrPacket

if TYPE_CHECKING:
    from aiortc import RTCRtpReceiver
    from aiortc.rtp import AnyRtcpPacket

__all__ = ["LipSync", "SenderClock", "listen", "rtp_delta"]

_WRAP = 1 << 32


def _ntp_seconds(ntp: int) -> float:
    """A 64-bit NTP timestamp (32.32 fixed point) in seconds."""
    return (ntp >> 32) + (ntp & 0xFFFFFFFF) / _WRAP


def rtp_delta(a: int, b: int) -> int:
    """``a - b`` for 32-bit RTP timestamps that may have wrapped, as the nearer signed distance."""
    d = (a - b) % _WRAP
    return d - _WRAP if d >= _WRAP // 2 else d


class SenderClock:
    """One RTP stream's timestamps in its sender's wall-clock seconds, from its latest report."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._report: tuple[float, int] | None = None

    @property
    def known(self) -> bool:
        return self._report is not None

    def report(self, ntp: int, rtp: int) -> None:
        """A sender report: the sender's clock read ``ntp`` (64-bit NTP) when its timestamp was ``rtp``."""
        self._report = (_ntp_seconds(ntp), rtp)

    def wall(self, rtp: int) -> float | None:
        """The sender's wall-clock seconds at timestamp ``rtp``; None before the first report."""
        if self._report is None:
            return None
        wall, at = self._report
        return wall + rtp_delta(rtp, at) / self.rate

    def timestamp(self, wall: float) -> int | None:
        """The timestamp this stream's clock read at the sender's ``wall`` seconds, unwrapped from the
        report's (so it follows on from the value the frames carry); None before the first report."""
        if self._report is None:
            return None
        seconds, at = self._report
        return at + round((wall - seconds) * self.rate)


class LipSync:
    """Puts a publisher's audio timestamps on its video's RTP timeline, through both streams' reports."""

    def __init__(self, video_rate: int = 90_000, audio_rate: int = 48_000) -> None:
        self.video = SenderClock(video_rate)
        self.audio = SenderClock(audio_rate)

    def audio_on_video(self, audio_rtp: int) -> int | None:
        """The video timestamp captured with audio timestamp ``audio_rtp``; None until both streams
        have reported."""
        wall = self.audio.wall(audio_rtp)
        return None if wall is None else self.video.timestamp(wall)


_MAPPER = "_RTCRtpReceiver__timestamp_mapper"
"""aiortc's per-receiver map from RTP timestamps to the frames' PTS: the first frame's timestamp is 0."""


def listen(receiver: RTCRtpReceiver, clock: SenderClock) -> None:
    """Feed ``clock`` the sender reports ``receiver`` gets, their RTP timestamps moved to the frames'
    PTS. aiortc reads the reports but keeps only their wall-clock half, and counts its frames' PTS from
    the first frame's RTP timestamp, neither of which it exposes: its RTCP handler is wrapped (the
    reports still reach it unchanged) and its timestamp map read. A report before the first frame, which
    has no PTS to map to yet, is skipped; the sender repeats them every second or so."""
    handle = receiver._handle_rtcp_packet

    async def spy(packet: AnyRtcpPacket) -> None:
        mapper = getattr(receiver, _MAPPER, None)
        origin, last = getattr(mapper, "_origin", None), getattr(mapper, "_last", None)
        if isinstance(packet, RtcpSrPacket) and isinstance(origin, int) and isinstance(last, int):
            # the report's timestamp is near the last frame's: map it by its distance from that one
            pts = last - origin + rtp_delta(packet.sender_info.rtp_timestamp, last)
            clock.report(packet.sender_info.ntp_timestamp, pts)
        await handle(packet)

    receiver._handle_rtcp_packet = spy  # type: ignore[method-assign]
