"""Windows with deadlines: the scheduler runs none whose call would end past it, and says which."""

from __future__ import annotations

import asyncio
import time
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.base import Strengths
from streamer.backend.onnx import OnnxBackend
from streamer.engine.scheduler import BatchResult, InferenceScheduler, Job, Late
from streamer.frame import Hyperframe
from tests.factories import make_frame


class Counted(OnnxBackend):
    """The shipped temporal filter, counting the windows it is given."""

    def __init__(self) -> None:
        super().__init__(TEMPORAL_FILTER, threads=1)
        self.windows = 0

    def infer(self, batch: npt.NDArray[np.uint8], strength: Strengths = None) -> npt.NDArray[np.uint8]:
        self.windows += len(batch)
        return super().infer(batch, strength)


def _window(first: int) -> Hyperframe:
    frames = tuple(make_frame(first + i, value=first + i, size=(16, 16), stream_id="a") for i in range(5))
    return Hyperframe(frames, 2, Fraction(30))


async def _infer(scheduler: InferenceScheduler, deadlines: list[float | None]) -> list[BatchResult | Late]:
    return await scheduler.submit("a", [Job(_window(i)) for i in range(len(deadlines))], deadlines)


def test_a_window_past_its_deadline_is_not_run_and_comes_back_as_none() -> None:
    backend = Counted()
    scheduler = InferenceScheduler(backend, max_batch=4)
    scheduler.attach("a")

    async def scenario() -> list[BatchResult | Late]:
        try:
            return await _infer(scheduler, [time.monotonic() - 1.0, None, time.monotonic() + 3600.0])
        finally:
            await scheduler.aclose()

    late, free, due = asyncio.run(scenario())
    assert isinstance(late, Late)
    assert isinstance(free, BatchResult)
    assert free.pixels.shape == (16, 16, 3)
    assert isinstance(due, BatchResult)
    assert due.batch_size == 2
    assert backend.windows == 2
    assert scheduler.stats().late == 1


def test_a_call_the_scheduler_has_timed_bounds_what_it_admits_later() -> None:
    backend = Counted()
    scheduler = InferenceScheduler(backend, max_batch=4)
    scheduler.attach("a")

    async def scenario() -> list[BatchResult | Late]:
        try:
            await _infer(scheduler, [None])  # teaches the scheduler what a call of this shape costs
            return await _infer(scheduler, [time.monotonic()])  # no time left for any call at all
        finally:
            await scheduler.aclose()

    (late,) = asyncio.run(scenario())
    assert isinstance(late, Late)
    assert late.expected_s > 0.0
    assert backend.windows == 1
