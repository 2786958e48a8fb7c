"""A source's audio on its way from the demuxer to a sink: packets, never decoded on the way.

A file or RTSP source demuxes its first audio stream beside the video (one demux, in its decode thread)
and queues the audio packets in an :class:`AudioTrack`; a file or RTSP sink takes them in its encode
threads and muxes each before the first video frame that does not start earlier. Every packet keeps
its own timing, so a video frame the pipeline passes through or drops never moves the audio.

The queue holds at most :data:`AUDIO_QUEUE_PACKETS` packets and never makes the demuxer wait: the video
frame the sink needs next may lie in the file behind audio that cannot be muxed before it (a latency
budget dropping frames, a file storing its audio seconds ahead of its video), so waiting could deadlock.
A packet past the bound has the sink mux the oldest at once instead (its ``spill``, run in the
demuxer's thread), and FFmpeg's own interleaving queue, bounded at ``max_interleave_delta`` (10 s),
orders it among the video.
"""

from __future__ import annotations

import collections
import enum
import io
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING

import av

from streamer.channel import ChannelStats
from streamer.errors import ConfigError

if TYPE_CHECKING:
    from av.audio.codeccontext import AudioCodecContext
    from av.audio.stream import AudioStream
    from av.packet import Packet
    from av.stream import Stream

__all__ = ["AUDIO_QUEUE_PACKETS", "AudioTrack", "Spill"]

AUDIO_QUEUE_PACKETS = 256
"""Audio packets waiting between the demuxer and the sink: 5.5 s of AAC at 48 kHz (1024 samples a
packet), more than a file pipeline holds in flight; a packet is a few hundred bytes (AAC) to a few KB."""

Spill = Callable[[], None]
"""The sink's way to mux, at once and in the demuxer's thread, the packets past the queue's bound."""


def _start(packet: Packet[Stream]) -> Fraction | None:
    """When ``packet`` starts, in seconds (its PTS, else its DTS); None when it carries neither."""
    stamp = packet.pts if packet.pts is not None else packet.dts
    return None if stamp is None else stamp * packet.time_base


class _Decision(enum.Enum):
    PENDING = "pending"
    TAKEN = "taken"
    DECLINED = "declined"


class AudioTrack:
    """The first audio stream of a source and its packets, from the demux thread to a sink's threads.

    The demuxer waits, before its first packet, until a sink :meth:`take` s the track or it is
    :meth:`decline` d. The stream's codec parameters are copied when the track is made, into a stream
    of a container of the track's own that is never written: an RTSP source closes the connection the
    stream came from when it reconnects, and an RTSP sink adds the audio again at each of its own
    reconnects. (The stream's decoder, which PyAV owns apart from the connection and the demuxer never
    uses, a transcoding sink keeps.)
    """

    def __init__(
        self,
        stream: AudioStream,
        name: str,
        capacity: int = AUDIO_QUEUE_PACKETS,
        decoder: AudioCodecContext | None = None,
    ) -> None:
        """``decoder``: where ``stream`` is not a demuxer's (a WHIP source encodes its sound itself), a
        decoder of its packets for a sink that transcodes."""
        if capacity < 1:
            raise ConfigError(f"audio track {name!r}: capacity must be at least 1, got {capacity}")
        self.name = name
        self.capacity = capacity
        self._holder = av.open(io.BytesIO(), "w", format="nut")  # holds any codec; never started
        self._stream = self._holder.add_stream_from_template(stream)
        self._decoder = stream.codec_context if decoder is None else decoder
        self._lock = threading.Lock()
        self._decided = threading.Event()
        self._decision = _Decision.PENDING
        self._spill: Spill | None = None
        self._packets: collections.deque[Packet[Stream]] = collections.deque()
        self._complete = False
        self._released = False
        self._max_depth = 0
        self._put = 0
        self._got = 0
        self._dropped = 0

    @property
    def stream(self) -> AudioStream:
        """The demuxed stream's codec parameters, as a template for a sink's stream."""
        return self._stream

    @property
    def decoder(self) -> AudioCodecContext:
        """The demuxed stream's decoder, for a sink that transcodes (and nothing else)."""
        return self._decoder

    def same_codec(self, stream: AudioStream) -> bool:
        """Whether ``stream`` (a reconnected source's) carries what this track's sinks were set up for."""
        mine = self._stream
        return (
            stream.codec_context.codec.canonical_name == mine.codec_context.codec.canonical_name
            and stream.sample_rate == mine.sample_rate
            and stream.channels == mine.channels
        )

    @property
    def complete(self) -> bool:
        """Whether the demuxer reached the end of the file (not a stop, an error or ``max_frames``)."""
        with self._lock:
            return self._complete

    def take(self, spill: Spill) -> None:
        """A sink writes the track: packets queue from now on, and ``spill`` muxes those past the bound."""
        with self._lock:
            self._decision, self._spill = _Decision.TAKEN, spill
        self._decided.set()

    @property
    def taken(self) -> bool:
        """Whether a sink writes the track (a live source drops its sound until then)."""
        with self._lock:
            return self._decision is _Decision.TAKEN

    def decline(self) -> None:
        """Nobody writes the track: the demuxer reads video only."""
        with self._lock:
            if self._decision is _Decision.PENDING:
                self._decision = _Decision.DECLINED
        self._decided.set()

    def wait_taken(self, stop: threading.Event) -> bool:
        """In the demux thread: wait for :meth:`take` or :meth:`decline`; False when declined or stopped."""
        while not self._decided.wait(0.1):
            if stop.is_set():
                return False
        return self._decision is _Decision.TAKEN

    def put(self, packet: Packet[Stream]) -> None:
        """Queue one packet (demux thread); past the capacity, the sink muxes the oldest at once."""
        with self._lock:
            if self._released:
                self._dropped += 1
                return
            self._packets.append(packet)
            self._put += 1
            self._max_depth = max(self._max_depth, len(self._packets))
            spill = self._spill if len(self._packets) > self.capacity else None
        if spill is not None:
            spill()

    def reached_end(self) -> None:
        """The demuxer put the file's last packet: the sink keeps the audio that runs past the video."""
        with self._lock:
            self._complete = True

    def pop_until(self, time: Fraction) -> list[Packet[Stream]]:
        """The queued packets that start at ``time`` (seconds) or before, oldest first."""
        with self._lock:
            out = self._until(time)
            self._got += len(out)
            return out

    def pop_over(self) -> list[Packet[Stream]]:
        """The oldest queued packets past the capacity."""
        with self._lock:
            out = self._over()
            self._got += len(out)
            return out

    def drop_until(self, time: Fraction) -> None:
        """Drop, counted, what :meth:`pop_until` would give: a live sink that is reconnecting has no
        one to send it to, and sending it later would put old sound beside new pictures."""
        with self._lock:
            self._dropped += len(self._until(time))

    def drop_over(self) -> None:
        """Drop, counted, what :meth:`pop_over` would give (a live sink that is reconnecting)."""
        with self._lock:
            self._dropped += len(self._over())

    def _until(self, time: Fraction) -> list[Packet[Stream]]:
        out: list[Packet[Stream]] = []
        while self._packets:
            start = _start(self._packets[0])
            if start is not None and start > time:
                break
            out.append(self._packets.popleft())
        return out

    def _over(self) -> list[Packet[Stream]]:
        return [self._packets.popleft() for _ in range(len(self._packets) - self.capacity)]

    def release(self, before: Fraction | None) -> list[Packet[Stream]]:
        """The sink's last take: what is queued (only what starts before ``before``, when given); any
        packet queued or demuxed later is discarded and counted."""
        with self._lock:
            self._released = True
            out: list[Packet[Stream]] = []
            for packet in self._packets:
                start = _start(packet)
                if before is None or start is None or start < before:
                    out.append(packet)
            self._got += len(out)
            self._dropped += len(self._packets) - len(out)
            self._packets.clear()
            return out

    def discard(self) -> None:
        """The sink can write no more (it failed): what is queued and what comes is dropped, counted."""
        with self._lock:
            self._released = True
            self._dropped += len(self._packets)
            self._packets.clear()

    def stats(self) -> ChannelStats:
        """The queue's counters, named ``audio:<stream>`` beside the pipeline's channels."""
        with self._lock:
            return ChannelStats(
                name=f"audio:{self.name}",
                capacity=self.capacity,
                depth=len(self._packets),
                max_depth=self._max_depth,
                put=self._put,
                got=self._got,
                dropped=self._dropped,
            )
