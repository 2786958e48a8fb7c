"""The middle of a stream's stages: queued work -> latency budget -> model -> one :class:`Output` per frame.

Inference takes the work ingest queued, asks the latency budget whether each window can still make it,
submits the admitted ones to the model's :class:`~streamer.engine.scheduler.InferenceScheduler`
(shared with the other streams of that model, which batches windows across them; a recurrent model's
steps run one after the other, carrying this stream's hidden state, each batched with other streams'
steps) and resolves every frame, enhanced, reused or passed through, in the order it arrived: work
never overtakes other work, so frames leave in order with their own PTS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from streamer.channel import Channel
from streamer.core.gate import Region, SkipAction
from streamer.core.latency import Admission, LatencyBudget, MissAction
from streamer.core.misswatch import MissWatch
from streamer.engine.binding import ModelBinding
from streamer.engine.runners import Runner, Window
from streamer.engine.scheduler import BatchResult, Late
from streamer.engine.settings import PipelineSettings
from streamer.engine.tally import Outcome, Tally
from streamer.engine.telemetry import Stage, StageObserver
from streamer.engine.tiers import remedy
from streamer.engine.work import Output, Plan, Work
from streamer.errors import EndOfStream, ModelUnavailableError, StreamerError
from streamer.frame import Frame, Pixels, Yuv420

__all__ = ["Inference"]

log = logging.getLogger(__name__)

_Enhanced = tuple[dict[int, Frame], set[int], bool]
"""Enhanced frames by index, the indices the budget dropped, whether the model was unavailable."""

_Started = tuple[list[Work], int, asyncio.Future[_Enhanced]]
"""A batch under way: its windows, the worker slots it holds, and its model call (or what the budget
decided for windows that call no model)."""


def _decided(dropped: set[int]) -> asyncio.Future[_Enhanced]:
    """The outcome of windows that call no model: already known."""
    future: asyncio.Future[_Enhanced] = asyncio.get_running_loop().create_future()
    future.set_result(({}, dropped, False))
    return future


class Inference:
    """Runs one stream's windows on its model and hands every frame on, in order, to the output channel."""

    def __init__(
        self,
        binding: ModelBinding,
        settings: PipelineSettings,
        work: Channel[Work],
        out: Channel[Output],
        budget: LatencyBudget,
        tally: Tally,
        misses: MissWatch | None,
        observe: StageObserver,
    ) -> None:
        self.stream_id = binding.stream_id
        self.binding = binding
        self.settings = settings
        self.work = work
        self.out = out
        self.budget = budget
        self.tally = tally
        self.misses = misses if misses is not None else MissWatch()
        """Over 5% of due frames unenhanced in a minute: one warning per minute while it lasts."""
        self._observe = observe
        self._probing: asyncio.Task[None] | None = None
        self._model_down = False
        """The last model call found the model unavailable (a server's outage): logged once."""

    async def run(self) -> None:
        """Starts the model on windows, up to the model's ``workers`` at once (one for a recurrent model,
        whose steps chain; a frame larger than ``tile`` alone, as tiles are there to bound memory), and
        hands their frames on in order."""
        limit = self.binding.runners.fits.concurrency
        slots = asyncio.Semaphore(limit)
        started: asyncio.Queue[_Started | None] = asyncio.Queue()

        async def start(group: asyncio.TaskGroup) -> None:
            try:
                while True:
                    await self._move(slots, limit)
                    await slots.acquire()
                    try:
                        batch = [await self.work.get()]
                    except EndOfStream:
                        break
                    while (
                        len(batch) < self.settings.max_batch and (more := self.work.get_nowait()) is not None
                    ):
                        batch.append(more)
                    admitted, dropped = self._admit(batch)
                    # Frames the budget refused ahead of the first one admitted leave now, not after
                    # the call: they are what a long call would otherwise carry past the budget.
                    if not admitted:
                        started.put_nowait((batch, 1, _decided(dropped)))
                        continue
                    cut = next(i for i, work in enumerate(batch) if work is admitted[0])
                    if cut:
                        started.put_nowait((batch[:cut], 0, _decided(dropped)))
                    held = limit if self._runner(admitted[0]).exclusive else 1
                    for _ in range(held - 1):
                        await slots.acquire()
                    call = group.create_task(self._enhance(admitted, dropped))
                    started.put_nowait((batch[cut:], held, call))
            finally:
                started.put_nowait(None)

        async def hand_on() -> None:
            last: tuple[int, Frame] | None = None
            while (item := await started.get()) is not None:
                batch, held, running = item
                try:
                    enhanced, dropped, failed_open = await running
                finally:
                    for _ in range(held):
                        slots.release()
                for work in batch:
                    out = self._resolve(work, enhanced, dropped, last, failed_open)
                    if out is None:
                        continue
                    if out.outcome is Outcome.ENHANCED:
                        last = (work.run, out.frame)
                    await self.out.put(out)

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(start(group), name=f"start-{self.stream_id}")
                group.create_task(hand_on(), name=f"hand-on-{self.stream_id}")
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        finally:
            self.out.close()
            if self._probing is not None:
                self._probing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._probing

    async def _move(self, slots: asyncio.Semaphore, limit: int) -> None:
        """Apply a ``move_to``: every worker slot taken (the calls under way ended), the model swapped."""
        pending = self.binding.take_move()
        if pending is None:
            return
        scheduler, done = pending
        for _ in range(limit):
            await slots.acquire()
        try:
            self.binding.move(scheduler)
            self.budget.model_changed()
        except StreamerError as err:
            if not done.done():
                done.set_exception(err)
        else:
            if not done.done():
                done.set_result(None)
        finally:
            for _ in range(limit):
                slots.release()

    def _admit(self, batch: list[Work]) -> tuple[list[Work], set[int]]:
        """Which windows of ``batch`` the latency budget lets run the model, and the indices it drops."""
        now = time.monotonic()
        admitted: list[Work] = []
        dropped: set[int] = set()
        for work in batch:
            if work.plan is Plan.ENHANCE:
                admission = self.budget.admit(work.frame.arrival, now)
                if admission is Admission.RUN:
                    admitted.append(work)
                    continue
                if admission is Admission.PROBE:
                    self._probe(work)
                if self.budget.on_miss is MissAction.DROP:
                    dropped.add(work.frame.index)
        return admitted, dropped

    async def _enhance(self, admitted: list[Work], dropped: set[int]) -> _Enhanced:
        """Runs the admitted windows in one backend call.

        Returns the enhanced frames by index, the indices the budget dropped (``dropped`` and windows
        refused where their call was formed), and whether the model was unavailable (a model server
        down or failing: the admitted frames pass through, and the stream goes on).
        """
        t0 = time.monotonic()
        try:
            windows = [self._window(w) for w in admitted]
            results = await self._runner(admitted[0]).run(windows, self._deadlines(admitted))
            frames = []
            for work, result in zip(admitted, results, strict=True):
                if isinstance(result, BatchResult):
                    frames.append(work.frame.enhanced(result.pixels, work.weight))
                    continue
                self.budget.late()
                if self.budget.on_miss is MissAction.DROP:
                    dropped.add(work.frame.index)
            ran = [r for r in results if isinstance(r, BatchResult)]
            if not ran:
                # What a call would have taken after this wait: the estimate the scheduler refused
                # on, so this stream stops sending windows that cannot make it, and probes instead.
                waited = time.monotonic() - t0
                self.budget.observe(waited + max(r.expected_s for r in results if isinstance(r, Late)))
                return {}, dropped, False
            for result in ran:
                self.tally.called(result.call, result.batch_size)
        except ModelUnavailableError as err:
            self._unavailable(err)
            return {}, dropped, True
        elapsed = time.monotonic() - t0
        self.budget.observe(elapsed)
        self.tally.inference.record(elapsed)
        for _ in frames:
            self._observe(Stage.INFERENCE, elapsed)
        return {f.index: f for f in frames}, dropped, False

    def _deadlines(self, admitted: list[Work]) -> list[float | None]:
        """When each window's call must have ended: its frame's arrival plus the budget, less the time
        a frame takes after its call."""
        return [self.budget.deadline(w.frame.arrival) for w in admitted]

    def _unavailable(self, err: ModelUnavailableError) -> None:
        """One warning when an outage starts (and one line when it ends, in ``_resolve``), not one
        per frame."""
        if not self._model_down:
            self._model_down = True
            log.warning(
                "stream %s: the model is unavailable, frames pass through until it answers: %s",
                self.stream_id,
                err,
            )

    def _probe(self, work: Work) -> None:
        """Time the model on a window whose frame has left unenhanced, so a stale estimate can recover;
        the result is thrown away, and one probe at a time is enough. It runs as the stream's windows
        do (a streaming model's through its feature cache: what it encodes, later windows reuse)."""
        if work.window is None or (self._probing is not None and not self._probing.done()):
            return
        runner, window = self._runner(work), self._window(work)

        async def measure() -> None:
            started = time.monotonic()
            try:
                await runner.probe(window)
            except StreamerError as err:
                log.info("stream %s: a budget probe failed: %s", self.stream_id, err)
                return
            self.budget.observe(time.monotonic() - started)

        self._probing = asyncio.create_task(measure(), name=f"probe-{self.stream_id}")

    def _runner(self, work: Work) -> Runner:
        """The runner for the work's frame size (tiles for frames larger than ``tile``)."""
        return self.binding.runner(work.frame.width, work.frame.height)

    @staticmethod
    def _window(work: Work) -> Window:
        window = work.window
        assert window is not None
        crop = None if work.region is None else work.region.crop
        return Window(window, work.run, crop, work.frame)

    def _resolve(
        self,
        work: Work,
        enhanced: dict[int, Frame],
        dropped: set[int],
        last: tuple[int, Frame] | None,
        failed_open: bool = False,
    ) -> Output | None:
        """How the work's frame leaves, given its call's outcome and the last enhanced output of the
        stream; None: the budget dropped it."""
        frame = work.frame
        if work.plan is Plan.STRIDE:
            return self._count(Output(frame, frame, Outcome.STRIDE_PASSTHROUGH))
        if work.plan is Plan.SHED:
            return self._count(Output(frame, frame, Outcome.SHED_PASSTHROUGH))
        if work.plan is Plan.ENHANCE and failed_open and frame.index not in dropped:
            return self._count(Output(frame, frame, Outcome.UNAVAILABLE_PASSTHROUGH))
        if work.plan is Plan.ENHANCE:
            done = enhanced.get(frame.index)
            if done is not None and self._model_down:
                self._model_down = False
                log.warning("stream %s: the model answers again; frames are enhanced", self.stream_id)
            if self.budget.budget_ms is not None:
                self._watch_misses(frame, missed=done is None)
            if done is not None and work.region is not None:
                done = frame.enhanced(self._paste(work.region, frame, done, last, work.run), work.weight)
            if done is not None:
                return self._count(Output(frame, done, Outcome.ENHANCED))
            if frame.index in dropped:
                self.tally.left(Outcome.BUDGET_DROP, time.monotonic())
                return None
            return self._count(Output(frame, frame, Outcome.BUDGET_PASSTHROUGH))
        if self.settings.on_skip is SkipAction.REUSE and last is not None and last[0] == work.run:
            return self._count(Output(frame, frame.showing(last[1]), Outcome.REUSED))
        return self._count(Output(frame, frame, Outcome.GATE_PASSTHROUGH))

    @staticmethod
    def _paste(region: Region, frame: Frame, crop: Frame, last: tuple[int, Frame] | None, run: int) -> Pixels:
        """The last output with the region's tiles replaced by their newly enhanced pixels; without a
        last output of this run, the region over the original frame. The last output is taken as the
        model made it (before its blend): the blend is applied to the whole pasted picture once."""
        top, bottom, left, right = region.paste
        y, x = top - region.crop[0], left - region.crop[2]
        base = frame.pixels
        if last is not None and last[0] == run:
            made = last[1].picture
            base = last[1].pixels if isinstance(made, Yuv420) else made
        out = base.copy()
        out[top:bottom, left:right] = crop.pixels[y : y + bottom - top, x : x + right - left]
        return out

    def _watch_misses(self, frame: Frame, missed: bool) -> None:
        if not self.misses.observe(time.monotonic(), missed):
            return
        model = self.binding.backend.info
        log.warning(
            "stream %s: %.0f%% of the frames due for enhancement left unenhanced over the last minute "
            "(model %s at %dx%d, latency.budget_ms %g): this machine cannot keep that up; %s",
            frame.stream_id,
            100 * self.misses.share(),
            model.name,
            frame.width,
            frame.height,
            self.budget.budget_ms,
            remedy(model.name),
        )

    def _count(self, out: Output) -> Output:
        self.tally.left(out.outcome, time.monotonic())
        return out
