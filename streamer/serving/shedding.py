"""Which ``model: auto`` streams run without the model, when even the cheapest tier cannot serve them all.

Where a host's cores cannot enhance every stream on the cheapest tier, the latency budget would let
each stream's frames through a part of the time, so that none is served well and every one flickers
between enhanced and not. Instead a stream that opens when the cheapest tier already has as many
streams as it keeps up with (``TierSelector.room``) passes its frames through without the model, and
says so (``/streams``, the viewer, the metrics' ``shed`` frames, one log line); the streams that came
first keep their model. Once one of them ends, the earliest added of the streams waiting is enhanced
again.

The card's room is an estimate (it counts each stream's decode and encode from one calibrated figure), and
other processes take cores. So where a stream starves on the cheapest tier (its enhanced share under
``STARVED_BELOW`` in two windows running, no tier left below) while other streams run a model too, the last
added auto stream stops running it, and the cores are taken to hold one stream fewer than they ran, for
``retry_s``; then the card's room is tried again. A stream alone on the cores is always given the model, even
where it cannot keep up with it: some of its frames enhanced is better than none.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from streamer.config import StreamConfig
from streamer.engine.pipeline import Pipeline
from streamer.engine.tiers import TierChoice, TierSelector

__all__ = ["STARVED_BELOW", "Shedder", "fits", "shed_reason"]

log = logging.getLogger(__name__)

STARVED_BELOW = 0.9
"""A stream on the cheapest tier starves under this enhanced share over a window: lower than the share
under which the mover moves down a tier, since passing a whole stream through costs far more of the
enhancement than the odd frame each stream lets through."""


def fits(room: int | None, enhanced: int) -> bool:
    """Whether one more stream is given the model: ``room`` streams of its size and rate fit the
    cheapest tier on these cores (None: unknown, so it is given the model) and ``enhanced`` streams
    run a model on them already."""
    return room is None or enhanced == 0 or enhanced < room


def shed_reason(cheapest: str, room: int, enhanced: int, size: str, fps: float) -> str:
    """What ``/streams`` and the log say of a stream that passes through for want of room."""
    return (
        f"model auto: the cheapest tier, {cheapest}, keeps up with {room} stream(s) of {size} at "
        f"{fps:g} fps on these cores and {enhanced} already run a model; this stream's frames pass "
        "through unenhanced until one of them ends (or run it on a host with more cores)"
    )


class Shed(Protocol):
    """What the shedder reads of a stream the service runs."""

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> StreamConfig: ...

    @property
    def pipeline(self) -> Pipeline: ...

    @property
    def choice(self) -> TierChoice | None: ...

    @property
    def done(self) -> bool: ...


class Shedder:
    """The service's streams given the model or not, as the cheapest tier's room on these cores allows:
    the room its calibrated card says at first, and, once a stream starved on it with more streams
    running a model, one fewer than those, for ``retry_s`` (then the card's again, to try)."""

    def __init__(
        self, selector: TierSelector, retry_s: float = 300.0, settle_s: float = 10.0, again_s: float = 12.0
    ) -> None:
        self.selector = selector
        self.retry_s = retry_s
        self.settle_s = settle_s
        """After a stream is shed, how long the others' shares are given to show it before another goes."""
        self.again_s = again_s
        """A stream sheds another only when it starves again within this long of its last starved
        window: one window alone may be a stream's first calls, or a moment's load."""
        self._starving: dict[str, float] = {}
        """When each stream last starved, within ``again_s``: an older time counts for nothing, so it is
        dropped (streams come and go through the control API; this keeps no trace of the gone)."""
        self._held: tuple[int, float] | None = None
        """(how many streams the cores held with a model when one had to go, since when)."""

    def enhanced(self, stream: Shed | None, streams: Iterable[Shed]) -> int:
        """The streams other than ``stream`` that run a model on these cores: opened, or given a tier
        while opening."""
        return sum(
            (s.pipeline.opened or s.choice is not None) and s.pipeline.shed_reason is None
            for s in streams
            if s is not stream and not s.done
        )

    def opened(self, stream: Shed, enhanced: int, now: float) -> None:
        """An auto stream's tier was chosen beside ``enhanced`` streams: it runs without the model where
        the cheapest tier has no room left for it."""
        choice = stream.choice
        if choice is None:
            return
        room = self._room(stream, now)
        if fits(room, enhanced):
            return
        size = f"{choice.width}x{choice.height}"
        stream.pipeline.shed(
            shed_reason(choice.probes[-1].name, room or 0, enhanced, size, choice.source_fps)
        )
        log.warning("stream %s: %s", stream.id, stream.pipeline.shed_reason)

    def starved(self, stream: Shed, share: float, streams: Iterable[Shed], now: float) -> None:
        """``stream`` got ``share`` of its frames enhanced on the cheapest tier: where it starved in the
        window before too and other streams run a model, the last added auto stream that runs one
        (``stream`` itself, maybe) passes through from now on, and the cores are taken to hold one
        stream fewer than they ran."""
        self._starving = {sid: at for sid, at in self._starving.items() if now - at <= self.again_s}
        last_starved = self._starving.get(stream.id)
        self._starving[stream.id] = now
        if last_starved is None:
            return
        every = list(streams)
        running = self.enhanced(None, every)
        auto = [s for s in every if s.choice is not None and not s.done and s.pipeline.shed_reason is None]
        if running < 2 or not auto or (self._held is not None and now - self._held[1] < self.settle_s):
            return
        last = auto[-1]
        self._held = (running - 1, now)
        last.pipeline.shed(
            f"model auto: on the cheapest tier {stream.id} got {share:.0%} of its frames enhanced with "
            f"{running} streams running a model on these cores; this stream, the last added, passes its "
            f"frames through unenhanced until one of them ends (tried again in {self.retry_s:g} s)"
        )
        log.warning("stream %s: %s", last.id, last.pipeline.shed_reason)

    def unshed(self, streams: Iterable[Shed], now: float) -> None:
        """Give the model back to streams running without it, earliest added first, as far as there is
        room for them beside the streams running a model."""
        every = list(streams)
        for stream in every:
            if stream.done or stream.pipeline.shed_reason is None:
                continue
            if fits(self._room(stream, now), self.enhanced(stream, every)):
                stream.pipeline.shed(None)
                log.warning("stream %s: model auto has room for it again; its frames are enhanced", stream.id)

    def _room(self, stream: Shed, now: float) -> int | None:
        """How many streams like this one the cheapest tier keeps up with on these cores: its card's
        figure, or fewer where a stream starved within ``retry_s``."""
        choice, model = stream.choice, stream.config.model
        if choice is None:
            return None
        room = self.selector.room(model.session_key(), choice.width, choice.height, choice.source_fps)
        if self._held is not None and now - self._held[1] >= self.retry_s:
            self._held = None
        if self._held is None:
            return room
        return self._held[0] if room is None else min(room, self._held[0])
