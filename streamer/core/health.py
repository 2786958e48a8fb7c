"""A stream's health, derived from a few timestamps: what ``/readyz`` reports and state changes log.

Stalls and blocked sinks are facts about time passing (no frame for a while, a write that has not
returned), so the state is computed from when things last happened and the current time, passed in.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from streamer.errors import ConfigError

__all__ = ["HealthLimits", "StreamHealth", "StreamSignals", "StreamState"]


class StreamState(enum.Enum):
    CONNECTING = "connecting"
    """The source is opening (connecting to a camera) or no frame came yet."""
    WAITING = "waiting"
    """The source waits for someone to send it video (a WHIP stream with no publisher): ready to take
    one, so not a stall."""
    LIVE = "live"
    """Frames arrive and leave."""
    STALLED = "stalled"
    """No frame from the source for ``stall_after_s``: a camera gone quiet, a reconnect under way."""
    SINK_BLOCKED = "sink_blocked"
    """One write to the sink has not returned for ``sink_blocked_after_s``: a slow or stuck consumer."""
    ENDED = "ended"
    """The source ended (end of file, stop requested) and everything read was written."""
    FAILED = "failed"
    """The stream stopped on an error; the other streams go on."""

    @property
    def ready(self) -> bool:
        """Whether the stream counts as serving: live, waiting for a publisher, or finished without an
        error."""
        return self in (StreamState.LIVE, StreamState.WAITING, StreamState.ENDED)


@dataclass(frozen=True, slots=True)
class HealthLimits:
    stall_after_s: float = 5.0
    sink_blocked_after_s: float = 2.0

    def __post_init__(self) -> None:
        if self.stall_after_s <= 0 or self.sink_blocked_after_s <= 0:
            raise ConfigError(
                f"runtime.stall_after_s ({self.stall_after_s}) and runtime.sink_blocked_after_s "
                f"({self.sink_blocked_after_s}) must be positive seconds"
            )


@dataclass(frozen=True, slots=True)
class StreamSignals:
    """What a running stream reports about itself (monotonic seconds)."""

    opened: bool = False
    finished: bool = False
    error: str | None = None
    last_frame: float | None = None
    """When the source last delivered a frame."""
    sending_since: float | None = None
    """When the write to the sink that is under way started; None when no write is under way."""
    waiting: bool = False
    """The source waits for a publisher (:attr:`streamer.sources.base.Source.waiting`)."""


class StreamHealth:
    """Classifies signals into a state and remembers the last one, so only changes are reported.

    A stall is reported once per episode: a source that delivers a frame every few stall periods (a 4K
    file at 0.1 fps) flips stalled/live on every frame; the episode ends, and "live" is reported, only
    once frames have flowed for ``stall_after_s`` again.
    """

    def __init__(self, limits: HealthLimits | None = None) -> None:
        self.limits = limits if limits is not None else HealthLimits()
        self._state: StreamState | None = None
        self._stall_episode = False
        self._live_since: float | None = None

    @property
    def state(self) -> StreamState:
        return self._state if self._state is not None else StreamState.CONNECTING

    def classify(self, signals: StreamSignals, now: float) -> StreamState:
        if signals.error is not None:
            return StreamState.FAILED
        if signals.finished:
            return StreamState.ENDED
        sending = signals.sending_since
        if sending is not None and now - sending > self.limits.sink_blocked_after_s:
            return StreamState.SINK_BLOCKED
        if signals.waiting:
            return StreamState.WAITING
        if not signals.opened or signals.last_frame is None:
            return StreamState.CONNECTING
        if now - signals.last_frame > self.limits.stall_after_s:
            return StreamState.STALLED
        return StreamState.LIVE

    def update(self, signals: StreamSignals, now: float) -> StreamState | None:
        """The new state when it changed since the last update (a stall once per episode), else None."""
        state = self.classify(signals, now)
        previous, self._state = self._state, state
        if self._stall_episode:
            if state is StreamState.STALLED:
                self._live_since = None
                return None
            if state is StreamState.LIVE:
                if self._live_since is None:
                    self._live_since = now
                if now - self._live_since < self.limits.stall_after_s:
                    return None
            self._stall_episode = False
            return state
        if state is previous:
            return None
        if state is StreamState.STALLED:
            self._stall_episode, self._live_since = True, None
        return state
