"""What the scheduler does with a batch the model could not run: a device out of memory may take the
windows one by one, a model server that is down is not asked again for each of them."""

from __future__ import annotations

import asyncio
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.base import Strengths
from streamer.backend.onnx import OnnxBackend
from streamer.engine.scheduler import InferenceScheduler, Job
from streamer.errors import ModelUnavailableError
from streamer.frame import Hyperframe
from tests.factories import make_frame


class Starved(OnnxBackend):
    """The shipped temporal filter, refusing batches of more than one window (an allocation failing:
    ``batch_bound``), or every call (a server that is down)."""

    def __init__(self, batch_bound: bool) -> None:
        super().__init__(TEMPORAL_FILTER, threads=1)
        self.batch_bound = batch_bound
        self.batches: list[int] = []

    def infer(self, batch: npt.NDArray[np.uint8], strength: Strengths = None) -> npt.NDArray[np.uint8]:
        self.batches.append(len(batch))
        if len(batch) > 1 or not self.batch_bound:
            failure = ModelUnavailableError(f"cannot run a batch of {len(batch)}")
            failure.batch_bound = self.batch_bound
            raise failure
        return super().infer(batch, strength)


def _window(stream: int) -> Hyperframe:
    frames = tuple(
        make_frame(i, value=10 * stream + i, size=(16, 16), stream_id=str(stream)) for i in range(5)
    )
    return Hyperframe(frames, 2, Fraction(30))


async def _two_streams(backend: OnnxBackend) -> list[object]:
    scheduler = InferenceScheduler(backend, max_batch=2, max_wait_ms=50.0)
    for stream in ("a", "b"):
        scheduler.attach(stream)
    try:
        return list(
            await asyncio.gather(
                scheduler.submit("a", [Job(_window(1))]),
                scheduler.submit("b", [Job(_window(2))]),
                return_exceptions=True,
            )
        )
    finally:
        await scheduler.aclose()


def test_a_batch_that_ran_out_of_memory_is_run_window_by_window() -> None:
    backend = Starved(batch_bound=True)
    results = asyncio.run(_two_streams(backend))
    assert backend.batches == [2, 1, 1]
    assert all(isinstance(r, list) and r[0].pixels.shape == (16, 16, 3) for r in results)


def test_a_batch_the_server_could_not_answer_fails_every_window_at_once() -> None:
    backend = Starved(batch_bound=False)
    results = asyncio.run(_two_streams(backend))
    assert backend.batches == [2]
    assert all(isinstance(r, ModelUnavailableError) for r in results)
