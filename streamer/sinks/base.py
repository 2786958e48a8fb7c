"""The sink port: ``open(info)``, ``send(frame)`` in presentation order, ``aclose()``.

Encoding blocks, so sinks do it off the event loop (``asyncio.to_thread``); ``send`` returns once the
frame is written, which is when the pipeline stamps its end-to-end latency.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamer.frame import Frame, StreamInfo

if TYPE_CHECKING:
    from streamer.media.audio import AudioTrack
    from streamer.sinks.encoder import EncodedFrame, Encoding, SharedEncoder

__all__ = ["OutputStats", "PacketSink", "Sink"]


@dataclass(frozen=True, slots=True)
class OutputStats:
    """One output of a stream that writes to several (``TeeSink``)."""

    name: str
    written: int
    dropped: int
    """Frames this output did not write: let go by a full queue (live streams only), sent while an RTSP
    output reconnected, or skipped while a shared encode's output waited for a keyframe."""
    depth: int
    capacity: int
    error: str | None
    shared: bool = False
    """Writes the packets of an encode shared with another output of the stream."""


class Sink(abc.ABC):
    live: bool = False
    """Read by players or recorders that time out when frames stop (RTSP, WHEP): the pipeline keeps
    its clock while the source is silent (``keepalive``). Files and the null sink are not."""

    @abc.abstractmethod
    async def open(self, info: StreamInfo) -> None:
        """Prepare for frames of this size and rate; raises SinkError when the target is unusable."""

    def attach_audio(self, track: AudioTrack) -> bool:
        """Offered the source's audio before ``open``: True when this sink will write it beside the
        video (it then takes or declines the track in ``open``); False, the default, writes video only."""
        return False

    @abc.abstractmethod
    async def send(self, frame: Frame) -> None:
        """Write one frame; frames come in index order with the source's PTS."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Flush and finalize so the output is valid; safe to call twice."""

    @property
    def frames_written(self) -> int:
        return 0

    @property
    def frames_dropped(self) -> int:
        """Frames sent to this sink that it did not write: an RTSP sink's while it reconnects, a shared
        encode's while an output waits for a keyframe."""
        return 0

    @property
    def reconnects(self) -> int:
        """Connections to its server opened after the first (an RTSP sink's; 0 for others)."""
        return 0

    def outputs(self) -> list[OutputStats] | None:
        """Each output's figures, for a sink that writes to several; None for one output."""
        return None


class PacketSink(Sink):
    """A sink that can also write the packets of an encode shared with other outputs (RTSP, files):
    outputs of one stream whose :meth:`encoding` is equal encode once (``TeeSink``)."""

    @abc.abstractmethod
    def encoding(self) -> Encoding | None:
        """The encode this sink does for itself; None when it cannot share one."""

    @abc.abstractmethod
    async def open_encoded(self, info: StreamInfo, encoder: SharedEncoder) -> None:
        """``open``, for the packets of ``encoder`` (already open) instead of frames."""

    @abc.abstractmethod
    async def send_encoded(self, encoded: EncodedFrame) -> None:
        """Write one frame's packets. After a gap in ``encoded.seq`` (frames this output lost) or a new
        connection, packets are dropped (counted) until a keyframe, which the sink asks the encoder for."""
