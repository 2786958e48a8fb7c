"""The last of a stream's stages: each :class:`Output` to the sink, in order, timed end to end.

Egress scales frames that leave unenhanced up to the output's size (a super-resolution model's
stream), writes them, tells the latency budget how long a frame takes after its model call, and, for a
live sink, keeps the output's clock while the source is silent: the last frame again, or a no-signal
card, one frame period apart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

from streamer.channel import Channel
from streamer.core.card import no_signal_card
from streamer.core.keepalive import Filler, KeepAlive
from streamer.core.latency import LatencyBudget
from streamer.engine.tally import Outcome, Tally
from streamer.engine.telemetry import Stage, StageObserver
from streamer.engine.work import Output
from streamer.errors import EndOfStream
from streamer.frame import Frame, Pixels
from streamer.media.resize import upscale
from streamer.sinks.base import Sink

__all__ = ["Egress", "OutputHook"]

OutputHook = Callable[[Frame, Frame, Outcome], None]
"""Called for each frame written, with the source frame, the frame sent and how it was made."""


class Egress:
    """Writes one stream's frames to its sink; when a write began and ended is kept here, for the
    service to see a blocked sink."""

    def __init__(
        self,
        sink: Sink,
        out: Channel[Output],
        scale: int,
        budget: LatencyBudget,
        tally: Tally,
        observe: StageObserver,
        on_output: OutputHook | None,
    ) -> None:
        self.sink = sink
        self.out = out
        self.scale = scale
        """Output frames are this many times the source's size: unenhanced ones are scaled up to match."""
        self.budget = budget
        self.tally = tally
        self._observe = observe
        self._on_output = on_output
        self._card: Pixels | None = None
        self.last_sent_at: float | None = None
        self.sending_since: float | None = None
        """When the sink write under way started (None: none is): how the service sees a blocked sink."""

    async def run(self, keepalive: KeepAlive | None) -> None:
        """Writes frames in order until the output channel ends; for a live sink (``keepalive`` set),
        keeps the output's clock while none come."""
        last: Frame | None = None
        waiting: asyncio.Future[Output] | None = None
        try:
            while True:
                if waiting is None:
                    waiting = asyncio.ensure_future(self.out.get())
                due = None if keepalive is None else keepalive.due_in(time.monotonic())
                done, _ = await asyncio.wait({waiting}, timeout=due)
                if not done:  # a timeout: only a keep-alive sets one, once a frame has gone out
                    filler = None if keepalive is None else keepalive.fill(time.monotonic())
                    if keepalive is not None and filler is not None and last is not None:
                        last = self._filler(last, filler, keepalive)
                        await self._write(last)
                    continue
                try:
                    out = waiting.result()
                except EndOfStream:
                    break
                finally:
                    waiting = None
                if keepalive is not None and keepalive.stale(out.source.arrival, time.monotonic()):
                    continue
                if self.scale > 1 and out.frame.width != out.source.width * self.scale:
                    out = dataclasses.replace(out, frame=await asyncio.to_thread(self._scaled_up, out.frame))
                began = await self._write(out.frame)
                last = out.frame
                if keepalive is not None:
                    keepalive.sent(began)
                done_at = self.last_sent_at or time.monotonic()
                self.budget.observe_tail(done_at - out.handed_on)
                self._observe(Stage.END_TO_END, done_at - out.source.arrival)
                self.tally.written(done_at - out.source.arrival, done_at)
                if self._on_output is not None:
                    self._on_output(out.source, out.frame, out.outcome)
        finally:
            if waiting is not None:
                waiting.cancel()

    async def _write(self, frame: Frame) -> float:
        """Sends ``frame``; returns when the send began, which is what a keep-alive times from: every send
        (a filler's too) takes about as long, so fillers then leave a frame period apart."""
        self.sending_since = started = time.monotonic()
        await self.sink.send(frame)
        self.sending_since = None
        self.last_sent_at = time.monotonic()
        self._observe(Stage.ENCODE, self.last_sent_at - started)
        return started

    def _scaled_up(self, frame: Frame) -> Frame:
        """A frame that leaves unenhanced, at the output's size (a super-resolution model's stream)."""
        return frame.with_pixels(upscale(frame.pixels, self.scale))

    def _filler(self, last: Frame, filler: Filler, keepalive: KeepAlive) -> Frame:
        """The frame a silent source leaves the output: ``last`` again, or the card, one period on."""
        pts = None
        if last.pts is not None:
            pts = last.pts + max(1, round(keepalive.period_s / float(last.time_base)))
        moved = dataclasses.replace(last, pts=pts, arrival=time.monotonic(), discontinuity=False)
        if filler is Filler.CARD:
            if self._card is None or self._card.shape[:2] != (last.height, last.width):
                self._card = no_signal_card(last.width, last.height)
            return moved.with_pixels(self._card)
        return moved.showing(last)
