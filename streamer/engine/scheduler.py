"""One model shared by many streams: their windows batched into single backend calls.

Each stream's pipeline submits the windows it wants enhanced and awaits them; a dispatcher task asks
the pure :class:`~streamer.core.batching.FairBatcher` when a batch is due and which windows it holds,
and runs it on one of the model's worker threads (stacking, inference and the copy back to (H, W, C)
all stay off the event loop); a backend sized for ``workers`` calls at once gets that many threads and
that many batches in flight. Windows that go through their stream's cache (frames kept on the device)
are batched alike, each carrying its stream's cache (``infer_cached``), and so are a recurrent model's
steps, each carrying its stream's state (``step``): one step per stream at a time, since each reads the
last one's state, but the steps of several streams in one call. A batch that fails is retried window by
window, so one stream's bad window fails that stream alone. A window submitted with a deadline (its
frame's arrival plus the latency budget) goes into a call only if that call, as long as calls of its
size have taken (:class:`~streamer.core.latency.CallCost`, per shape), ends by the deadline; one that
cannot make it even alone comes back :class:`Late`, and its frame leaves unenhanced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from streamer.backend.base import Backend, CachedWindow, State
from streamer.core.batching import FairBatcher
from streamer.core.latency import CallCost
from streamer.core.stats import DurationRecorder
from streamer.errors import ConfigError, ModelUnavailableError
from streamer.frame import Hyperframe, Picture

__all__ = ["BatchResult", "CallObserver", "InferenceScheduler", "Job", "Late", "SchedulerStats"]

log = logging.getLogger(__name__)

R = TypeVar("R")

CallObserver = Callable[[int, float], None]
"""Told the batch size and the seconds of each backend call."""

COSTS_KEPT = 16
"""Shapes whose call cost a scheduler keeps (streams at more sizes than this learn theirs again)."""


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One enhanced frame, (H, W, C) uint8 RGB or 4:2:0 planes, and the call it came from."""

    pixels: Picture
    call: int
    """Number of the backend call, counted from 1 per scheduler."""
    batch_size: int
    state: State = ()
    """A recurrent step's next state, for the stream's next step; () for windows."""


@dataclass(frozen=True, slots=True)
class Late:
    """A window not run: a call of it alone, started when the model was free for it, was expected to
    take ``expected_s`` and so to end past its deadline."""

    expected_s: float


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    model: str
    provider: str
    streams: int
    calls: int
    windows: int
    pending: int
    max_pending: int
    failed_calls: int
    batch_sizes: dict[int, int] = field(default_factory=dict)
    call_p50_ms: float | None = None
    late: int = 0
    """Windows handed back unrun: their call would have ended past their deadline."""


@dataclass(frozen=True, slots=True)
class Job:
    """One window for the model and how it runs: as it is, through its stream's cache (``cached``),
    or as a recurrent ``step`` from ``state``."""

    window: Hyperframe
    cached: CachedWindow | None = None
    step: bool = False
    state: State | None = None
    """A step's state; None: the run's first, from the zero state (made on the worker thread)."""


@dataclass(frozen=True, slots=True)
class _Request:
    job: Job
    future: asyncio.Future[BatchResult | Late]
    key: Hashable


class InferenceScheduler:
    """Batches the windows of the streams attached to it; ``max_wait_ms`` bounds how long a window
    waits for others to join its batch (0: a batch leaves as soon as the model is free)."""

    def __init__(
        self,
        backend: Backend,
        max_batch: int = 1,
        max_wait_ms: float = 0.0,
        on_call: CallObserver | None = None,
    ) -> None:
        if max_wait_ms < 0:
            raise ConfigError(f"runtime.max_wait_ms must not be negative, got {max_wait_ms}")
        self.backend = backend
        self.max_batch = max_batch
        self.workers = max(1, backend.workers)
        self._batcher: FairBatcher[_Request] = FairBatcher(
            max_batch, max_wait_ms / 1000.0, self.workers, one_each=bool(backend.info.state)
        )
        self._on_call = on_call
        self._executor = concurrent.futures.ThreadPoolExecutor(
            self.workers, thread_name_prefix=f"infer-{backend.info.name}"
        )
        self._free: asyncio.Semaphore | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._calls = 0
        self._windows = 0
        self._failed = 0
        self._sizes: Counter[int] = Counter()
        self._costs: dict[Hashable, CallCost] = {}
        self._late = 0
        self._durations = DurationRecorder(4096)
        self._closed = False

    def attach(self, stream: str) -> None:
        self._batcher.attach(stream)

    def detach(self, stream: str) -> None:
        for request in self._batcher.detach(stream):
            request.future.cancel()
        if self._wake is not None:
            self._wake.set()  # a batch may have been waiting for this stream's windows

    async def submit(
        self, stream: str, jobs: Sequence[Job], deadlines: Sequence[float | None] | None = None
    ) -> list[BatchResult | Late]:
        """Each job's enhanced target frame, in order, batched with other streams' jobs of the same shape
        and kind; raises what the model raised on them.

        ``deadlines``: per job, the monotonic time its call must have ended by (None: none); a job that
        cannot make it is not run, and its result is :class:`Late`. A step's result carries the next
        state: await it before the stream's next step."""
        if self._closed:
            raise RuntimeError(f"the scheduler of model {self.backend.info.name!r} is closed")
        loop = asyncio.get_running_loop()
        self._start(loop)
        now = time.monotonic()
        if deadlines is None:
            deadlines = [None] * len(jobs)
        futures = []
        for job, deadline in zip(jobs, deadlines, strict=True):
            future: asyncio.Future[BatchResult | Late] = loop.create_future()
            # only jobs of one shape, and of one kind, share a call
            kind = "step" if job.step else "cached" if job.cached is not None else "window"
            target = job.window.target_frame
            key = (job.window.t, target.height, target.width, kind, target.planes_colour)
            self._batcher.submit(stream, _Request(job, future, key), key, now, deadline)
            futures.append(future)
        assert self._wake is not None
        self._wake.set()
        return list(await asyncio.gather(*futures))

    async def call(self, fn: Callable[[], R]) -> tuple[R, int]:
        """Run ``fn``, one window, on one of the model's worker threads: windows a stream runs one by one
        (a streaming model's cached features, tiled frames); the caller orders them. Returns what it
        returned and the number of this call, as a :class:`BatchResult` carries."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        result = await loop.run_in_executor(self._executor, fn)
        self._record(1, time.monotonic() - started)
        return result, self._calls

    def stats(self) -> SchedulerStats:
        batcher = self._batcher.stats()
        info = self.backend.info
        return SchedulerStats(
            model=info.name,
            provider=info.provider,
            streams=batcher.streams,
            calls=self._calls,
            windows=self._windows,
            pending=batcher.pending,
            max_pending=batcher.max_pending,
            failed_calls=self._failed,
            batch_sizes=dict(sorted(self._sizes.items())),
            call_p50_ms=self._durations.percentile_ms(50),
            late=self._late,
        )

    async def aclose(self) -> None:
        """Stop dispatching and release the worker thread; the backend stays open (its owner closes it)."""
        self._closed = True
        task, self._dispatcher = self._dispatcher, None
        for running in (task, *self._running):
            if running is not None:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        self._executor.shutdown(wait=False)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._dispatcher is None:
            self._wake = asyncio.Event()
            self._free = asyncio.Semaphore(self.workers)
            self._dispatcher = loop.create_task(self._dispatch(), name=f"batch-{self.backend.info.name}")

    async def _dispatch(self) -> None:
        """Takes a batch only once a worker is free, so windows that arrive meanwhile join the next."""
        wake, free = self._wake, self._free
        assert wake is not None
        assert free is not None
        loop = asyncio.get_running_loop()

        def finished(done: asyncio.Task[None]) -> None:
            self._running.discard(done)
            free.release()

        while True:
            await free.acquire()
            try:
                requests = await self._next(wake)
            except BaseException:
                free.release()
                raise
            running = loop.create_task(self._run(loop, requests))
            self._running.add(running)
            running.add_done_callback(finished)

    async def _next(self, wake: asyncio.Event) -> list[_Request]:
        while True:
            delay = self._batcher.due_in(time.monotonic())
            if delay is None or delay > 0:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), delay)
                continue
            now = time.monotonic()
            for _, late in self._batcher.expire(now, self._expected):
                self._late += 1
                _settle(late.future, Late(self._expected(late.key, 1)))
            requests = [r for _, r in self._batcher.take(now, self._expected) if not r.future.done()]
            if requests:
                return requests

    def _expected(self, key: Hashable, windows: int) -> float:
        """Seconds a call of ``windows`` windows of shape ``key`` should be allowed; 0 before one ran."""
        cost = self._costs.get(key)
        return 0.0 if cost is None else cost.expected(windows)

    async def _run(self, loop: asyncio.AbstractEventLoop, requests: list[_Request]) -> None:
        started = time.monotonic()
        try:
            results = await loop.run_in_executor(self._executor, self._infer_blocking, requests)
        except Exception as err:
            self._failed += 1
            if len(requests) == 1 or (isinstance(err, ModelUnavailableError) and not err.batch_bound):
                # A server that cannot answer would not answer each window alone either.
                for request in requests:
                    _settle(request.future, error=err)
                return
            log.warning(
                "a batch of %d windows of model %s failed (%s); retrying each window alone",
                len(requests),
                self.backend.info.name,
                err,
            )
            for request in requests:
                await self._run(loop, [request])
            return
        self._record(len(requests), time.monotonic() - started, requests[0].key)
        for request, (pixels, state) in zip(requests, results, strict=True):
            _settle(request.future, BatchResult(pixels, self._calls, len(requests), state))

    def _record(self, size: int, seconds: float, key: Hashable | None = None) -> None:
        """``key``: the shape of a batched call's windows, whose cost it teaches (None: a call run
        one window at a time, which no batch's deadline depends on)."""
        if key is not None:
            cost = self._costs.pop(key, None)
            if cost is None:
                cost = CallCost()
                if len(self._costs) >= COSTS_KEPT:
                    del self._costs[next(iter(self._costs))]  # the shape least recently called
            cost.observe(size, seconds)
            self._costs[key] = cost
        self._calls += 1
        self._windows += size
        self._sizes[size] += 1
        self._durations.record(seconds)
        if self._on_call is not None:
            self._on_call(size, seconds)

    def _infer_blocking(self, requests: list[_Request]) -> list[tuple[Picture, State]]:
        jobs = [r.job for r in requests]
        cached = [j.cached for j in jobs if j.cached is not None]
        if cached:
            return [(pixels, ()) for pixels in self.backend.enhance_cached_batch(cached)]
        if jobs[0].step:
            target = jobs[0].window.target_frame
            h, w = target.height, target.width
            states = [self.backend.initial_state(1, h, w) if j.state is None else j.state for j in jobs]
            colour = jobs[0].window.colour
            if any(j.window.colour != colour for j in jobs):
                colour = None  # one call makes planes in one colour: RGB, which each sink converts
            pictures, made = self.backend.step_windows([j.window for j in jobs], states, colour)
            return list(zip(pictures, made, strict=True))
        batch = np.stack([j.window.pixels() for j in jobs])
        out = self.backend.infer(batch, [j.window.strength for j in jobs])
        return [(np.ascontiguousarray(o.transpose(1, 2, 0)), ()) for o in out]


def _settle(
    future: asyncio.Future[BatchResult | Late],
    result: BatchResult | Late | None = None,
    error: BaseException | None = None,
) -> None:
    """Resolve a window's future unless its stream stopped waiting (cancelled, detached)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert result is not None
        future.set_result(result)
