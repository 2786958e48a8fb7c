"""The first of a stream's stages: source -> ring -> windower -> gate, one :class:`Work` per frame.

Ingest reads frames, keeps them in the ring, measures the source's noise and quantizer, marks scene
cuts, asks the windower for ready windows and the gate whether each needs the model, and queues the
plan of every frame in order on the work channel, which it closes when the source ends.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from streamer.channel import Channel
from streamer.core.blend import QuantizerEstimate
from streamer.core.gate import GateReason, MotionGate, SceneCutDetector
from streamer.core.keepalive import KeepAlive
from streamer.core.noise import NoiseEstimator
from streamer.core.ring import RingBuffer
from streamer.core.windower import Windower, WindowTask
from streamer.engine.binding import ModelBinding
from streamer.engine.settings import PipelineSettings
from streamer.engine.tally import Tally
from streamer.engine.telemetry import Stage, StageObserver
from streamer.engine.work import Plan, Work
from streamer.errors import ConfigError, EndOfStream, SourceError, StreamerError
from streamer.frame import Hyperframe, StreamInfo
from streamer.media.colour import resolve
from streamer.sources.base import Source

__all__ = ["Ingest", "ResizeHook"]

log = logging.getLogger(__name__)

ResizeHook = Callable[[int, int], None]
"""Called with a frame's (width, height) when a stream's frame size changes, before the frame is used;
raising refuses it: the stream ends there, its earlier frames still written, with that error."""


class Ingest:
    """Reads one stream's source until it ends, fails or is stopped; the source's figures the rest of
    the stream reads (its frame size, when it last delivered) are kept here as they change."""

    def __init__(
        self,
        source: Source,
        windower: Windower,
        gate: MotionGate,
        cuts: SceneCutDetector,
        binding: ModelBinding,
        settings: PipelineSettings,
        work: Channel[Work],
        tally: Tally,
        *,
        strength: Callable[[], float | None],
        weight: Callable[[], float],
        observe: StageObserver,
        on_resize: ResizeHook | None,
    ) -> None:
        self.source = source
        capacity = settings.ring_capacity
        if capacity is not None and capacity < windower.history:
            raise ConfigError(
                f"runtime.ring_capacity is {capacity}, below the {windower.history} frames a "
                f"T={windower.t} window can span; raise it or leave it unset"
            )
        self.ring = RingBuffer(capacity or windower.history, stream_id=source.stream_id)
        """The source's frames a window may still need: the last ``windower.history`` at least."""
        self.windower = windower
        self.gate = gate
        self.cuts = cuts
        self.binding = binding
        self.work = work
        self.tally = tally
        self.noise = NoiseEstimator()
        """How noisy the source is (``streamer.core.noise``)."""
        self.quantizer = QuantizerEstimate()
        """How hard the camera's encoder quantized it (``streamer.core.blend``)."""
        self._strength = strength
        """The strength windows get now (None: the model's default)."""
        self._weight = weight
        """The share of the model's change frames get now."""
        self._observe = observe
        self._on_resize = on_resize
        self.stopping = False
        self.last_frame_at: float | None = None
        """Monotonic time the source last delivered a frame: how the service sees a stall."""
        self.frame_size: tuple[int, int] | None = None
        """(width, height) of the source's latest frame."""
        self.error: StreamerError | None = None
        """What ended the source (or refused its new size), kept until its frames are written."""
        self._run = -1

    def stop(self) -> None:
        """Read no further frame; the ones read are still planned and queued."""
        self.stopping = True
        self.source.interrupt()

    async def run(self, info: StreamInfo, keepalive: KeepAlive | None) -> None:
        """Reads and plans every frame, flushes the windower's last windows, then closes the work channel."""
        size = (info.width, info.height)
        fps = float(info.fps) if info.fps > 0 else 30.0
        try:
            while not self.stopping:
                try:
                    frame = await self.source.recv()
                except EndOfStream:
                    break
                except SourceError as err:  # what it delivered is still enhanced and written
                    self.error = err
                    break
                if (frame.width, frame.height) != size and self._on_resize is not None:
                    try:
                        self._on_resize(frame.width, frame.height)
                    except StreamerError as err:  # as a source error: what came before is written
                        self.error = err
                        break
                size = self.frame_size = (frame.width, frame.height)
                self.last_frame_at = time.monotonic()
                self.tally.received(self.last_frame_at)
                if keepalive is not None:
                    keepalive.received(self.last_frame_at)
                self.ring.push(frame)
                self.noise.observe(frame.picture, frame.time if frame.time is not None else frame.index / fps)
                self.quantizer.observe(frame.quantizer)
                if self.cuts.is_cut(frame.picture):
                    frame = dataclasses.replace(frame, discontinuity=True)
                for task in self.windower.push(frame):
                    await self.work.put(self._plan(task, info))
                self.ring.release_before(self.windower.oldest_needed)
            for task in self.windower.flush():
                await self.work.put(self._plan(task, info))
        finally:
            self.work.close()

    def _plan(self, task: WindowTask, info: StreamInfo) -> Work:
        """The window's frames from the ring, the gate's decision on them, and the region (if the gate
        chose one) the model runs on."""
        frame = self.ring.get(task.target)
        if task.run != self._run:
            self._run = task.run
            self.gate.reset()
        if not task.enhance:
            return Work(frame, Plan.STRIDE, task.run)
        if self.binding.shed is not None:
            return Work(frame, Plan.SHED, task.run)
        model = self.binding.backend.info
        strength = self._strength() if model.strength else None
        # A model that gives the encoder 4:2:0 planes makes them in the colour the sinks encode with.
        colour = resolve(info.colour, frame.height * self.binding.scale) if model.yuv420 else None
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
        runner = self.binding.runner(frame.width, frame.height)
        region = decision.region if not runner.exclusive else None
        self.tally.pixels_due += frame.width * frame.height
        if region is not None and runner.regions_on_grid:
            # Its cached maps are of whole frames: the crop is cut from them, on the model's grid.
            region = region.aligned(model.pad_multiple, frame.height, frame.width)
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
        plan = Plan.ENHANCE if decision.run_model else Plan.SKIP
        return Work(frame, plan, task.run, window, region, self._weight())
