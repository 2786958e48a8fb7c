"""A WebRTC video frame handed to its decoder as its last packet arrives, not a frame period later.

aiortc's receiver assembles a video frame once a packet of the *next* frame arrives: its jitter buffer
closes a frame on a change of RTP timestamp and does not read the marker bit, which every WebRTC sender
sets on a frame's last packet. So each WHIP frame waited a frame period (33 ms at 30 fps) before it was
decoded, the same wait FFmpeg's RTSP reader has (``streamer.sources.rtp``). :class:`MarkerJitterBuffer`
closes a frame as soon as the packets from its first to the marked one are all there, and still on a
new timestamp for a sender that never marks; :func:`release_on_marker` gives a receiver one. Loss,
reordering, retransmission and the picture-loss requests stay aiortc's.
"""

from __future__ import annotations

import functools
import logging

from aiortc import RTCRtpReceiver
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtp import RtpPacket

__all__ = ["VIDEO_CAPACITY", "MarkerJitterBuffer", "release_on_marker"]

log = logging.getLogger(__name__)

VIDEO_CAPACITY = 512
"""Packets held per video receiver, as aiortc's own video jitter buffer holds."""

_BUFFER = "_RTCRtpReceiver__jitter_buffer"
"""Where aiortc's receiver keeps its jitter buffer (a private attribute: checked, not assumed)."""


class MarkerJitterBuffer(JitterBuffer):
    """aiortc's jitter buffer, but a frame leaves on its marker bit once no packet before it is missing."""

    def __init__(self, capacity: int = VIDEO_CAPACITY) -> None:
        super().__init__(capacity, is_video=True)

    def _remove_frame(self, sequence_number: int) -> JitterFrame | None:
        """The oldest frame, once complete: the packets from the buffer's origin up to a marked one, or
        up to the first of a later timestamp (a sender that does not mark); None while one is missing."""
        assert self._origin is not None  # set by the first ``add``
        packets: list[RtpPacket] = []
        for count in range(self.capacity):
            packet = self._packets[(self._origin + count) % self.capacity]
            if packet is None:
                return None
            if packets and packet.timestamp != packets[0].timestamp:
                return self._take(packets, count)
            packets.append(packet)
            if packet.marker:
                return self._take(packets, count + 1)
        return None

    def _take(self, packets: list[RtpPacket], count: int) -> JitterFrame:
        self.remove(count)
        data = b"".join(p._data for p in packets)  # type: ignore[attr-defined]  # set by aiortc's depayloader
        return JitterFrame(data=data, timestamp=packets[0].timestamp)


def release_on_marker(receiver: RTCRtpReceiver) -> bool:
    """Give a video ``receiver`` a :class:`MarkerJitterBuffer`, before its first packet; False (said
    once in the log) where this aiortc keeps its buffer elsewhere, and frames then wait for the next."""
    if not isinstance(getattr(receiver, _BUFFER, None), JitterBuffer):
        _unsupported()
        return False
    setattr(receiver, _BUFFER, MarkerJitterBuffer())
    return True


@functools.cache
def _unsupported() -> None:
    log.warning(
        "this aiortc keeps no jitter buffer where streamer looks for it: WebRTC frames are decoded when "
        "the next frame's first packet arrives, a frame period late"
    )
