"""How a stream's windows run on its model: one runner per model kind, chosen once.

A model kind is how its windows reach the model: a plain window batched with other streams' windows
(:class:`WindowRunner`), frames kept on the device and batched through the stream's cache
(:class:`CachedRunner`), a streaming model whose frames are encoded once each and fused one window at
a time (:class:`StreamingRunner`), or a recurrent model stepped with the stream's hidden state
(:class:`RecurrentRunner`); frames larger than the stream's tile run on overlapping tiles
(:class:`TiledRunner`). :func:`runner_kind` picks the class from the model's description and
:func:`choose_runner` makes a stream's runners once; the pipeline then calls :meth:`Runner.run` and
:meth:`Runner.probe` and never asks which kind it has.
Adding a kind is one class here and a line of the chooser.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from streamer.backend.base import Backend, CachedWindow, FrameFeatures, ModelInfo, State
from streamer.core.features import FeatureCache, FeatureCacheStats
from streamer.core.tiling import plan_tiles
from streamer.engine.scheduler import BatchResult, InferenceScheduler, Job, Late
from streamer.errors import ModelUnavailableError
from streamer.frame import Frame, Hyperframe, Pixels

__all__ = [
    "CachedRunner",
    "RecurrentRunner",
    "Runner",
    "Runners",
    "Stream",
    "StreamingRunner",
    "TiledRunner",
    "Window",
    "WindowRunner",
    "choose_runner",
]


@dataclass(frozen=True, slots=True)
class Stream:
    """What a runner knows of its stream: its id, its name in the scheduler (unique even where two
    sources share an id), the frames a feature cache must hold (every window that may be in flight
    at once, so one window's new frame never evicts a frame another still needs) and its tiling."""

    id: str
    key: str
    features: int
    tile: int | None = None
    tile_overlap: int = 32


@dataclass(frozen=True, slots=True)
class Window:
    """One admitted window: its hyperframe, the run (between discontinuities) it belongs to, the box
    of it the model runs on (top, bottom, left, right; None: all of it) and its output frame."""

    hyperframe: Hyperframe
    run: int
    crop: tuple[int, int, int, int] | None
    frame: Frame


Result = BatchResult | Late
"""A window's enhanced picture, or :class:`Late`: the scheduler saw it could not make its deadline."""


class Runner(ABC):
    """Runs one stream's windows on its model (a backend shared through ``scheduler``)."""

    local = True
    """Whether the output is a function of the window's frames alone, so it can be made of a region
    (a crop pasted over the last output) or of tiles."""
    regions_on_grid = False
    """Whether a region is cut from maps of whole frames, so it is aligned to the model's grid and the
    window keeps its whole frames."""
    exclusive = False
    """Whether a call holds all of the stream's worker slots (tiles, there to bound memory)."""

    def __init__(self, scheduler: InferenceScheduler, stream: Stream) -> None:
        self.scheduler = scheduler
        self.stream = stream
        self.key = stream.key

    @property
    def backend(self) -> Backend:
        return self.scheduler.backend

    @property
    def concurrency(self) -> int:
        """How many of the stream's calls may be under way at once."""
        return self.scheduler.workers

    async def run(self, windows: Sequence[Window], deadlines: Sequence[float | None]) -> list[Result]:
        """Each window's enhanced picture, in order; ``deadlines``: when each call must have ended."""
        return await self._run(windows, deadlines, self.key)

    async def probe(self, window: Window) -> None:
        """Run one window to time the model, the result thrown away, under a key of its own (the
        stream's own windows may be queued beside it) and without a deadline."""
        key = f"{self.key}~probe"
        self.scheduler.attach(key)
        try:
            await self._run([window], [None], key)
        finally:
            self.scheduler.detach(key)

    def feature_stats(self) -> FeatureCacheStats:
        """Frames encoded, reused and cache resets (all zero for a model that caches no features)."""
        return FeatureCacheStats(capacity=self.stream.features, size=0, encoded=0, hits=0, resets=0)

    @abstractmethod
    async def _run(
        self, windows: Sequence[Window], deadlines: Sequence[float | None], key: str
    ) -> list[Result]: ...

    async def _alone(self, windows: Sequence[Window], run: Callable[[Window], Pixels]) -> list[Result]:
        """Each window by itself on a model worker, in order: one call each, no batch, no deadline."""
        results: list[Result] = []
        for window in windows:
            pixels, call = await self.scheduler.call(functools.partial(run, window))
            results.append(BatchResult(pixels, call, 1))
        return results


class WindowRunner(Runner):
    """Plain windows, batched with other streams' windows of the same shape."""

    async def _run(
        self, windows: Sequence[Window], deadlines: Sequence[float | None], key: str
    ) -> list[Result]:
        return await self.scheduler.submit(key, [Job(w.hyperframe) for w in windows], deadlines)


class _Cached(Runner):
    """A runner whose frames are made once each and kept, per run, in the stream's feature cache."""

    regions_on_grid = True

    def __init__(self, scheduler: InferenceScheduler, stream: Stream) -> None:
        super().__init__(scheduler, stream)
        self.features: FeatureCache[FrameFeatures] = FeatureCache(stream.features, stream.id)
        self.lock = threading.Lock()
        """Held while a window reads and fills the cache: windows of a stream run on several threads."""

    def feature_stats(self) -> FeatureCacheStats:
        return self.features.stats()

    def cached(self, window: Window) -> CachedWindow:
        return CachedWindow(window.hyperframe, window.run, self.features, window.crop, self.lock)


class CachedRunner(_Cached):
    """Frames kept on the device (``model.device_frames``): windows batched with other streams'
    through each stream's cache."""

    async def _run(
        self, windows: Sequence[Window], deadlines: Sequence[float | None], key: str
    ) -> list[Result]:
        jobs = [Job(w.hyperframe, cached=self.cached(w)) for w in windows]
        return await self.scheduler.submit(key, jobs, deadlines)


class StreamingRunner(_Cached):
    """A streaming model: each frame encoded once per run and its features cached; each window fused
    alone on the model's thread."""

    async def _run(
        self, windows: Sequence[Window], deadlines: Sequence[float | None], key: str
    ) -> list[Result]:
        return await self._alone(windows, self._fuse)

    def _fuse(self, window: Window) -> Pixels:
        return self.backend.enhance_cached(
            window.hyperframe, window.run, self.features, window.crop, self.lock
        )


class RecurrentRunner(Runner):
    """A recurrent model: one step per window, carrying the stream's hidden state, each batched with
    other streams' steps; a new run (after a discontinuity) starts again from the zero state."""

    local = False

    def __init__(self, scheduler: InferenceScheduler, stream: Stream) -> None:
        super().__init__(scheduler, stream)
        self._state: tuple[int, State] | None = None
        """The state after the last step and the run it belongs to."""
        self._lock = asyncio.Lock()
        """A step reads and writes the state: a budget probe's step must not run beside one."""

    @property
    def concurrency(self) -> int:
        return 1

    async def _run(
        self, windows: Sequence[Window], deadlines: Sequence[float | None], key: str
    ) -> list[Result]:
        return [await self._step(window, key) for window in windows]

    async def _step(self, window: Window, key: str) -> BatchResult:
        async with self._lock:
            state = self._state[1] if self._state is not None and self._state[0] == window.run else None
            try:
                (result,) = await self.scheduler.submit(key, [Job(window.hyperframe, step=True, state=state)])
            except ModelUnavailableError:
                self._state = None  # the frames it missed break the recurrence: start again from zeros
                raise
            assert isinstance(result, BatchResult)  # a step has no deadline
            self._state = (window.run, result.state)
        return result


class TiledRunner(Runner):
    """Frames larger than the tile: the model runs on overlapping tiles, one window at a time holding
    every worker (tiles are there to bound memory), and each tile's middle is kept. A streaming model
    fuses each tile from its cached maps of the whole frames."""

    def __init__(self, scheduler: InferenceScheduler, stream: Stream, inner: Runner) -> None:
        super().__init__(scheduler, stream)
        assert stream.tile is not None
        self.tile = stream.tile
        self.overlap = stream.tile_overlap
        self._inner = inner
        """The stream's runner for frames that fit: a streaming one lends its cache."""

    exclusive = True

    async def _run(
        self, windows: Sequence[Window], deadlines: Sequence[float | None], key: str
    ) -> list[Result]:
        return await self._alone(windows, self._tiled)

    def _tiled(self, window: Window) -> Pixels:
        hyperframe = window.hyperframe
        target = hyperframe.target_frame
        info = self.backend.info
        s = info.scale
        out = np.empty((target.height * s, target.width * s, 3), dtype=np.uint8)
        inner = self._inner if isinstance(self._inner, StreamingRunner) else None
        for tile in plan_tiles(target.height, target.width, self.tile, self.overlap, info.pad_multiple):
            top, bottom, left, right = tile.crop
            if inner is not None:
                pixels = self.backend.enhance_cached(
                    hyperframe, window.run, inner.features, tile.crop, inner.lock, (self.tile, self.overlap)
                )
            else:
                crops = np.stack([f.pixels[top:bottom, left:right] for f in hyperframe.frames])
                pixels = self.backend.infer(crops.transpose(0, 3, 1, 2)[None], [hyperframe.strength])[
                    0
                ].transpose(1, 2, 0)
            pt, pb, pl, pr = tile.paste
            out[pt * s : pb * s, pl * s : pr * s] = pixels[
                (pt - top) * s : (pb - top) * s, (pl - left) * s : (pr - left) * s
            ]
        return out

    def feature_stats(self) -> FeatureCacheStats:
        return self._inner.feature_stats()


def runner_kind(info: ModelInfo) -> type[Runner]:
    """The runner for a model of this description: the one place that reads its kind."""
    if info.state:
        return RecurrentRunner
    if info.streaming:
        return StreamingRunner
    if info.device_frames:
        return CachedRunner
    return WindowRunner


@dataclass(frozen=True, slots=True)
class Runners:
    """A stream's runners on one model: ``fits`` for frames within the tile, ``tiled`` (None: no tile
    set, or a model whose output is not local) for larger ones."""

    fits: Runner
    tiled: TiledRunner | None

    def of(self, width: int, height: int) -> Runner:
        """The runner for frames of this size."""
        tiled = self.tiled
        return tiled if tiled is not None and max(width, height) > tiled.tile else self.fits


def choose_runner(scheduler: InferenceScheduler, stream: Stream) -> Runners:
    """The stream's runners on the scheduler's model, chosen once."""
    fits = runner_kind(scheduler.backend.info)(scheduler, stream)
    tiled = TiledRunner(scheduler, stream, fits) if stream.tile is not None and fits.local else None
    return Runners(fits, tiled)
