"""One video encode shared by several outputs of a stream: frames encoded once, packets to each muxer.

Encoding is most of what an output costs (libx264 holds a good part of a core per live stream), so outputs
whose encodes would be the same, an RTSP push and a recording of it, or two RTSP servers, share one: the
encoder here turns each frame into an :class:`EncodedFrame` (raw packet bytes, so every output muxes its own
copy in its own thread), and each output's muxer copies its stream parameters from
:attr:`SharedEncoder.template`. Timestamps are the RTSP sink's output clock (90 kHz, strictly increasing). An
output that joins late or lost frames (a reconnect, a full queue) waits for a keyframe and asks for one
(:meth:`SharedEncoder.request_keyframe`), as a WebRTC receiver sends a PLI.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import av
import av.error
from av.container import OutputContainer
from av.stream import Stream
from av.video.frame import PictureType
from av.video.stream import VideoStream

from streamer.errors import SinkError
from streamer.frame import Frame, StreamInfo
from streamer.media.colour import encoder_frame, tag
from streamer.sinks.clock import TIME_BASE, OutputClock

__all__ = ["Admitted", "EncodedFrame", "EncodedPacket", "Encoding", "Resync", "SharedEncoder", "add_video"]

_GLOBAL_HEADER = 1 << 22
"""AV_CODEC_FLAG_GLOBAL_HEADER: SPS/PPS in the stream parameters, which every muxer copies."""


@dataclass(frozen=True, slots=True)
class Encoding:
    """What makes an encode what it is: outputs whose encodings are equal get the same packets."""

    codec: str
    options: tuple[tuple[str, str], ...]
    bitrate: int | None = None
    gop: int | None = None

    @classmethod
    def of(
        cls, codec: str, options: Mapping[str, str], bitrate: int | None = None, gop: int | None = None
    ) -> Encoding:
        return cls(codec, tuple(sorted(options.items())), bitrate, gop)

    def describe(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"{self.codec} ({settings})"


@dataclass(frozen=True, slots=True)
class EncodedPacket:
    data: bytes
    pts: int | None
    dts: int | None
    keyframe: bool

    def packet(self, stream: VideoStream) -> av.Packet[Stream]:
        """A packet of its own for ``stream``'s muxer (muxing rewrites a packet's fields)."""
        packet = av.Packet(self.data)
        packet.pts = self.pts
        packet.dts = self.dts
        packet.time_base = TIME_BASE
        packet.is_keyframe = self.keyframe
        packet.stream = stream
        return packet


@dataclass(frozen=True, slots=True)
class EncodedFrame:
    """What one frame (or the flush at the end, ``index`` -1) gave the encoder."""

    seq: int
    """Consecutive from 0: an output that sees a gap has lost frames and waits for a keyframe."""
    index: int
    media: Fraction | None
    """The frame's media time in seconds (None without PTS): where its sound belongs."""
    pts: int
    """Its output timestamp in TIME_BASE."""
    packets: tuple[EncodedPacket, ...]


def add_video(
    container: OutputContainer,
    encoding: Encoding,
    info: StreamInfo,
    time_base: Fraction,
    extra: Mapping[str, str] | None = None,
) -> VideoStream:
    """A stream of ``container`` that encodes ``encoding`` (plus ``extra`` options) at the stream's size,
    rate and colour tags."""
    options = dict(encoding.options) | dict(extra or {})
    stream = container.add_stream(encoding.codec, rate=info.fps, options=options)
    assert isinstance(stream, VideoStream)
    stream.width = info.width
    stream.height = info.height
    # 4:2:0 halves both chroma dimensions, which needs even sizes.
    even = info.width % 2 == 0 and info.height % 2 == 0
    stream.pix_fmt = "yuv420p" if even else "yuv444p"
    tag(stream.codec_context, info.colour)
    stream.time_base = time_base
    stream.codec_context.time_base = time_base
    if encoding.gop is not None:
        stream.codec_context.gop_size = encoding.gop
    if encoding.bitrate is not None:
        stream.bit_rate = encoding.bitrate
    return stream


class Resync:
    """Which of a shared encode's packets one output writes: all of them in order, and after a gap (its
    queue let frames go) or a new connection, nothing until a keyframe, which it asks for once.

    Counts packets, not frames: an encoder with lookahead hands a frame's packet out frames later, and
    with no B-frames each packet is one frame.
    """

    def __init__(self) -> None:
        self._next: int | None = 0
        self._asked = False

    def restart(self) -> None:
        """A new connection: its decoder starts from nothing."""
        self._next = None

    def admit(self, encoded: EncodedFrame) -> Admitted:
        if self._next is not None and encoded.seq != self._next:
            self._next = None
        packets = list(encoded.packets)
        skipped = 0
        if self._next is None:
            key = next((i for i, p in enumerate(packets) if p.keyframe), None)
            if key is None:
                ask, self._asked = not self._asked, True
                return Admitted([], len(packets), ask)
            skipped, packets = key, packets[key:]
            self._asked = False
        self._next = encoded.seq + 1
        return Admitted(packets, skipped, False)


@dataclass(frozen=True, slots=True)
class Admitted:
    packets: list[EncodedPacket]
    """To write, in order."""
    skipped: int
    """Packets left out while waiting for a keyframe."""
    ask_keyframe: bool
    """Ask the encoder for a keyframe (:meth:`SharedEncoder.request_keyframe`); once per wait."""


class SharedEncoder:
    """Encodes frames once for several outputs; ``encode`` blocks and runs in one thread at a time."""

    def __init__(self, encoding: Encoding, info: StreamInfo) -> None:
        self.encoding = encoding
        self._info = info
        self._clock = OutputClock(info.fps)
        self._seq = 0
        self._keyframe = threading.Event()
        self._container: OutputContainer | None = None
        self._stream: VideoStream | None = None

    @property
    def template(self) -> VideoStream:
        """The opened encoder's stream: outputs add theirs with ``add_stream_from_template``."""
        if self._stream is None:
            raise RuntimeError("the shared encoder is not open; call open() first")
        return self._stream

    def open(self) -> None:
        """Opens the encoder (raises SinkError for an unusable codec or setting)."""
        info, encoding = self._info, self.encoding
        # A null muxer holds the encoder: its stream is the template every output copies.
        container = av.open(os.devnull, "w", format="null")
        try:
            stream = add_video(container, encoding, info, TIME_BASE, {"forced-idr": "1"})
            stream.codec_context.flags |= _GLOBAL_HEADER
            container.start_encoding()
        except (av.error.FFmpegError, ValueError) as exc:
            with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                container.close()
            raise SinkError(
                f"cannot open the shared encoder {encoding.describe()} at {info.width}x{info.height}: "
                f"{exc}; check the codec name and its options"
            ) from exc
        self._container, self._stream = container, stream

    def request_keyframe(self) -> None:
        """The next frame is encoded as a keyframe (an IDR): an output that joined or lost frames can
        start there. Safe from any thread."""
        self._keyframe.set()

    def encode(self, frame: Frame | None) -> EncodedFrame:
        """``frame``'s packets; None flushes the encoder at the end."""
        stream = self.template
        try:
            if frame is None:
                packets = stream.encode(None)
                media, pts, index = None, -1, -1
            else:
                media = None if frame.pts is None else frame.pts * frame.time_base
                pts, index = self._clock.advance(frame), frame.index
                av_frame = encoder_frame(frame, stream.codec_context)
                av_frame.pts = pts
                av_frame.time_base = TIME_BASE
                if self._keyframe.is_set():
                    self._keyframe.clear()
                    av_frame.pict_type = PictureType.I
                packets = stream.encode(av_frame)
        except (av.error.FFmpegError, ValueError) as exc:
            what = "flushing" if frame is None else f"frame {frame.index}"
            raise SinkError(f"the shared encoder {self.encoding.describe()} failed at {what}: {exc}") from exc
        encoded = EncodedFrame(
            self._seq,
            index,
            media,
            pts,
            tuple(EncodedPacket(bytes(p), p.pts, p.dts, p.is_keyframe) for p in packets),
        )
        self._seq += 1
        return encoded

    def close(self) -> None:
        container, self._container, self._stream = self._container, None, None
        if container is not None:
            with contextlib.suppress(av.error.FFmpegError, ValueError, OSError):
                container.close()
