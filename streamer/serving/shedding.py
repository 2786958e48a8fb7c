"""Which ``model: auto`` streams run without the model, when even the cheapest tier cannot serve them all.

Where a host's cores cannot enhance every stream on the cheapest tier, the latency budget would let
each stream's frames through a part of the time, so that none is served well and every one flickers
between enhanced and not. Instead a stream that opens when the cheapest tier already has as many
streams as it keeps up with (``TierSelector.room``) passes its frames through without the model, and
says so (``/streams``, the viewer, the metrics' ``shed`` frames, one log line); the streams that came
first keep their model. Once one of them ends, the earliest added of the streams waiting is enhanced
again.
A stream alone on the cores is always given the model, even where it cannot keep up with it: some of
its frames enhanced is better than none.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from streamer.config import StreamConfig
from streamer.engine.pipeline import Pipeline
from streamer.engine.tiers import TierChoice, TierSelector

__all__ = ["Shedder", "fits", "shed_reason"]

log = logging.getLogger(__name__)


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
    """The service's streams given the model or not, as the cheapest tier's room on these cores allows."""

    def __init__(self, selector: TierSelector) -> None:
        self.selector = selector

    def enhanced(self, stream: Shed, streams: Iterable[Shed]) -> int:
        """The other streams that run a model on these cores: opened, or given a tier while opening."""
        return sum(
            (s.pipeline.opened or s.choice is not None) and s.pipeline.shed_reason is None
            for s in streams
            if s is not stream and not s.done
        )

    def opened(self, stream: Shed, enhanced: int) -> None:
        """An auto stream's tier was chosen beside ``enhanced`` streams: it runs without the model where
        no tier keeps up with it and the cheapest has no room left."""
        choice = stream.choice
        if choice is None or choice.keeps_up:
            return
        room = self._room(stream)
        if fits(room, enhanced):
            return
        size = f"{choice.width}x{choice.height}"
        stream.pipeline.shed(
            shed_reason(choice.probes[-1].name, room or 0, enhanced, size, choice.source_fps)
        )
        log.warning("stream %s: %s", stream.id, stream.pipeline.shed_reason)

    def unshed(self, streams: Iterable[Shed]) -> None:
        """Give the model back to streams running without it, longest waiting first, as far as the
        cheapest tier has room for them beside the streams it enhances."""
        every = list(streams)
        for stream in every:
            if stream.done or stream.pipeline.shed_reason is None:
                continue
            if fits(self._room(stream), self.enhanced(stream, every)):
                stream.pipeline.shed(None)
                log.warning("stream %s: model auto has room for it again; its frames are enhanced", stream.id)

    def _room(self, stream: Shed) -> int | None:
        """How many streams like this one the cheapest tier keeps up with on these cores."""
        choice, model = stream.choice, stream.config.model
        if choice is None:
            return None
        return self.selector.room(
            model.session_key(), choice.width, choice.height, choice.source_fps, model.headroom
        )
