"""One stream, end to end: source -> ring -> windower -> gate -> backend -> sink.

Three asyncio tasks joined by bounded channels, each a module of its own:

- *ingest* (:mod:`streamer.engine.ingest`) reads frames, keeps them in the ring, asks the windower for
  ready windows and the gate whether each needs the model, and queues a
  :class:`~streamer.engine.work.Work` per frame in order;
- *inference* (:mod:`streamer.engine.inference`) takes queued work, asks the latency budget whether
  each window can still make it, runs the admitted ones on the stream's model (held by a
  :class:`~streamer.engine.binding.ModelBinding`, shared with the other streams of that model through
  its scheduler) and resolves reused and passed-through frames in order;
- *egress* (:mod:`streamer.engine.egress`) writes frames to the sink and records end-to-end latency.

The :class:`Pipeline` builds them, opens the source and the sink, picks (``on_open``) and warms the
model, runs the three, and is what the rest of the program holds: the stream's figures, its settings
(:class:`~streamer.engine.settings.PipelineSettings`), ``stop()`` and ``move_to()``.

Every input frame leaves exactly once (enhanced, reused, passed through: by the gate, the budget, or a
model server that cannot answer) unless the budget drops it,
and leaves in order with its own PTS, because work never overtakes other work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from streamer.backend.base import Backend
from streamer.channel import Channel, ChannelStats, DropPolicy
from streamer.core.blend import Blend, QuantizerEstimate
from streamer.core.features import FeatureCacheStats
from streamer.core.gate import MotionGate, SceneCutDetector, SkipAction
from streamer.core.keepalive import KeepAlive
from streamer.core.latency import LatencyBudget
from streamer.core.misswatch import MissWatch, MissWatchStats
from streamer.core.noise import NoiseEstimator
from streamer.core.ring import RingBuffer
from streamer.core.windower import Windower
from streamer.engine.binding import ModelBinding
from streamer.engine.egress import Egress, OutputHook
from streamer.engine.inference import Inference
from streamer.engine.ingest import Ingest, ResizeHook
from streamer.engine.scheduler import InferenceScheduler
from streamer.engine.settings import PipelineSettings
from streamer.engine.snapshot import StreamSnapshot
from streamer.engine.tally import Outcome, PipelineReport, Tally
from streamer.engine.telemetry import Stage, StageObserver, ignore
from streamer.engine.work import Output, Work
from streamer.frame import StreamInfo
from streamer.media.colour import resolve
from streamer.sinks.base import Sink
from streamer.sources.base import Source

if TYPE_CHECKING:
    from streamer.media.audio import AudioTrack

__all__ = ["OpenHook", "Outcome", "OutputHook", "Pipeline", "PipelineReport", "ResizeHook"]

log = logging.getLogger(__name__)

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
        self.sink = sink
        self.windower = windower
        self.gate = gate if gate is not None else MotionGate(enabled=False)
        self.settings = PipelineSettings(
            on_skip, max_batch, queue_size, ring_capacity, tile, tile_overlap, warm_up
        )
        self.binding = ModelBinding(source.stream_id, backend, scheduler, windower, self.gate, self.settings)
        """The stream's model, its scheduler and runners (``streamer.engine.binding``)."""
        self.budget = budget if budget is not None else LatencyBudget()
        self.cuts = scene_cuts if scene_cuts is not None else SceneCutDetector(None)
        self.strength = strength
        """A model that takes a strength gets this per window: a noise sigma, or ``auto`` (the
        stream's noise estimate, the model's default until there is one); the control API sets it live."""
        self._blend = blend
        """The blend set for the stream; None: the model's own (``ModelInfo.blend``)."""
        self.tally = Tally()
        """What the stream has done so far (``streamer.engine.tally``)."""
        self._observe = observe
        self._on_open = on_open
        self._keepalive_for = keepalive if sink.live else None
        self.keepalive: KeepAlive | None = None
        """Made once the source's frame rate is known, for a live sink; None otherwise."""
        self._audio: AudioTrack | None = None
        """The source's audio, when the sink writes it: its queue shows beside the channels."""
        self.opened = False
        stream = source.stream_id
        self._work: Channel[Work] = Channel(queue_size, DropPolicy.BLOCK, name=f"work:{stream}")
        self._out: Channel[Output] = Channel(queue_size, DropPolicy.BLOCK, name=f"out:{stream}")
        self._ingest = Ingest(
            source,
            windower,
            self.gate,
            self.cuts,
            self.binding,
            self.settings,
            self._work,
            self.tally,
            strength=self.strength_now,
            weight=self.weight_now,
            observe=observe,
            on_resize=on_resize,
        )
        self._inference = Inference(
            self.binding, self.settings, self._work, self._out, self.budget, self.tally, misses, observe
        )
        self._egress = Egress(sink, self._out, self.scale, self.budget, self.tally, observe, on_output)

    @property
    def backend(self) -> Backend:
        """The model the stream runs on now (``on_open`` and ``move_to`` change it)."""
        return self.binding.backend

    @property
    def scheduler(self) -> InferenceScheduler:
        """The scheduler the stream shares with the other streams of its model."""
        return self.binding.scheduler

    @property
    def scale(self) -> int:
        """Output frames are this many times the source's size: unenhanced ones are scaled up to match."""
        return self.binding.scale

    @property
    def ring(self) -> RingBuffer:
        """The source's frames a window may still need (``streamer.core.ring``)."""
        return self._ingest.ring

    @property
    def noise(self) -> NoiseEstimator:
        """How noisy the source is (``streamer.core.noise``)."""
        return self._ingest.noise

    @property
    def quantizer(self) -> QuantizerEstimate:
        """How hard the camera's encoder quantized it (``streamer.core.blend``)."""
        return self._ingest.quantizer

    @property
    def max_batch(self) -> int:
        """Windows of this stream one model call may take."""
        return self.settings.max_batch

    @property
    def last_frame_at(self) -> float | None:
        """Monotonic time the source last delivered a frame: how the service sees a stall."""
        return self._ingest.last_frame_at

    @property
    def frame_size(self) -> tuple[int, int] | None:
        """(width, height) of the source's latest frame."""
        return self._ingest.frame_size

    @property
    def last_sent_at(self) -> float | None:
        """Monotonic time the last write to the sink returned: how the service sees a stall."""
        return self._egress.last_sent_at

    @property
    def sending_since(self) -> float | None:
        """When the sink write under way started (None: none is): how the service sees a blocked sink."""
        return self._egress.sending_since

    @property
    def stopping(self) -> bool:
        """Whether ``stop()`` was called."""
        return self._ingest.stopping

    def stop(self) -> None:
        """Stop reading the source; frames already read are still enhanced and written."""
        self._ingest.stop()

    def move_to(self, scheduler: InferenceScheduler) -> asyncio.Future[None]:
        """Run the stream's next windows on ``scheduler``'s model once the calls under way have ended
        (``model: auto`` moving tiers; :meth:`ModelBinding.move_to`)."""
        return self.binding.move_to(scheduler)

    def shed(self, reason: str | None) -> None:
        """With a ``reason``: the stream's next windows call no model, their frames leave as they came
        (counted as shed) until ``shed(None)`` runs the model on them again. What ``model: auto`` does
        with a stream the cheapest tier has no room for beside the streams it enhances."""
        self.binding.shed = reason

    @property
    def shed_reason(self) -> str | None:
        """Why the stream's frames pass through without the model; None while the model runs."""
        return self.binding.shed

    def counters(self) -> dict[str, int]:
        """A cheap snapshot for live displays."""
        src = self.source.stats()
        return {
            "in": self.tally.frames_in,
            "out": self.tally.frames_out,
            "calls": self.tally.model_calls,
            "skipped": self.gate.stats().skipped,
            "passthrough": self.tally.outcomes[Outcome.BUDGET_PASSTHROUGH]
            + self.tally.outcomes[Outcome.UNAVAILABLE_PASSTHROUGH]
            + self.tally.outcomes[Outcome.SHED_PASSTHROUGH],
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
        the frames written so far that the model enhanced (the rest reused, or passed through), how
        many frames a second the latency budget is passing through or dropping now, and why the stream
        runs without its model, where it does (``shed``)."""
        return {
            **self.tally.live(now),
            "size": None if self.frame_size is None else f"{self.frame_size[0]}x{self.frame_size[1]}",
            "noise_sigma": None if self.noise.sigma is None else round(self.noise.sigma, 1),
            "quantizer": None if self.quantizer.quantizer is None else round(self.quantizer.quantizer, 1),
            "blend": round(self.weight_now(), 2),
            "strength": self.strength_status(),
            "passing_through": self.binding.shed,
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
        return self._inference.misses.stats()

    def feature_stats(self) -> FeatureCacheStats:
        """Frames encoded, reused and cache resets of a streaming model (all zero for other models)."""
        return self.binding.runners.fits.feature_stats()

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
        """Opens the source and the sink, runs the stream until the source ends (or ``stop()``), closes
        both and says what the stream did."""
        started = time.monotonic()
        self.source.observe_decode(lambda seconds: self._observe(Stage.DECODE, seconds))
        self.binding.attach()
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
            await self.binding.release()
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
                    await self.binding.switch(*chosen)
                self.opened = True  # a model probe reads as connecting, not as a stall
            await self._warmed(info)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._ingest.run(info, self.keepalive), name=f"ingest-{stream}")
                group.create_task(self._inference.run(), name=f"infer-{stream}")
                group.create_task(self._egress.run(self.keepalive), name=f"output-{stream}")
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
        failed = self._ingest.error
        if failed is not None:
            raise type(failed)(
                f"{failed} ({self.tally.frames_out} frames delivered before it were written)"
            ) from failed

    async def _warmed(self, info: StreamInfo) -> None:
        """The model run once at the stream's size (a tile's, for frames it tiles), in a worker thread,
        where ``warm_up`` says so (None: on GPU providers)."""
        backend = self.backend
        wanted = self.settings.warm_up if self.settings.warm_up is not None else not backend.info.on_cpu
        if not wanted:
            return
        width, height = info.width, info.height
        tiled = self.binding.runners.tiled
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
