"""WHEP egress: the enhanced frames, published to the stream's players through the server's hub.

Players hold only the newest frame (:mod:`streamer.webrtc.playback`, whose names this module still
exports): a slow player skips frames, it never queues them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamer.frame import Frame, StreamInfo
from streamer.sinks.base import Sink
from streamer.webrtc.playback import RTP_CLOCK_RATE, FrameHub, PlayerTrack, RtpClock

if TYPE_CHECKING:
    from streamer.webrtc.server import WebRtcServer

__all__ = ["RTP_CLOCK_RATE", "FrameHub", "PlayerTrack", "RtpClock", "WhepSink"]


class WhepSink(Sink):
    """Sends the pipeline's output to the WHEP players of ``stream_id`` on ``server``.

    The stream is playable from construction (``POST /whep/{stream_id}``), before the pipeline opens
    the sink, so a viewer may connect first and receive frames as soon as they come.
    """

    live = True

    def __init__(self, server: WebRtcServer, stream_id: str = "0") -> None:
        self.stream_id = stream_id
        self._server = server
        self._hub = server.declare_playback(stream_id)
        self._written = 0
        self._closed = False

    @property
    def frames_written(self) -> int:
        """Frames handed to the players there were at the time (none, one or many)."""
        return self._written

    @property
    def hub(self) -> FrameHub:
        return self._hub

    async def open(self, info: StreamInfo) -> None:
        return None

    async def send(self, frame: Frame) -> None:
        self._hub.publish(frame)
        self._written += 1

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._server.release_playback(self.stream_id)
