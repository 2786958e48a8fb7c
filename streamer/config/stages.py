"""How a stream's frames pass the core's stages (windows, the motion gate, the latency budget, the
keep-alive of live outputs) and the process's runtime settings; ``streamer.app`` builds the stages from
them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from streamer.backend.base import on_cpu
from streamer.config.base import Strict
from streamer.core.gate import SkipAction
from streamer.core.latency import MissAction
from streamer.core.windower import EdgePolicy, OutputPosition

__all__ = ["GPU_MAX_BATCH", "GateConfig", "KeepAliveConfig", "LatencyConfig", "RuntimeConfig", "WindowConfig"]


class WindowConfig(Strict):
    """How a stream's frames are grouped into the windows of T frames a model takes
    (``streamer.core.windower``), and what ends a run of them."""

    t: int | None = Field(None, ge=1, le=256)
    """None: the model's T. A number must equal it."""
    stride: int = Field(1, ge=1, le=256)
    position: OutputPosition | None = None
    """None: the model's output position."""
    edge: EdgePolicy = EdgePolicy.REPLICATE
    max_gap_s: float | None = Field(1.0, gt=0.0, le=3600.0)
    scene_cut: float | None = Field(40.0, gt=0.0, le=255.0)
    """Mean luma change (0..255) between frames that counts as an editing cut and ends the run."""


class GateConfig(Strict):
    """The motion gate (``streamer.core.gate``): which windows the model runs on, and what the others get."""

    enabled: bool = True
    downscale_width: int = Field(160, ge=8, le=7680)
    pixel_threshold: float = Field(12.0, ge=0.0, le=255.0)
    area_on: float = Field(0.005, ge=0.0, le=1.0)
    area_off: float = Field(0.0025, ge=0.0, le=1.0)
    hold: int = Field(3, ge=1, le=10**4)
    refresh_s: float | None = Field(2.0, gt=0.0, le=86400.0)
    on_skip: SkipAction = SkipAction.REUSE
    tile: int | None = Field(None, ge=8, le=1024)
    """Decide per tile of this many pixels and enhance only the box of the changed tiles (window and
    streaming models with ``on_skip: reuse``); None: whole frames."""
    halo: int | None = Field(None, ge=0, le=512)
    """Context around the box the model also sees; at least its reach, so the box's pixels equal the
    whole frame's. None: the reach its card records (``reach_px``, found by ``python -m export.reach``)
    rounded up to a multiple of 4, or 32 for a model without one."""
    max_region: float = Field(0.5, gt=0.0, le=1.0)
    """A box (with its halo) covering more of the frame than this runs the whole frame instead."""
    tile_area: float = Field(0.05, gt=0.0, le=1.0)
    """Share of a tile's thumbnail samples that must move in one frame of the window for it to change."""

    @model_validator(mode="after")
    def _ordered(self) -> GateConfig:
        if self.area_off > self.area_on:
            raise ValueError(f"area_off ({self.area_off}) must not exceed area_on ({self.area_on})")
        return self


class LatencyConfig(Strict):
    """The latency budget (``streamer.core.latency``): how long a frame may take, and what a frame that
    would miss it gets."""

    budget_ms: float | None = Field(None, gt=0.0, le=60_000.0)
    on_miss: MissAction = MissAction.PASSTHROUGH


class KeepAliveConfig(Strict):
    """What live outputs send while the source is silent (``streamer.core.keepalive``)."""

    enabled: bool = True
    """Live outputs (RTSP, WHEP) keep their clock while the source is silent (a camera stalling or
    reconnecting): the last frame again every frame period, then the no-signal card; so readers
    downstream (NVRs, players) neither time out nor reconnect. Files and the null sink never get
    fillers."""
    card_after_s: float | None = Field(10.0, ge=0.0, le=86_400.0)
    """Seconds of silence after which the no-signal card replaces the last frame; None: the last frame
    for as long as it lasts."""


class RuntimeConfig(Strict):
    """The process's batching, queues, timeouts, logging and memory."""

    max_batch: int | None = Field(None, ge=1, le=256)
    """Windows in one model call, from one stream or several that share the model; None: by provider
    (:meth:`batch_for`)."""
    max_wait_ms: float = Field(5.0, ge=0.0, le=1000.0)
    """How long a window may wait for windows of other streams to join its batch."""
    queue_size: int = Field(8, ge=1, le=1024)
    ring_capacity: int | None = Field(None, ge=1, le=1024)
    drain_timeout_s: float = Field(10.0, gt=0.0, le=600.0)
    """On SIGTERM/SIGINT or removal, how long in-flight frames may take to drain before sinks are closed."""
    stall_after_s: float = Field(5.0, gt=0.0, le=3600.0)
    """No frame from a source for this long: the stream reports ``stalled``."""
    sink_blocked_after_s: float = Field(2.0, gt=0.0, le=3600.0)
    """One sink write taking longer than this: the stream reports ``sink_blocked``."""
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    log_format: Literal["text", "json"] = "text"
    memory_budget_mb: int | None = Field(None, ge=16, le=10**8)
    """Memory the process may hold: itself (measured at start, and again as streams come and go) and its
    streams by their estimates (frames held, feature caches, model activations); a stream that does not
    fit is refused in one line. None: 80% of the container's memory limit where there is one, else half
    the machine's memory."""

    def batch_for(self, provider: str) -> int:
        """``max_batch``, or where unset 1 on the CPU provider and 8 on a GPU's.

        onnxruntime's CPU convolutions run a batch image by image with a larger working set, so a
        batch costs more than its windows one at a time (``streamer bench batching``, ``overhead``),
        and the session keeps memory for every batch size it has seen (``streamer bench soak``); a GPU
        is where one call for many windows pays.
        """
        if self.max_batch is not None:
            return self.max_batch
        return 1 if on_cpu(provider) else GPU_MAX_BATCH


GPU_MAX_BATCH = 8
"""``runtime.max_batch`` where unset and the model runs on a GPU provider (CUDA, TensorRT)."""
