"""Many streams in one process: each its own pipeline, the streams of one model sharing its batches.

A stream is isolated from the others: its pipeline runs in a task of its own, and whatever ends it (its
source dying, its sink failing, frames it cannot process) is caught there, logged once, and reported
as that stream's ``failed`` state while the rest go on. A stuck sink stalls only its own stream: the
shared scheduler never waits for a stream, it batches what the others submit. Streams can be added and
removed while the process runs. Shutdown stops every source, lets in-flight frames drain within
``runtime.drain_timeout_s``, then cancels what is left; sinks are closed either way, so files stay
valid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from streamer.app import build_backend, build_server, build_stream, build_windower, choose_tier, probe_engines
from streamer.assets import AUTO_TIERS
from streamer.backend.base import Backend
from streamer.config import Config, ModelConfig, StreamConfig, SyntheticSourceConfig
from streamer.core.admission import ACTIVATION_BYTES_PER_PIXEL, MemoryBudget, StreamCost, stream_cost
from streamer.core.health import HealthLimits, StreamState
from streamer.core.tiering import NeighbourLoad, TierMove
from streamer.engine.pipeline import OpenHook, OutputHook, PipelineReport, ResizeHook
from streamer.engine.retier import Retier
from streamer.engine.scheduler import InferenceScheduler
from streamer.engine.tiers import AUTO, TierSelector
from streamer.errors import (
    ConfigError,
    LimitError,
    OutOfMemoryError,
    OutputTakenError,
    StreamerError,
    StreamExistsError,
)
from streamer.frame import StreamInfo
from streamer.measure.machine import busy_s
from streamer.serving.memory import default_budget_bytes, process_rss, release_memory
from streamer.serving.metrics import ServiceMetrics
from streamer.serving.shedding import STARVED_BELOW, Shedder
from streamer.serving.stream_runner import StreamRunner, model_key
from streamer.webrtc.server import WebRtcServer

__all__ = ["Service", "StreamResult"]

log = logging.getLogger(__name__)

_MONITOR_PERIOD_S = 0.25

_MOVE_TIMEOUT_S = 30.0
"""How long a tier move waits for the stream's calls under way to end before it is given up."""
_ABANDON_AFTER_S = 5.0
"""How long a cancelled stream may take to close its sink before shutdown goes on without it."""


@dataclass(frozen=True, slots=True)
class StreamResult:
    """How one stream ended: its report, or the error that stopped it."""

    stream_id: str
    report: PipelineReport | None
    error: BaseException | None


@dataclass(slots=True)
class _Model:
    backend: Backend
    scheduler: InferenceScheduler


class Service:
    """Runs the streams of a :class:`Config`; ``run()`` returns once they have all ended (or, with the
    HTTP endpoint on, once ``request_stop()`` is called), having shut down cleanly."""

    def __init__(
        self,
        config: Config,
        metrics: ServiceMetrics | None = None,
        on_output: OutputHook | None = None,
        log_failures: bool = True,
        tiers: TierSelector | None = None,
    ) -> None:
        self.config = config
        self._log_failures = log_failures
        """False where the caller reports a failed stream itself (the one-stream CLI's error line)."""
        self.metrics = metrics if metrics is not None else ServiceMetrics()
        self.metrics.bind(self)
        self._on_output = on_output
        self.server: WebRtcServer | None = build_server(config)
        self.runners: dict[str, StreamRunner] = {}
        self.abandoned: set[str] = set()
        """Streams whose sink never returned from a write, even cancelled: their threads are stuck."""
        self._models: dict[str, _Model] = {}
        self._pinned: set[str] = set()
        """Models a tier move is loading or moving a stream to: not released meanwhile."""
        budget_mb = config.runtime.memory_budget_mb
        self.budget = MemoryBudget(
            budget_mb * 2**20 if budget_mb is not None else default_budget_bytes(), process_rss() or 0
        )
        """What the process may hold: its own, and the streams' estimates (streamer.core.admission)."""
        self._tiers = tiers if tiers is not None else TierSelector()
        """``model: auto``'s probes, kept per frame size for the process's life."""
        self._shedder = Shedder(self._tiers)
        self._neighbours = NeighbourLoad()  # the cores other processes keep busy hold back moves up
        self._limits = HealthLimits(config.runtime.stall_after_s, config.runtime.sink_blocked_after_s)
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        self._monitor: asyncio.Task[None] | None = None
        self._closed = False

    # --- lifecycle -------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Build every configured stream (models loaded, T checked) before anything is opened, so a bad
        config fails at once, naming the stream."""
        for stream in self.config.stream_configs():
            self._build(stream)

    async def run(self) -> list[StreamResult]:
        if not self.runners:
            self.prepare()
        for runner in self.runners.values():
            await self._calibrate(runner.config.model)
        if self.server is not None:
            await self.server.start()
        try:
            for runner in list(self.runners.values()):
                self._start(runner)
            self._monitor = asyncio.create_task(self._watch(), name="stream-monitor")
            keep_serving = self.config.http.port is not None
            while not self._stop.is_set():
                if not keep_serving and all(r.done for r in self.runners.values()):
                    break
                self._changed.clear()
                await self._changed.wait()
            return await self._shutdown()
        finally:
            await self._close()

    def request_stop(self) -> None:
        """SIGTERM/SIGINT: stop ingest everywhere and shut down (safe to call from a signal handler)."""
        if not self._stop.is_set():
            log.warning(
                "stopping: draining in-flight frames (up to %g s)", self.config.runtime.drain_timeout_s
            )
        self._stop.set()
        self._changed.set()
        for runner in self.runners.values():
            runner.pipeline.stop()

    async def _shutdown(self) -> list[StreamResult]:
        """Stop every stream, drain within the deadline, cancel the rest; the results of all streams."""
        for runner in self.runners.values():
            runner.pipeline.stop()
        await self._drain(list(self.runners.values()))
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
            self._monitor = None
        self._log_changes(time.monotonic())
        return [StreamResult(r.id, r.report, r.error) for r in self.runners.values()]

    # --- streams at run time ---------------------------------------------------------------------

    async def add(self, stream: StreamConfig) -> StreamRunner:
        """Start one more stream. Raises StreamExistsError for a taken id, OutputTakenError for an output
        another running stream writes, ConfigError/ModelError for a stream that cannot be built."""
        if self._stop.is_set():
            raise ConfigError(f"cannot add stream {stream.id!r}: the service is shutting down")
        if stream.uses_webrtc and self.server is None:
            raise ConfigError(
                f"stream {stream.id!r} uses WebRTC but this process has no WHIP/WHEP server; start it with "
                "a WebRTC stream in its config"
            )
        running = len(self.runners)
        if running >= self.config.http.max_streams:
            raise LimitError(
                f"{running} streams are running, http.max_streams; remove one (DELETE /streams/{{id}}) "
                "or raise the cap"
            )
        self.check_free(stream)  # before a model is loaded for it
        await self._load(stream.model)
        self.budget.settle(process_rss())  # a model loaded for it is the process's from now on
        await asyncio.to_thread(probe_engines, stream)
        await self._calibrate(stream.model)
        runner = self._build(stream)
        self._start(runner)
        return runner

    async def remove(self, stream_id: str) -> StreamResult:
        """Stop one stream: ingest ends, in-flight frames drain (within the deadline), its sink closes."""
        runner = self.runners.get(stream_id)
        if runner is None:
            raise ConfigError(f"no stream {stream_id!r}; running: {sorted(self.runners)}")
        runner.pipeline.stop()
        await self._drain([runner])
        del self.runners[stream_id]
        self.metrics.forget(stream_id)
        await self._release_models()
        result = StreamResult(runner.id, runner.report, runner.error)
        del runner  # the last reference to its pipeline: collected below, not at some later collection
        await asyncio.to_thread(release_memory)
        self.budget.settle(process_rss())
        log.warning("stream %s: removed", stream_id)
        self._changed.set()
        return result

    def _retier(self, now: float) -> None:
        """Start the tier move each auto stream's load calls for, one at a time per stream."""
        neighbours = self._neighbours.observe(now, *busy_s())
        for runner in self.runners.values():
            retier, pipeline = runner.retier, runner.pipeline
            if retier is None or not self._movable(runner):
                continue
            before = retier.controller.current
            call_ms = pipeline.budget.stats().estimate_ms
            streams = 1 + self._shedder.enhanced(runner, self.runners.values())
            ceiling = retier.ceiling(self._tiers, runner.config.model.session_key(), streams)
            move = retier.due(now, pipeline.tally, call_ms, pipeline.scheduler.workers, neighbours, ceiling)
            if move is not None:
                runner.moving = asyncio.create_task(self._move_tier(runner, before, move))
            elif (share := retier.starved(now, STARVED_BELOW)) is not None:
                self._shedder.starved(runner, share, self.runners.values(), now)

    def _movable(self, runner: StreamRunner) -> bool:
        """Whether an auto stream may be moved now: running, opened, given the model, no move under way."""
        pipeline, moving = runner.pipeline, runner.moving
        idle = moving is None or moving.done()
        running = not runner.done and pipeline.opened and not self._stop.is_set()
        return running and idle and pipeline.shed_reason is None

    def _make_room(self, joined: StreamRunner, streams: int) -> None:
        """A stream joining the others on these cores: each other auto stream on a better tier than the
        cards say keeps up with ``streams`` streams of its size moves down to that tier at once, rather
        than after a window of frames it could not enhance."""
        now = time.monotonic()
        for runner in self.runners.values():
            retier = runner.retier
            if runner is joined or retier is None or not self._movable(runner):
                continue
            before = retier.controller.current
            move = retier.make_room(self._tiers, runner.config.model.session_key(), streams, now)
            if move is not None:
                runner.moving = asyncio.create_task(self._move_tier(runner, before, move))

    async def _move_tier(self, runner: StreamRunner, before: int, move: TierMove) -> None:
        """Load the tier (off the event loop), move the stream to it between calls, release the old."""
        assert runner.retier is not None
        settings = runner.config.model.with_file(AUTO_TIERS[move.to])
        key = model_key(settings)
        left = runner.pipeline.backend.info.name
        self._pinned.add(key)
        try:
            model = await self._load(settings)
            await asyncio.wait_for(runner.pipeline.move_to(model.scheduler), _MOVE_TIMEOUT_S)
        except (TimeoutError, StreamerError) as err:
            runner.retier.undo(before)
            log.warning("stream %s: model auto could not move tiers: %s", runner.id, err)
            return
        finally:
            self._pinned.discard(key)
        runner.model_key = key
        made = runner.retier.moved(before, move, (left, model.backend.info.name))
        log.warning(
            "stream %s: model auto moved %s from %s to %s: %s",
            runner.id,
            "down" if made.down else "up",
            made.tier_from,
            made.tier_to,
            made.reason,
        )
        await self._release_models()

    async def _release_models(self) -> None:
        """Close the models no stream uses any more: a session per distinct model config, not for ever."""
        used = {r.model_key for r in self.runners.values()} | self._pinned
        for key in [k for k in self._models if k not in used]:
            model = self._models.pop(key)
            await model.scheduler.aclose()
            model.backend.close()

    async def _reap(self, now: float) -> None:
        """Streams that ended more than ``http.ended_retention_s`` ago leave /streams and /metrics."""
        retention = self.config.http.ended_retention_s
        for runner in list(self.runners.values()):
            ended = runner.ended_at is not None and now - runner.ended_at >= retention
            if ended and self.runners.get(runner.id) is runner:
                await self.remove(runner.id)

    def statuses(self) -> list[dict[str, object]]:
        now = time.monotonic()
        return [r.status(now) for r in self.runners.values()]

    def states(self) -> dict[str, StreamState]:
        now = time.monotonic()
        return {r.id: r.state(now) for r in self.runners.values()}

    def schedulers(self) -> list[InferenceScheduler]:
        return [m.scheduler for m in self._models.values()]

    # --- internals -------------------------------------------------------------------------------

    def _model(self, stream: StreamConfig) -> _Model:
        key = model_key(stream.model)
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = self._new_model(build_backend(stream.model))
        return model

    async def _load(self, settings: ModelConfig) -> _Model:
        """The loaded model of ``settings``, loaded now (in a worker thread) if no stream runs it."""
        key = model_key(settings)
        if key not in self._models:
            backend = await asyncio.to_thread(build_backend, settings)
            if key in self._models:  # loaded meanwhile by another stream
                backend.close()
            else:
                self._models[key] = self._new_model(backend)
        return self._models[key]

    def _cost(self, stream: StreamConfig, width: int, height: int, backend: Backend) -> StreamCost:
        """What a stream of this size will hold: its ring and the queues' frames, a streaming model's
        cached maps (T, and one more per window that may be in flight), and the activations of the model
        calls it may have under way at once (a tile's each, with model.tile)."""
        runtime, model, calls = self.config.runtime, backend.info, max(1, backend.workers)
        ring = runtime.ring_capacity or build_windower(stream.window, model.t, model.output_position).history
        cached = model.t + calls
        return stream_cost(
            width,
            height,
            frames_held=ring + 3 * runtime.queue_size + 2,
            feature_bytes_per_pixel=sum(4 * f.channels / f.scale**2 for f in model.features) * cached,
            tile=stream.model.tile,
            tile_overlap=stream.model.tile_overlap,
            calls=1 if model.state else calls,
            activation_bytes_per_pixel=model.activation_bytes_per_pixel or ACTIVATION_BYTES_PER_PIXEL,
        )

    def _on_resize(self, stream: StreamConfig) -> ResizeHook:
        """A new frame size mid-stream is admitted again: one that no longer fits ends that stream."""

        def on_resize(width: int, height: int) -> None:
            backend = self.runners[stream.id].pipeline.backend
            self.budget.admit(stream.id, self._cost(stream, width, height, backend))

        return on_resize

    def _on_open(self, stream: StreamConfig) -> OpenHook:
        """Once the source has opened: admission at its real size (a stream that does not fit fails in
        one line, the others go on); with ``model: auto``, the tier for its size, shared with the
        streams that chose it too, the stand-in closed if no stream runs on it any more."""

        async def on_open(info: StreamInfo) -> tuple[InferenceScheduler, bool] | None:
            runner = self.runners[stream.id]
            self.budget.admit(stream.id, self._cost(stream, info.width, info.height, runner.pipeline.backend))
            if stream.model.path != AUTO:
                return None
            enhanced = self._shedder.enhanced(runner, self.runners.values())
            choice = await choose_tier(self._tiers, stream.model, info, stream.id, 1 + enhanced)
            runner.choice = choice
            self._make_room(runner, choice.streams)
            # counted again: a choice made by probes awaits, and other streams may have opened meanwhile
            self._shedder.opened(
                runner, self._shedder.enhanced(runner, self.runners.values()), time.monotonic()
            )
            model = await self._load(stream.model.with_file(choice.path))
            # others opened while it loaded (and while that loaded): the tier the cards give them all
            counted = choice.streams
            while (crowd := 1 + self._shedder.enhanced(runner, self.runners.values())) > counted:
                counted = crowd
                choice = runner.choice = await choose_tier(self._tiers, stream.model, info, stream.id, crowd)
                model = await self._load(stream.model.with_file(choice.path))
            runner.retier = Retier(choice, choice.source_fps, stream.model.headroom, time.monotonic())
            runner.model_key = model_key(stream.model.with_file(choice.path))
            await self._release_models()
            return model.scheduler, False

        return on_open

    async def _calibrate(self, model: ModelConfig) -> None:
        """With ``model: auto``, this machine's speed against the tiers' cards, timed before the stream's
        source opens (once per model settings), so that it starts at once on a tier (``choose_tier``)."""
        if model.path != AUTO:
            return
        await asyncio.to_thread(
            self._tiers.calibrate, lambda path: build_backend(model.with_file(path)), model.session_key()
        )

    def _new_model(self, backend: Backend) -> _Model:
        runtime = self.config.runtime
        scheduler = InferenceScheduler(
            backend,
            runtime.batch_for(backend.info.provider),
            runtime.max_wait_ms,
            on_call=self.metrics.call_observer(backend.info.name),
        )
        return _Model(backend, scheduler)

    def check_free(self, stream: StreamConfig) -> None:
        """Raises StreamExistsError for a running id, OutputTakenError for an output another running stream
        writes (before anything else is checked of a new stream: the clearest reason comes first)."""
        if stream.id in self.runners:
            raise StreamExistsError(
                f"stream {stream.id!r} is already running; remove it first or pick another id"
            )
        targets = stream.targets()
        for runner in self.runners.values():
            if runner.done:
                continue
            for key in targets.keys() & runner.config.targets().keys():
                raise OutputTakenError(
                    f"{targets[key]} is written by stream {runner.id!r}; give this stream's output "
                    "its own target, or remove that stream first"
                )

    def _build(self, stream: StreamConfig) -> StreamRunner:
        self.check_free(stream)
        model = self._model(stream)
        source = stream.source
        try:
            if isinstance(source, SyntheticSourceConfig):  # its size is known: refused before it runs
                cost = self._cost(stream, source.width, source.height, model.backend)
                self.budget.admit(stream.id, cost)
            pipeline = build_stream(
                stream,
                self.config.runtime,
                model.backend,
                scheduler=model.scheduler,
                server=self.server,
                on_output=self._on_output,
                observe=self.metrics.stage_observer(stream.id),
                on_open=self._on_open(stream),
                on_resize=self._on_resize(stream),
            )
        except StreamerError as err:
            self.budget.release(stream.id)
            if self.config.streams is None:
                raise
            raise type(err)(f"stream {stream.id!r}: {err}") from None
        runner = self.runners[stream.id] = StreamRunner(stream, pipeline, self._limits)
        return runner

    def _start(self, runner: StreamRunner) -> None:
        runner.started = time.monotonic()
        runner.task = asyncio.create_task(self._supervise(runner), name=f"stream-{runner.id}")
        self._changed.set()

    async def _supervise(self, runner: StreamRunner) -> None:
        """Whatever ends the stream stays with it: recorded on the runner, never raised to the others."""
        try:
            runner.report = await runner.pipeline.run()
        except asyncio.CancelledError:
            runner.error = StreamerError(
                f"did not drain within runtime.drain_timeout_s={self.config.runtime.drain_timeout_s:g} s; "
                "cancelled with its sink closed"
            )
        except StreamerError as err:
            if runner.pipeline.stopping and not runner.pipeline.opened:
                log.info("stream %s: stopped before its source opened (%s)", runner.id, err)
            else:
                runner.error = err
        except MemoryError as err:
            # One line for the operator (the traceback at debug): this stream fails, the process lives.
            log.debug("stream %s: out of memory", runner.id, exc_info=True)
            runner.error = OutOfMemoryError(
                f"out of memory ({err or type(err).__name__}); lower the stream's resolution or "
                "runtime.ring_capacity, or give the process more memory"
            )
        except Exception as err:
            log.exception("stream %s: unexpected error", runner.id)
            runner.error = err
        finally:
            runner.ended_at = time.monotonic()
            if self.runners.get(runner.id) is runner:
                self.budget.release(runner.id)
            self._changed.set()

    async def _drain(self, runners: list[StreamRunner]) -> None:
        """Wait for ``runners`` to finish within the drain deadline, then cancel the late ones (their
        sinks still close). One whose sink write is stuck in the kernel cannot even be cancelled: after
        another ``_ABANDON_AFTER_S`` it is abandoned, marked failed, and listed in ``abandoned``."""
        deadline = self.config.runtime.drain_timeout_s
        running = {r.task: r for r in runners if r.task is not None and not r.task.done()}
        if not running:
            return
        _, late = await asyncio.wait(running, timeout=deadline)
        for task in late:
            log.warning("stream %s: did not drain in %g s; cancelling it", running[task].id, deadline)
            task.cancel()
        if not late:
            return
        _, stuck = await asyncio.wait(late, timeout=_ABANDON_AFTER_S)
        for task in stuck:
            runner = running[task]
            runner.error = StreamerError(
                f"its sink stayed blocked in a write for {deadline + _ABANDON_AFTER_S:g} s after the stop; "
                "abandoned without closing it"
            )
            self.abandoned.add(runner.id)
            log.error("stream %s: %s", runner.id, runner.error)

    async def _watch(self) -> None:
        while True:
            now = time.monotonic()
            self._log_changes(now)
            self._shedder.unshed(self.runners.values(), now)
            self._retier(now)
            if self.config.http.port is not None and not self._stop.is_set():
                await self._reap(now)
            await asyncio.sleep(_MONITOR_PERIOD_S)

    def _log_changes(self, now: float) -> None:
        for runner in self.runners.values():
            signals = runner.signals()
            state = runner.health.update(signals, now)
            if state is None:
                continue
            if state is StreamState.FAILED:
                level = logging.WARNING if self._log_failures else logging.INFO
                log.log(level, "stream %s: %s: %s", runner.id, state.value, signals.error)
            elif state.ready or state is StreamState.CONNECTING:
                log.info("stream %s: %s", runner.id, state.value)
            else:
                log.warning("stream %s: %s", runner.id, state.value)

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for model in self._models.values():
            await model.scheduler.aclose()
            model.backend.close()
        if self.server is not None:
            await self.server.stop()
