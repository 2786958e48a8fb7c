"""The model one stream runs on: its backend, the scheduler it shares with the model's other streams,
and the stream's runners on it.

A stream's model changes in two ways, both here: ``on_open`` picks one before the first frame is read
(:meth:`ModelBinding.switch`), and ``model: auto`` moves a running stream between tiers of the same
kind (:meth:`ModelBinding.move_to`, applied by the inference stage between calls). Either way the model
is checked against the stream's windows and output first, and the runners are chosen again, once.
"""

from __future__ import annotations

import asyncio
import logging

from streamer.backend.base import Backend
from streamer.core.gate import MotionGate, SkipAction
from streamer.core.windower import Windower
from streamer.engine.runners import Runner, Runners, Stream, choose_runner, runner_kind
from streamer.engine.scheduler import InferenceScheduler
from streamer.engine.settings import PipelineSettings
from streamer.errors import ConfigError, ModelMismatchError

__all__ = ["ModelBinding"]

log = logging.getLogger(__name__)

Move = tuple[InferenceScheduler, asyncio.Future[None]]
"""A model to move to between calls, and who waits for the move."""


class ModelBinding:
    """One stream's hold on its model; ``backend``, ``scheduler`` and ``runners`` change together."""

    def __init__(
        self,
        stream_id: str,
        backend: Backend,
        scheduler: InferenceScheduler | None,
        windower: Windower,
        gate: MotionGate,
        settings: PipelineSettings,
    ) -> None:
        self.stream_id = stream_id
        self.windower = windower
        self.gate = gate
        self.settings = settings
        self.scale = backend.info.scale
        """Output frames are this many times the source's size, whichever model the stream moves to."""
        self._fit(backend)
        if scheduler is not None and scheduler.backend is not backend:
            raise ConfigError(
                f"the scheduler given to stream {stream_id!r} runs model "
                f"{scheduler.backend.info.name!r}, not this pipeline's backend; share one per backend"
            )
        self.shed: str | None = None
        """Why the stream's frames pass through without the model for now (``Pipeline.shed``); None
        while the model runs."""
        self.key = f"{stream_id}@{id(self):x}"
        """The stream's name in its scheduler: unique even where two sources share a stream id."""
        self.backend = backend
        self.owned = scheduler is None
        """Whether the stream made its scheduler, and so closes it."""
        self.scheduler = (
            scheduler if scheduler is not None else InferenceScheduler(backend, settings.max_batch)
        )
        self.runners = self._choose_runners()
        """How the stream's windows run on its model (``streamer.engine.runners``), chosen once per model."""
        self._next: Move | None = None

    def _fit(self, backend: Backend) -> None:
        """Refuse a model whose T or output slot differs from the windower's; drop gate.tile for a
        model that cannot run on a region."""
        model = backend.info
        windower = self.windower
        if windower.t != model.t:
            raise ModelMismatchError(
                f"window.t is {windower.t} but model {model.name!r} was exported with T={model.t}; "
                f"set window.t to {model.t} or leave it unset to take the model's"
            )
        if windower.position is not model.output_position:
            raise ModelMismatchError(
                f"window.position is {windower.position.value!r} but model {model.name!r} outputs the "
                f"{model.output_position.value!r} frame; set window.position to "
                f"{model.output_position.value!r}"
            )
        if model.scale != self.scale:
            raise ModelMismatchError(
                f"model {model.name!r} scales frames {model.scale}x, but stream {self.stream_id!r}'s "
                f"output was opened for {self.scale}x; a stream keeps one output size"
            )
        region_ok = (
            runner_kind(model).local and self.settings.on_skip is SkipAction.REUSE and model.scale == 1
        )
        self.gate.fit_reach(model.reach_px)
        if self.gate.tile is not None and not region_ok:
            # A region pasted over the last output needs a model whose output is a function of the
            # window alone (not of a recurrent state), on the source's pixel grid, and a last output.
            log.info(
                "stream %s: gate.tile ignored: regions need a window or streaming model (not a recurrent "
                "or a super-resolution one) and gate.on_skip reuse",
                self.stream_id,
            )
            self.gate.tile = None

    def _choose_runners(self) -> Runners:
        """The stream's runners on its scheduler's model; a feature cache holds the frames of every
        window that may be in flight at once (a batch of up to ``max_batch`` windows on each of the
        model's workers, and a budget probe)."""
        settings = self.settings
        features = self.windower.t + self.scheduler.workers * settings.max_batch
        stream = Stream(self.stream_id, self.key, features, settings.tile, settings.tile_overlap)
        return choose_runner(self.scheduler, stream)

    def runner(self, width: int, height: int) -> Runner:
        """The runner for frames of this size (tiles for frames larger than ``tile``)."""
        return self.runners.of(width, height)

    def attach(self) -> None:
        """Join the scheduler's streams (its batches wait for this stream's windows too)."""
        self.scheduler.attach(self.key)

    async def release(self) -> None:
        """Leave the scheduler, and close it where the stream made it."""
        self.scheduler.detach(self.key)
        if self.owned:
            await self.scheduler.aclose()

    async def switch(self, scheduler: InferenceScheduler, owned: bool) -> None:
        """Run on the model ``on_open`` picked; before the first frame, so no window straddles two."""
        self._fit(scheduler.backend)
        await self.release()
        self.scheduler, self.backend, self.owned = scheduler, scheduler.backend, owned
        self.attach()
        self.runners = self._choose_runners()

    def move_to(self, scheduler: InferenceScheduler) -> asyncio.Future[None]:
        """Run the stream's next windows on ``scheduler``'s model (``model: auto`` moving tiers): once
        the calls under way have ended, so no window runs on two models; a model of the same T, output
        slot, scale and kind (windows already cut carry over). The future is done once the stream has
        moved (or with the error that refused the model)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        old, self._next = self._next, (scheduler, done)
        if old is not None:
            old[1].cancel()
        return done

    def take_move(self) -> Move | None:
        """The move asked for since the last one taken, if any: its taker applies it with :meth:`move`."""
        pending, self._next = self._next, None
        return pending

    def move(self, scheduler: InferenceScheduler) -> None:
        """Swap to ``scheduler``'s model mid-stream, with no call under way; refused (raises
        :class:`ModelMismatchError`) for a model of another kind, T, output slot or scale."""
        old = self.backend.info
        new = scheduler.backend.info
        if runner_kind(new) is not runner_kind(old) or (new.t, new.output_position, new.scale) != (
            old.t,
            old.output_position,
            old.scale,
        ):
            raise ModelMismatchError(
                f"stream {self.stream_id!r} cannot move from model {old.name!r} to {new.name!r} "
                "mid-stream: they differ in kind, T, output slot or scale"
            )
        self.scheduler.detach(self.key)
        self.scheduler, self.backend = scheduler, scheduler.backend
        self.scheduler.attach(self.key)
        self.runners = self._choose_runners()
