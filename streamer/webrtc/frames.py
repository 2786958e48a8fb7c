"""Frames as aiortc's video senders take them: 4:2:0 in BT.601 tv range, stamped on a 90 kHz clock
that only moves forward. Shared by each player's own track (``streamer.webrtc.playback``) and the
one encode its H.264 players share (``streamer.webrtc.shared_h264``)."""

from __future__ import annotations

import time
from fractions import Fraction

import av

from streamer.frame import Frame
from streamer.media.colour import yuv_frame
from streamer.media.planes import convert, rgb_frame

__all__ = ["RTP_CLOCK_RATE", "TIME_BASE", "RtpClock", "stamped_frame", "video_frame"]

RTP_CLOCK_RATE = 90_000
"""The RTP clock of every video codec WebRTC uses."""
TIME_BASE = Fraction(1, RTP_CLOCK_RATE)
"""The time base of the frames and packets handed to aiortc's senders."""


class RtpClock:
    """Maps frame times to one player's 90 kHz timeline, which only moves forward.

    Media time is followed while it advances by at most ``max_step_s`` per frame; a step back (a new
    publisher, whose clock starts again) or a larger jump re-anchors the timeline one nominal frame
    after the last stamp, so the player's jitter buffer never sees time go back or stall.
    """

    def __init__(self, max_step_s: float = 1.0, nominal_fps: float = 30.0) -> None:
        self._max_step = round(max_step_s * RTP_CLOCK_RATE)
        self._nominal = round(RTP_CLOCK_RATE / nominal_fps)
        self._anchor: tuple[float, int] | None = None
        self._last: int | None = None

    def stamp(self, seconds: float) -> int:
        """The RTP ticks for a frame at ``seconds`` (media time, or a monotonic clock when it has none)."""
        if self._anchor is None:
            self._anchor = (seconds, 0)
        ticks = self._anchor[1] + round((seconds - self._anchor[0]) * RTP_CLOCK_RATE)
        if self._last is not None and not self._last < ticks <= self._last + self._max_step:
            ticks = self._last + self._nominal
            self._anchor = (seconds, ticks)
        self._last = ticks
        return ticks


def video_frame(frame: Frame) -> av.VideoFrame:
    """A frame as the yuv420p frame aiortc's encoders take, BT.601 in tv range as players read WebRTC
    video: 4:2:0 planes already so go as they are, others from RGB (made here, in a worker thread)."""
    colour = frame.planes_out
    if colour is not None and (colour.matrix, colour.range) in ((5, 1), (6, 1)):
        planes = frame.planes
        assert planes is not None
        return yuv_frame(planes)
    return convert(rgb_frame(frame.pixels), format="yuv420p")


def stamped_frame(frame: Frame, clock: RtpClock) -> av.VideoFrame:
    """:func:`video_frame` with its time on ``clock``: the frame's media time, or now where it has none."""
    seconds = frame.time if frame.time is not None else time.monotonic()
    video = video_frame(frame)
    video.pts, video.time_base = clock.stamp(seconds), TIME_BASE
    return video
