"""What one stream has done, counted as it happens: frames in and out, how each frame left, the model
calls and their batch sizes, the pixels the model ran on, rates and latencies.

Kept apart from the pipeline's stages so that the figures every reader shows (``/streams``, the
metrics, the viewer's line, the run's report) are made in one place from one set of counters.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from streamer.core.stats import DurationRecorder, RateMeter
from streamer.frame import StreamInfo

__all__ = ["MISSED", "RECENT_FRAMES", "Outcome", "PipelineReport", "Tally"]

RECENT_FRAMES = 300
"""Frames the live latency figures cover: 10 s at 30 fps."""


class Outcome(enum.Enum):
    """How one input frame left the pipeline."""

    ENHANCED = "enhanced"
    REUSED = "reused"
    GATE_PASSTHROUGH = "gate_passthrough"
    STRIDE_PASSTHROUGH = "stride_passthrough"
    BUDGET_PASSTHROUGH = "budget_passthrough"
    BUDGET_DROP = "budget_drop"
    UNAVAILABLE_PASSTHROUGH = "unavailable_passthrough"
    """The model server could not answer (down, slow, refusing): the frame went out unenhanced."""
    SHED_PASSTHROUGH = "shed_passthrough"
    """``model: auto`` found no room for the stream on these cores beside the streams it enhances:
    the frame went out unenhanced, without the model (``Pipeline.shed``)."""


MISSED = (Outcome.BUDGET_PASSTHROUGH, Outcome.BUDGET_DROP)
"""How frames leave when the latency budget refuses them: the viewer's badge counts these."""


@dataclass(frozen=True, slots=True)
class PipelineReport:
    """What a run did; the CLI prints it and tests assert on it."""

    stream_id: str
    info: StreamInfo
    model: str
    """The model the stream ran on (with ``model: auto``, the tier chosen)."""
    provider: str
    frames_in: int
    frames_out: int
    source_dropped: int
    outcomes: dict[str, int]
    model_calls: int
    windows_enhanced: int
    windows_skipped: int
    discontinuities: int
    wall_s: float
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    inference_p50_ms: float | None
    lookahead_frames: int
    batch_sizes: dict[int, int] = field(default_factory=dict)

    @property
    def fps(self) -> float:
        return self.frames_out / self.wall_s if self.wall_s > 0 else 0.0


class Tally:
    """One stream's counters; the pipeline's stages add to them, readers take figures from them."""

    def __init__(self) -> None:
        self.frames_in = 0
        self.frames_out = 0
        self.outcomes: Counter[Outcome] = Counter()
        self.model_calls = 0
        self.batches: Counter[int] = Counter()
        """Model calls by how many windows they ran."""
        self._last_call = 0
        self.pixels_due = 0
        self.pixels_enhanced = 0
        """Pixels of the windows due, and pixels the model ran on for them (a region run: its crop)."""
        self.latency = DurationRecorder()
        """Source arrival to written, per frame."""
        self.inference = DurationRecorder()
        self._rate_in = RateMeter()
        self._rate_out = RateMeter()
        self._rate_missed = RateMeter()
        """Frames the latency budget passed through or dropped: the viewer's badge while it does."""

    def received(self, now: float) -> None:
        self.frames_in += 1
        self._rate_in.add(now)

    def left(self, outcome: Outcome, now: float) -> None:
        """A frame left (or, for ``BUDGET_DROP``, was let go) this way."""
        self.outcomes[outcome] += 1
        if outcome in MISSED:
            self._rate_missed.add(now)

    def written(self, latency_s: float, now: float) -> None:
        self.latency.record(latency_s)
        self.frames_out += 1
        self._rate_out.add(now)

    def called(self, call: int, batch_size: int) -> None:
        """A window's result came from model call number ``call``: each call counted once, however many
        of the stream's windows it ran."""
        if call != self._last_call:
            self._last_call = call
            self.model_calls += 1
            self.batches[batch_size] += 1

    def outcome_counts(self) -> dict[str, int]:
        """Frames by how they left (or were dropped), so far."""
        return {o.value: self.outcomes[o] for o in Outcome}

    def live(self, now: float) -> dict[str, object]:
        """Frames per second in and out over the last seconds, latency over the last
        :data:`RECENT_FRAMES`, the share of the frames written so far that the model enhanced, and how
        many frames a second the latency budget is passing through or dropping now."""
        fps_in, fps_out = self._rate_in.rate(now), self._rate_out.rate(now)
        p50 = self.latency.recent_percentile_ms(50, RECENT_FRAMES)
        p95 = self.latency.recent_percentile_ms(95, RECENT_FRAMES)
        out = self.frames_out
        return {
            "fps_in": None if fps_in is None else round(fps_in, 2),
            "fps_out": None if fps_out is None else round(fps_out, 2),
            "latency_p50_ms": None if p50 is None else round(p50, 1),
            "latency_p95_ms": None if p95 is None else round(p95, 1),
            "enhanced_share": round(self.outcomes[Outcome.ENHANCED] / out, 4) if out else None,
            "missed_fps": round(self._rate_missed.rate(now) or 0.0, 2),
        }

    @property
    def nbytes(self) -> int:
        """Memory of the latency and inference samples kept: bounded by construction."""
        return self.latency.nbytes + self.inference.nbytes
