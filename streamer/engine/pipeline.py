"""One stream, end to end: source -> ring -> windower -> gate -> backend -> sink.

Three asyncio tasks joined by bounded channels:

- *ingest* reads frames, keeps them in the ring, asks the windower for ready windows and the gate
  whether each needs the model, and queues a :class:`_Work` per frame in order;
- *infer* takes queued work, asks the latency budget whether each window can still make it, submits the
  admitted ones to the model's :class:`~streamer.engine.scheduler.InferenceScheduler` (shared with the other
  streams of that model, which batches windows across them; a recurrent model's steps run one after the
  other, carrying this stream's hidden state, each batched with other streams' steps) and resolves
  reused and passed-through frames in order;
- *output* writes frames to the sink and records end-to-end latency.

Every input frame leaves exactly once (enhanced, reused, passed through: by the gate, the budget, or a
model server that cannot answer) unless the budget drops it,
and leaves in order with its own PTS, because work never overtakes other work.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from streamer.backend.base import Backend
from streamer.channel import Channel, ChannelStats, DropPolicy
from streamer.core.blend import Blend, QuantizerEstimate
from streamer.core.card import no_signal_card
from streamer.core.features import FeatureCacheStats
from streamer.core.gate import GateReason, MotionGate, Region, SceneCutDetector, SkipAction
from streamer.core.keepalive import Filler, KeepAlive
from streamer.core.latency import Admission, LatencyBudget, MissAction
from streamer.core.misswatch import MissWatch, MissWatchStats
from streamer.core.noise import NoiseEstimator
from streamer.core.ring import RingBuffer
from streamer.core.windower import Windower, WindowTask
from streamer.engine.runners import Runner, Runners, Stream, Window, choose_runner, runner_kind
from streamer.engine.scheduler import BatchResult, InferenceScheduler, Late
from streamer.engine.snapshot import StreamSnapshot
from streamer.engine.tally import Outcome, PipelineReport, Tally
from streamer.engine.telemetry import Stage, StageObserver, ignore
from streamer.engine.tiers import remedy
from streamer.errors import (
    ConfigError,
    EndOfStream,
    ModelMismatchError,
    ModelUnavailableError,
    SourceError,
    StreamerError,
)
from streamer.frame import Frame, Hyperframe, Pixels, StreamInfo, Yuv420
from streamer.media.colour import resolve
from streamer.media.resize import upscale
from streamer.sinks.base import Sink
from streamer.sources.base import Source

if TYPE_CHECKING:
    from streamer.media.audio import AudioTrack

__all__ = ["Outcome", "Pipeline", "PipelineReport"]

log = logging.getLogger(__name__)


class _Plan(enum.Enum):
    ENHANCE = "enhance"
    SKIP = "skip"
    STRIDE = "stride"


@dataclass(frozen=True, slots=True)
class _Work:
    frame: Frame
    plan: _Plan
    run: int
    window: Hyperframe | None = None
    region: Region | None = None
    """Set for a region run: ``window`` holds the crop, and only ``region.paste`` replaces the last output."""
    weight: float = 1.0
    """The share of the model's change the frame gets (``streamer.core.blend``)."""


@dataclass(frozen=True, slots=True)
class _Output:
    source: Frame
    frame: Frame
    outcome: Outcome
    handed_on: float = field(default_factory=time.monotonic)
    """When the frame left the model's stage: the budget learns the time from here to written."""


_Enhanced = tuple[dict[int, Frame], set[int], bool]
"""Enhanced frames by index, the indices the budget dropped, whether the model was unavailable."""

_Started = tuple[list["_Work"], int, asyncio.Future[_Enhanced]]
"""A batch under way: its windows, the worker slots it holds, and its model call (or what the budget
decided for windows that call no model)."""


def _decided(dropped: set[int]) -> asyncio.Future[_Enhanced]:
    """The outcome of windows that call no model: already known."""
    future: asyncio.Future[_Enhanced] = asyncio.get_running_loop().create_future()
    future.set_result(({}, dropped, False))
    return future


OutputHook = Callable[[Frame, Frame, Outcome], None]
"""Called for each frame written, with the source frame, the frame sent and how it was made."""

ResizeHook = Callable[[int, int], None]
"""Called with a frame's (width, height) when a stream's frame size changes, before the frame is used;
raising refuses it: the stream ends there, its earlier frames still written, with that error."""

OpenHook = Callable[[StreamInfo], Awaitable[tuple[InferenceScheduler, bool] | None]]
"""Called once the source has opened, before the first frame is read, with what it opened: may refuse
the stream (raise: it fails, nothing is read), or return the scheduler (and its model) to run it on,
chosen on its size and rate, and whether the pipeline owns (closes) it; None keeps the model."""


class Pipeline:
    """Runs one stream once; ``stop()`` ends ingest and lets what is in flight drain."""

    def __init__(
        self,
        source: Source,
        sink: Sink,
        backend: Backend,
        windower: Windower,
        gate: MotionGate | None = None,
        budget: LatencyBudget | None = None,
        *,
        on_skip: SkipAction = SkipAction.REUSE,
        max_batch: int = 1,
        queue_size: int = 8,
        ring_capacity: int | None = None,
        on_output: OutputHook | None = None,
        scene_cuts: SceneCutDetector | None = None,
        scheduler: InferenceScheduler | None = None,
        observe: StageObserver = ignore,
        misses: MissWatch | None = None,
        on_open: OpenHook | None = None,
        on_resize: ResizeHook | None = None,
        tile: int | None = None,
        tile_overlap: int = 32,
        keepalive: Callable[[float], KeepAlive] | None = None,
        warm_up: bool | None = None,
        strength: float | Literal["auto"] = "auto",
        blend: Blend | None = None,
    ) -> None:
        self.source = source
        self._blend = blend
        """The blend set for the stream; None: the model's own (``ModelInfo.blend``)."""
        self.strength = strength
        """A model that takes a strength gets this per window: a noise sigma, or ``auto`` (the
        stream's noise estimate, the model's default until there is one); the control API sets it live."""
        self.sink = sink
        self.backend = backend
        self.windower = windower
        self.gate = gate if gate is not None else MotionGate(enabled=False)
        self.on_skip = on_skip
        self.scale = backend.info.scale
        """Output frames are this many times the source's size: unenhanced ones are scaled up to match."""
        self._fit(backend)
        self._on_open = on_open
        self._on_resize = on_resize
        self._warm_up = warm_up
        self._keepalive_for = keepalive if sink.live else None
        self.keepalive: KeepAlive | None = None
        """Made once the source's frame rate is known, for a live sink; None otherwise."""
        self._card: Pixels | None = None
        self.tile = tile
        self.tile_overlap = tile_overlap
        self.budget = budget if budget is not None else LatencyBudget()
        self.cuts = scene_cuts if scene_cuts is not None else SceneCutDetector(None)
        self.max_batch = max(1, max_batch)
        if scheduler is not None and scheduler.backend is not backend:
            raise ConfigError(
                f"the scheduler given to stream {source.stream_id!r} runs model "
                f"{scheduler.backend.info.name!r}, not this pipeline's backend; share one per backend"
            )
        self._own_scheduler = scheduler is None
        self._key = f"{source.stream_id}@{id(self):x}"
        """This pipeline's name in its scheduler: unique even where two sources share a stream id."""
        self.scheduler = scheduler if scheduler is not None else InferenceScheduler(backend, self.max_batch)
        self._observe = observe
        if ring_capacity is not None and ring_capacity < windower.history:
            raise ConfigError(
                f"runtime.ring_capacity is {ring_capacity}, below the {windower.history} frames a "
                f"T={windower.t} window can span; raise it or leave it unset"
            )
        self.ring = RingBuffer(ring_capacity or windower.history, stream_id=source.stream_id)
        self._work: Channel[_Work] = Channel(queue_size, DropPolicy.BLOCK, name=f"work:{source.stream_id}")
        self._out: Channel[_Output] = Channel(queue_size, DropPolicy.BLOCK, name=f"out:{source.stream_id}")
        self._on_output = on_output
        self._audio: AudioTrack | None = None
        """The source's audio, when the sink writes it: its queue shows beside the channels."""
        self._stopping = False
        self.opened = False
        self.last_frame_at: float | None = None
        """Monotonic time the source last delivered a frame: how the service sees a stall."""
        self.last_sent_at: float | None = None
        self.sending_since: float | None = None
        """When the sink write under way started (None: none is): how the service sees a blocked sink."""
        self.tally = Tally()
        """What the stream has done so far (``streamer.engine.tally``)."""
        self.frame_size: tuple[int, int] | None = None
        """(width, height) of the source's latest frame."""
        self._source_error: StreamerError | None = None
        """What ended the source (or refused its new size), kept until its frames are written."""
        self._probing: asyncio.Task[None] | None = None
        self._next_model: tuple[InferenceScheduler, asyncio.Future[None]] | None = None
        """A model to move to between calls (``move_to``), and who waits for the move."""
        self._run = -1
        self._model_down = False
        """The last model call found the model unavailable (a server's outage): logged once."""
        self._misses = misses if misses is not None else MissWatch()
        """Over 5% of due frames unenhanced in a minute: one warning per minute while it lasts."""
        self._runners = self._choose_runners()
        """How the stream's windows run on its model (``streamer.engine.runners``), chosen once per model."""
        self.noise = NoiseEstimator()
        """How noisy the source is (``streamer.core.noise``)."""
        self.quantizer = QuantizerEstimate()
        """How hard the camera's encoder quantized it (``streamer.core.blend``)."""

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
                f"model {model.name!r} scales frames {model.scale}x, but stream {self.source.stream_id!r}'s "
                f"output was opened for {self.scale}x; a stream keeps one output size"
            )
        region_ok = runner_kind(model).local and self.on_skip is SkipAction.REUSE and model.scale == 1
        self.gate.fit_reach(model.reach_px)
        if self.gate.tile is not None and not region_ok:
            # A region pasted over the last output needs a model whose output is a function of the
            # window alone (not of a recurrent state), on the source's pixel grid, and a last output.
            log.info(
                "stream %s: gate.tile ignored: regions need a window or streaming model (not a recurrent "
                "or a super-resolution one) and gate.on_skip reuse",
                self.source.stream_id,
            )
            self.gate.tile = None

    async def _switch(self, scheduler: InferenceScheduler, owned: bool) -> None:
        """Run on the model ``on_open`` picked; before the first frame, so no window straddles two."""
        self._fit(scheduler.backend)
        self.scheduler.detach(self._key)
        if self._own_scheduler:
            await self.scheduler.aclose()
        self.scheduler, self.backend, self._own_scheduler = scheduler, scheduler.backend, owned
        self.scheduler.attach(self._key)
        self._runners = self._choose_runners()

    def move_to(self, scheduler: InferenceScheduler) -> asyncio.Future[None]:
        """Run the stream's next windows on ``scheduler``'s model (``model: auto`` moving tiers): once
        the calls under way have ended, so no window runs on two models; a model of the same T, output
        slot, scale and kind (windows already cut carry over). The future is done once the stream has
        moved (or with the error that refused the model)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        old, self._next_model = self._next_model, (scheduler, done)
        if old is not None:
            old[1].cancel()
        return done

    async def _move(self, slots: asyncio.Semaphore, limit: int) -> None:
        """Apply a ``move_to``: every worker slot taken (the calls under way ended), the model swapped."""
        pending, self._next_model = self._next_model, None
        if pending is None:
            return
        scheduler, done = pending
        for _ in range(limit):
            await slots.acquire()
        try:
            old = self.backend.info
            new = scheduler.backend.info
            if runner_kind(new) is not runner_kind(old) or (new.t, new.output_position, new.scale) != (
                old.t,
                old.output_position,
                old.scale,
            ):
                raise ModelMismatchError(
                    f"stream {self.source.stream_id!r} cannot move from model {old.name!r} to {new.name!r} "
                    "mid-stream: they differ in kind, T, output slot or scale"
                )
            self.scheduler.detach(self._key)
            self.scheduler, self.backend = scheduler, scheduler.backend
            self.scheduler.attach(self._key)
            self._runners = self._choose_runners()
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

    def _choose_runners(self) -> Runners:
        """The stream's runners on its scheduler's model; a feature cache holds the frames of every
        window that may be in flight at once (a batch of up to ``max_batch`` windows on each of the
        model's workers, and a budget probe)."""
        features = self.windower.t + self.scheduler.workers * self.max_batch
        stream = Stream(self.source.stream_id, self._key, features, self.tile, self.tile_overlap)
        return choose_runner(self.scheduler, stream)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Stop reading the source; frames already read are still enhanced and written."""
        self._stopping = True
        self.source.interrupt()

    def counters(self) -> dict[str, int]:
        """A cheap snapshot for live displays."""
        src = self.source.stats()
        return {
            "in": self.tally.frames_in,
            "out": self.tally.frames_out,
            "calls": self.tally.model_calls,
            "skipped": self.gate.stats().skipped,
            "passthrough": self.tally.outcomes[Outcome.BUDGET_PASSTHROUGH]
            + self.tally.outcomes[Outcome.UNAVAILABLE_PASSTHROUGH],
            "dropped": self.tally.outcomes[Outcome.BUDGET_DROP] + (src.dropped if src else 0),
            "undecodable": self.source.undecodable,
        }

    def pixel_stats(self) -> tuple[int, int]:
        """(pixels of the windows due, pixels the model ran on for them): what the gate saved, tiles
        included (a region run counts its crop)."""
        return self.tally.pixels_due, self.tally.pixels_enhanced

    def outcome_counts(self) -> dict[str, int]:
        """Frames by how they left (or were dropped), so far."""
        return self.tally.outcome_counts()

    def live_figures(self, now: float) -> dict[str, object]:
        """What a live display shows: frames per second in and out over the last seconds, latency
        (source arrival to written) over the last :data:`RECENT_FRAMES`, the frame size, the share of
        the frames written so far that the model enhanced (the rest reused, or passed through), and how
        many frames a second the latency budget is passing through or dropping now."""
        return {
            **self.tally.live(now),
            "size": None if self.frame_size is None else f"{self.frame_size[0]}x{self.frame_size[1]}",
            "noise_sigma": None if self.noise.sigma is None else round(self.noise.sigma, 1),
            "quantizer": None if self.quantizer.quantizer is None else round(self.quantizer.quantizer, 1),
            "blend": round(self.weight_now(), 2),
            "strength": self.strength_status(),
        }

    def strength_now(self) -> float | None:
        """The strength windows get now: the set one, or (auto) the noise estimate; None: the model's
        default (auto before the first estimate)."""
        if self.strength == "auto":
            sigma = self.noise.sigma
            return None if sigma is None else self.backend.info.auto_strength(sigma)
        return float(self.strength)

    def weight_now(self) -> float:
        """The share of the model's change frames get now, by the stream's quantizer and noise."""
        blend = self._blend if self._blend is not None else self.backend.info.blend
        return blend.weight(self.quantizer.quantizer, self.noise.sigma)

    def strength_status(self) -> dict[str, object] | None:
        """What ``/streams`` shows of the strength; None for a model that takes none."""
        if not self.backend.info.strength:
            return None
        now = self.strength_now()
        value = self.backend.info.strength_default if now is None else now
        return {"setting": self.strength, "value": round(value, 1)}

    def miss_stats(self) -> MissWatchStats:
        """How often this stream was warned about for passing over 5% of its frames through in a minute."""
        return self._misses.stats()

    def feature_stats(self) -> FeatureCacheStats:
        """Frames encoded, reused and cache resets of a streaming model (all zero for other models)."""
        return self._runners.fits.feature_stats()

    def snapshot(self, now: float) -> StreamSnapshot:
        """The stream's figures now, for ``/streams``, ``/metrics`` and the viewer."""
        info, source = self.backend.info, self.source.stats()
        keepalive = self.keepalive
        return StreamSnapshot(
            model=info.name,
            provider=info.provider,
            counters=self.counters(),
            outcomes=self.outcome_counts(),
            live=self.live_figures(now),
            gate=self.gate.stats(),
            features=self.feature_stats(),
            misses=self.miss_stats(),
            queues=self.queue_stats(),
            source_dropped=0 if source is None else source.dropped,
            sink_dropped=self.sink.frames_dropped,
            sink_reconnects=self.sink.reconnects,
            connection=self.source.connection(),
            outputs=self.sink.outputs(),
            noise_sigma=self.noise.sigma,
            quantizer=self.quantizer.quantizer,
            weight=self.weight_now(),
            keepalive=None if keepalive is None else keepalive.stats(),
            in_gap=keepalive is not None and keepalive.in_gap,
        )

    def recorder_bytes(self) -> int:
        """Memory of the latency and inference samples kept for the report: bounded by construction."""
        return self.tally.nbytes

    def queue_stats(self) -> list[ChannelStats]:
        """The bounded hand-offs of this stream: the source's (if it has one), work, output, and the
        audio queue from a file source to a file sink (if there is one)."""
        src = self.source.stats()
        audio = [self._audio.stats()] if self._audio is not None else []
        return [*([src] if src is not None else []), self._work.stats(), self._out.stats(), *audio]

    async def run(self) -> PipelineReport:
        started = time.monotonic()
        self.source.observe_decode(lambda seconds: self._observe(Stage.DECODE, seconds))
        self.scheduler.attach(self._key)
        try:
            info = await self.source.open()
            self.opened = self._on_open is None
            try:
                self._pair_audio()
                s = self.scale
                await self.sink.open(dataclasses.replace(info, width=info.width * s, height=info.height * s))
                await self._stages(info)
            finally:
                await self.source.aclose()
        finally:
            self.scheduler.detach(self._key)
            if self._own_scheduler:
                await self.scheduler.aclose()
        return self._report(info, time.monotonic() - started)

    def _pair_audio(self) -> None:
        """The source's audio goes to the sink when the sink writes audio; else the source skips it.
        Either way before the sink opens: the source's demuxer waits for the answer."""
        track = self.source.audio
        if track is None:
            return
        if self.sink.attach_audio(track):
            self._audio = track
        else:
            track.decline()

    async def _stages(self, info: StreamInfo) -> None:
        """The three tasks, then the sink closed; the first error wins over one closing the sink adds."""
        stream = self.source.stream_id
        error: BaseException | None = None
        if self._keepalive_for is not None:
            self.keepalive = self._keepalive_for(float(info.fps))
        try:
            if self._on_open is not None:  # the sink is open, so players are not kept waiting for it
                chosen = await self._on_open(info)
                if chosen is not None:
                    await self._switch(*chosen)
                self.opened = True  # a model probe reads as connecting, not as a stall
            await self._warmed(info)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._ingest(info), name=f"ingest-{stream}")
                group.create_task(self._infer(), name=f"infer-{stream}")
                group.create_task(self._output(), name=f"output-{stream}")
        except BaseExceptionGroup as group_error:
            error = group_error.exceptions[0]
        finally:
            try:
                await self.sink.aclose()
            except Exception as close_error:
                if error is None:
                    raise
                log.warning(
                    "stream %s: closing the sink after the failure also failed: %s", stream, close_error
                )
        if error is not None:
            raise error from None
        failed = self._source_error
        if failed is not None:
            raise type(failed)(
                f"{failed} ({self.tally.frames_out} frames delivered before it were written)"
            ) from failed

    async def _warmed(self, info: StreamInfo) -> None:
        """The model run once at the stream's size (a tile's, for frames it tiles), in a worker thread,
        where ``warm_up`` says so (None: on GPU providers)."""
        backend = self.backend
        wanted = self._warm_up if self._warm_up is not None else not backend.info.on_cpu
        if not wanted:
            return
        width, height = info.width, info.height
        tiled = self._runners.tiled
        if tiled is not None and max(width, height) > tiled.tile:
            width, height = min(width, tiled.tile), min(height, tiled.tile)
        started = time.monotonic()
        colour = planes_in = None
        if backend.info.yuv420:  # the encoder's planes, and the decoder's where the source hands them on
            colour = resolve(info.colour, height * self.scale)
            planes_in = resolve(info.colour, height) if info.planes else None
        await asyncio.to_thread(backend.warm_up, width, height, self.max_batch, colour, planes_in)
        log.info(
            "stream %s: model %s warmed up at %dx%d on %s in %.0f ms",
            self.source.stream_id,
            backend.info.name,
            width,
            height,
            backend.info.provider,
            1000 * (time.monotonic() - started),
        )

    async def _ingest(self, info: StreamInfo) -> None:
        size = (info.width, info.height)
        fps = float(info.fps) if info.fps > 0 else 30.0
        try:
            while not self._stopping:
                try:
                    frame = await self.source.recv()
                except EndOfStream:
                    break
                except SourceError as err:  # what it delivered is still enhanced and written
                    self._source_error = err
                    break
                if (frame.width, frame.height) != size and self._on_resize is not None:
                    try:
                        self._on_resize(frame.width, frame.height)
                    except StreamerError as err:  # as a source error: what came before is written
                        self._source_error = err
                        break
                size = self.frame_size = (frame.width, frame.height)
                self.last_frame_at = time.monotonic()
                self.tally.received(self.last_frame_at)
                if self.keepalive is not None:
                    self.keepalive.received(self.last_frame_at)
                self.ring.push(frame)
                self.noise.observe(frame.picture, frame.time if frame.time is not None else frame.index / fps)
                self.quantizer.observe(frame.quantizer)
                if self.cuts.is_cut(frame.picture):
                    frame = dataclasses.replace(frame, discontinuity=True)
                for task in self.windower.push(frame):
                    await self._work.put(self._plan(task, info))
                self.ring.release_before(self.windower.oldest_needed)
            for task in self.windower.flush():
                await self._work.put(self._plan(task, info))
        finally:
            self._work.close()

    def _plan(self, task: WindowTask, info: StreamInfo) -> _Work:
        frame = self.ring.get(task.target)
        if task.run != self._run:
            self._run = task.run
            self.gate.reset()
        if not task.enhance:
            return _Work(frame, _Plan.STRIDE, task.run)
        strength = self.strength_now() if self.backend.info.strength else None
        # A model that gives the encoder 4:2:0 planes makes them in the colour the sinks encode with.
        colour = resolve(info.colour, frame.height * self.scale) if self.backend.info.yuv420 else None
        window = Hyperframe(
            tuple(self.ring.get(i) for i in task.indices), task.slot, info.fps, strength, colour
        )
        started = time.monotonic()
        self._observe(Stage.WINDOW_WAIT, started - frame.arrival)
        now = frame.time if frame.time is not None else frame.index / float(info.fps)
        decision = self.gate.decide(window, now=now)
        self._observe(Stage.GATE, time.monotonic() - started)
        if decision.reason is GateReason.FIRST and task.run > 0:
            log.info("stream %s: new run %d at frame %d", frame.stream_id, task.run, frame.index)
        runner = self._runners.of(frame.width, frame.height)
        region = decision.region if not runner.exclusive else None
        self.tally.pixels_due += frame.width * frame.height
        if region is not None and runner.regions_on_grid:
            # Its cached maps are of whole frames: the crop is cut from them, on the model's grid.
            region = region.aligned(self.backend.info.pad_multiple, frame.height, frame.width)
        elif region is not None:
            top, bottom, left, right = region.crop
            window = Hyperframe(
                tuple(f.with_pixels(f.pixels[top:bottom, left:right]) for f in window.frames),
                window.target,
                window.fps,
                window.strength,
            )
        if decision.run_model:
            whole = frame.width * frame.height
            self.tally.pixels_enhanced += region.crop_pixels if region is not None else whole
        plan = _Plan.ENHANCE if decision.run_model else _Plan.SKIP
        return _Work(frame, plan, task.run, window, region, self.weight_now())

    async def _infer(self) -> None:
        """Starts the model on windows, up to the model's ``workers`` at once (one for a recurrent model,
        whose steps chain; a frame larger than ``tile`` alone, as tiles are there to bound memory), and
        hands their frames on in order."""
        limit = self._runners.fits.concurrency
        slots = asyncio.Semaphore(limit)
        started: asyncio.Queue[_Started | None] = asyncio.Queue()

        async def start(group: asyncio.TaskGroup) -> None:
            try:
                while True:
                    await self._move(slots, limit)
                    await slots.acquire()
                    try:
                        batch = [await self._work.get()]
                    except EndOfStream:
                        break
                    while len(batch) < self.max_batch and (more := self._work.get_nowait()) is not None:
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
                    await self._out.put(out)

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(start(group), name=f"start-{self.source.stream_id}")
                group.create_task(hand_on(), name=f"hand-on-{self.source.stream_id}")
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        finally:
            self._out.close()
            if self._probing is not None:
                self._probing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._probing

    def _admit(self, batch: list[_Work]) -> tuple[list[_Work], set[int]]:
        """Which windows of ``batch`` the latency budget lets run the model, and the indices it drops."""
        now = time.monotonic()
        admitted: list[_Work] = []
        dropped: set[int] = set()
        for work in batch:
            if work.plan is _Plan.ENHANCE:
                admission = self.budget.admit(work.frame.arrival, now)
                if admission is Admission.RUN:
                    admitted.append(work)
                    continue
                if admission is Admission.PROBE:
                    self._probe(work)
                if self.budget.on_miss is MissAction.DROP:
                    dropped.add(work.frame.index)
        return admitted, dropped

    async def _enhance(self, admitted: list[_Work], dropped: set[int]) -> _Enhanced:
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

    def _deadlines(self, admitted: list[_Work]) -> list[float | None]:
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
                self.source.stream_id,
                err,
            )

    def _probe(self, work: _Work) -> None:
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
                log.info("stream %s: a budget probe failed: %s", self.source.stream_id, err)
                return
            self.budget.observe(time.monotonic() - started)

        self._probing = asyncio.create_task(measure(), name=f"probe-{self.source.stream_id}")

    def _runner(self, work: _Work) -> Runner:
        """The runner for the work's frame size (tiles for frames larger than ``tile``)."""
        return self._runners.of(work.frame.width, work.frame.height)

    @staticmethod
    def _window(work: _Work) -> Window:
        window = work.window
        assert window is not None
        crop = None if work.region is None else work.region.crop
        return Window(window, work.run, crop, work.frame)

    def _resolve(
        self,
        work: _Work,
        enhanced: dict[int, Frame],
        dropped: set[int],
        last: tuple[int, Frame] | None,
        failed_open: bool = False,
    ) -> _Output | None:
        frame = work.frame
        if work.plan is _Plan.STRIDE:
            return self._count(_Output(frame, frame, Outcome.STRIDE_PASSTHROUGH))
        if work.plan is _Plan.ENHANCE and failed_open and frame.index not in dropped:
            return self._count(_Output(frame, frame, Outcome.UNAVAILABLE_PASSTHROUGH))
        if work.plan is _Plan.ENHANCE:
            done = enhanced.get(frame.index)
            if done is not None and self._model_down:
                self._model_down = False
                log.warning("stream %s: the model answers again; frames are enhanced", self.source.stream_id)
            if self.budget.budget_ms is not None:
                self._watch_misses(frame, missed=done is None)
            if done is not None and work.region is not None:
                done = frame.enhanced(self._paste(work.region, frame, done, last, work.run), work.weight)
            if done is not None:
                return self._count(_Output(frame, done, Outcome.ENHANCED))
            if frame.index in dropped:
                self.tally.left(Outcome.BUDGET_DROP, time.monotonic())
                return None
            return self._count(_Output(frame, frame, Outcome.BUDGET_PASSTHROUGH))
        if self.on_skip is SkipAction.REUSE and last is not None and last[0] == work.run:
            return self._count(_Output(frame, frame.showing(last[1]), Outcome.REUSED))
        return self._count(_Output(frame, frame, Outcome.GATE_PASSTHROUGH))

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
        if not self._misses.observe(time.monotonic(), missed):
            return
        model = self.backend.info
        log.warning(
            "stream %s: %.0f%% of the frames due for enhancement left unenhanced over the last minute "
            "(model %s at %dx%d, latency.budget_ms %g): this machine cannot keep that up; %s",
            frame.stream_id,
            100 * self._misses.share(),
            model.name,
            frame.width,
            frame.height,
            self.budget.budget_ms,
            remedy(model.name),
        )

    def _count(self, out: _Output) -> _Output:
        self.tally.left(out.outcome, time.monotonic())
        return out

    async def _output(self) -> None:
        """Writes frames in order; for a live sink, keeps the output's clock while none come."""
        keepalive = self.keepalive
        last: Frame | None = None
        waiting: asyncio.Future[_Output] | None = None
        try:
            while True:
                if waiting is None:
                    waiting = asyncio.ensure_future(self._out.get())
                due = None if keepalive is None else keepalive.due_in(time.monotonic())
                done, _ = await asyncio.wait({waiting}, timeout=due)
                if not done:  # a timeout: only a keep-alive sets one, once a frame has gone out
                    filler = None if keepalive is None else keepalive.fill(time.monotonic())
                    if filler is not None and last is not None:
                        last = self._filler(last, filler)
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

    def _filler(self, last: Frame, filler: Filler) -> Frame:
        """The frame a silent source leaves the output: ``last`` again, or the card, one period on."""
        keepalive = self.keepalive
        assert keepalive is not None
        pts = None
        if last.pts is not None:
            pts = last.pts + max(1, round(keepalive.period_s / float(last.time_base)))
        moved = dataclasses.replace(last, pts=pts, arrival=time.monotonic(), discontinuity=False)
        if filler is Filler.CARD:
            if self._card is None or self._card.shape[:2] != (last.height, last.width):
                self._card = no_signal_card(last.width, last.height)
            return moved.with_pixels(self._card)
        return moved.showing(last)

    def _report(self, info: StreamInfo, wall: float) -> PipelineReport:
        src = self.source.stats()
        gate = self.gate.stats()
        return PipelineReport(
            stream_id=self.source.stream_id,
            info=info,
            model=self.backend.info.name,
            provider=self.backend.info.provider,
            frames_in=self.tally.frames_in,
            frames_out=self.tally.frames_out,
            source_dropped=src.dropped if src else 0,
            outcomes=self.outcome_counts(),
            model_calls=self.tally.model_calls,
            windows_enhanced=self.tally.outcomes[Outcome.ENHANCED],
            windows_skipped=gate.skipped,
            discontinuities=self.windower.discontinuities,
            wall_s=wall,
            latency_p50_ms=self.tally.latency.percentile_ms(50),
            latency_p95_ms=self.tally.latency.percentile_ms(95),
            latency_p99_ms=self.tally.latency.percentile_ms(99),
            inference_p50_ms=self.tally.inference.percentile_ms(50),
            lookahead_frames=self.windower.lookahead,
            batch_sizes=dict(sorted(self.tally.batches.items())),
        )
