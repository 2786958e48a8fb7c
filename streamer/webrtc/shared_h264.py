"""One H.264 encode per played stream, shared by every WHEP player whose offer takes H.264.

aiortc encodes for each player on its own (VP8 or H.264, each at the bitrate that player's congestion
control asks), so every player costs a full encode on the host's cores, and its H.264 encoder runs
libx264 at its default preset. Every browser's offer takes H.264 in Constrained Baseline, so a stream's
frames are encoded here once (libx264 ``ultrafast``, ``zerolatency``, Baseline profile, at a fixed
bitrate) and each such player's sender only packetizes the packets (aiortc's ``pack``).

A shared stream cannot start each player at a keyframe of its own, so: a player joins waiting for a
keyframe and asks for one; a player that reports a lost picture (RTCP PLI or FIR, routed here by
:func:`keyframe_on_loss`) asks for one; a player that falls a whole queue behind is emptied and waits
for one. Requests are served at most every :data:`KEYFRAME_GAP_S`, none dropped; a keyframe also comes
every :data:`KEYFRAME_INTERVAL` frames. Frames wait for the encoder in a short queue
(:data:`ENCODER_FRAMES`); one that falls further behind skips the oldest before encoding, so no player
ever lacks a packet the next refers to.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import av
from aiortc import RTCRtpSender
from av.packet import Packet
from av.stream import Stream

from streamer.channel import Channel, DropPolicy
from streamer.errors import EndOfStream
from streamer.frame import Frame
from streamer.webrtc.frames import TIME_BASE, RtpClock, stamped_frame
from streamer.webrtc.tracks import QueuedTrack

__all__ = [
    "BITS_PER_PIXEL",
    "ENCODER_FRAMES",
    "KEYFRAME_GAP_S",
    "KEYFRAME_INTERVAL",
    "PLAYER_PACKETS",
    "PacketTrack",
    "SharedH264",
    "keyframe_on_loss",
]

log = logging.getLogger(__name__)

BITS_PER_PIXEL = 0.1
"""The default bitrate, in bits per pixel at 30 frames a second: 0.7 Mbit/s at 640x360, 2.8 at 720p."""
KEYFRAME_INTERVAL = 150
"""Frames between keyframes nobody asked for (5 s at 30 fps): a bound on a lost picture's life where a
player's loss reports do not reach the encoder."""
KEYFRAME_GAP_S = 0.5
"""Keyframe requests are served at most this often: players report losses in bursts."""
ENCODER_FRAMES = 8
"""Frames waiting for the encoder: a pipeline hands frames on in bursts (a batch, frames passed through
beside enhanced ones), each encoded in a few milliseconds; past this the oldest is skipped."""
PLAYER_PACKETS = 30
"""Packets a player may fall behind (a second at 30 fps) before it is emptied and waits for a keyframe."""


@dataclass(frozen=True, slots=True)
class Encoded:
    """One frame's packet and whether a decoder can start from it."""

    packet: Packet[Stream]
    keyframe: bool


class PacketTrack(QueuedTrack[Encoded]):
    """One player's share of the stream: its packets in order, from a keyframe on."""

    kind = "video"

    def __init__(self, shared: SharedH264) -> None:
        super().__init__(
            Channel(PLAYER_PACKETS, DropPolicy.DROP_OLDEST, name=f"h264:{shared.name}"), shared.unsubscribe
        )
        self._shared = shared
        self._keyless = True
        self._skipped = 0

    @property
    def skipped(self) -> int:
        """Packets this player did not get: before its first keyframe, or after it fell a queue behind."""
        return self._skipped

    def offer(self, encoded: Encoded) -> None:
        if self._channel.closed:
            return
        if encoded.keyframe:
            self._keyless = False
        if self._keyless:
            self._skipped += 1
            return
        if len(self._channel) >= self._channel.capacity:  # a whole queue behind: what is queued is stale
            while self._channel.get_nowait() is not None:
                self._skipped += 1
            if not encoded.keyframe:
                self._keyless = True
                self._skipped += 1
                self._shared.request_keyframe()
                return
        self._channel.put_nowait(encoded)

    async def recv(self) -> Packet[Stream]:
        return (await self.next_item()).packet


class SharedH264:
    """A played stream's frames, encoded once for all of its H.264 players while it has any.

    ``bitrate``: bits per second; None: :data:`BITS_PER_PIXEL` at 30 fps for the frames' size. The
    encoding runs in a worker thread, one frame at a time, in the order published.
    """

    def __init__(self, name: str, bitrate: int | None = None) -> None:
        self.name = name
        self.bitrate = bitrate
        self._players: set[PacketTrack] = set()
        self._frames: Channel[Frame] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wanted = False
        self._encoded = 0

    @property
    def players(self) -> int:
        return len(self._players)

    @property
    def tracks(self) -> tuple[PacketTrack, ...]:
        return tuple(self._players)

    @property
    def encoded(self) -> int:
        """Frames encoded since the stream was created (for all players at once)."""
        return self._encoded

    def subscribe(self) -> PacketTrack:
        """A new player's track; it asks for a keyframe, which it starts from."""
        track = PacketTrack(self)
        self._players.add(track)
        if self._task is None:
            self._frames = Channel(ENCODER_FRAMES, DropPolicy.DROP_OLDEST, name=f"h264-in:{self.name}")
            self._task = asyncio.get_running_loop().create_task(
                self._run(self._frames), name=f"h264-{self.name}"
            )
        self.request_keyframe()
        return track

    def unsubscribe(self, track: PacketTrack) -> None:
        """A player left; the last one leaving stops the encoder (a later one starts a fresh one)."""
        self._players.discard(track)
        if not self._players:
            self.close()

    def offer(self, frame: Frame) -> None:
        """A frame to encode once those before it are; none while nobody plays."""
        if self._frames is not None and not self._frames.closed:
            self._frames.put_nowait(frame)

    def request_keyframe(self) -> None:
        """The next frame encoded once :data:`KEYFRAME_GAP_S` has passed since the last keyframe is one."""
        self._wanted = True

    def close(self) -> None:
        if self._frames is not None:
            self._frames.close()
        if self._task is not None:
            self._task.cancel()
        self._frames = self._task = None

    async def _run(self, frames: Channel[Frame]) -> None:
        encoder = _Encoder(self.bitrate)
        with contextlib.suppress(EndOfStream):
            while True:
                frame = await frames.get()
                keyframe = self._wanted and encoder.may_key(time.monotonic())
                if keyframe:
                    self._wanted = False
                encoded = await asyncio.to_thread(encoder.encode, frame, keyframe)
                self._encoded += 1
                for player in tuple(self._players):
                    for one in encoded:
                        player.offer(one)


class _Encoder:
    """libx264 for one run of a shared stream; used from one worker thread at a time."""

    def __init__(self, bitrate: int | None) -> None:
        self._bitrate = bitrate
        self._codec: av.VideoCodecContext | None = None
        self._last_key = -float("inf")
        self._clock = RtpClock()

    def may_key(self, now: float) -> bool:
        return now - self._last_key >= KEYFRAME_GAP_S

    def encode(self, frame: Frame, keyframe: bool) -> list[Encoded]:
        video = stamped_frame(frame, self._clock)
        codec = self._codec
        if codec is None or (codec.width, codec.height) != (video.width, video.height):
            codec = self._codec = self._open(video.width, video.height)
            keyframe = True
        if keyframe:
            self._last_key = time.monotonic()
        video.pict_type = av.video.frame.PictureType.I if keyframe else av.video.frame.PictureType.NONE
        return [Encoded(p, p.is_keyframe) for p in codec.encode(video)]

    def _open(self, width: int, height: int) -> av.VideoCodecContext:
        bitrate = self._bitrate or round(BITS_PER_PIXEL * width * height * 30)
        codec = av.VideoCodecContext.create("libx264", "w")
        codec.width, codec.height, codec.pix_fmt = width, height, "yuv420p"
        codec.time_base, codec.framerate = TIME_BASE, Fraction(30)
        codec.bit_rate = bitrate
        codec.gop_size = KEYFRAME_INTERVAL
        codec.options = {
            "preset": "ultrafast",
            "tune": "zerolatency",
            "profile": "baseline",
            "forced-idr": "1",
            "maxrate": str(bitrate),
            "bufsize": str(bitrate),
        }
        log.info("WHEP: %dx%d encoded once for H.264 players at %.1f Mbit/s", width, height, bitrate / 1e6)
        return codec


def keyframe_on_loss(sender: RTCRtpSender, request: Callable[[], None]) -> bool:
    """Route a player's picture-loss reports (PLI, FIR) to ``request``: aiortc's sender answers them by
    forcing a keyframe from its own encoder, which a shared stream's sender does not have. False (said
    once) where this aiortc's sender takes them elsewhere; players then recover at the next keyframe."""
    if not callable(getattr(sender, "_send_keyframe", None)):
        _unsupported()
        return False
    sender._send_keyframe = request  # type: ignore[method-assign]
    return True


@functools.cache
def _unsupported() -> None:
    log.warning(
        "this aiortc's RTP sender takes picture-loss reports where streamer does not look: a WHEP player "
        "that loses a picture waits for the next periodic keyframe (%d frames)",
        KEYFRAME_INTERVAL,
    )
