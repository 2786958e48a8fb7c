"""One supervised stream of a :class:`~streamer.serving.service.Service`: its pipeline, task and health,
and what ``/streams`` shows of it."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from streamer.config import ModelConfig, StreamConfig
from streamer.core.health import HealthLimits, StreamHealth, StreamSignals, StreamState
from streamer.engine.pipeline import Pipeline, PipelineReport
from streamer.engine.retier import Retier
from streamer.engine.snapshot import connection_status, outputs_status
from streamer.engine.tiers import TierChoice
from streamer.redact import redact_text

__all__ = ["StreamRunner", "model_key"]


def model_key(model: ModelConfig) -> str:
    """Streams whose model settings are equal share one loaded model and its scheduler (settings of
    how a stream uses it, tiles and auto's headroom, aside); an ``auto`` stream shares the model it
    runs on (its stand-in until a tier is chosen)."""
    return model.with_file(model.file()).session_key()


class StreamRunner:
    """One supervised stream: its pipeline, its task, its health."""

    def __init__(self, config: StreamConfig, pipeline: Pipeline, limits: HealthLimits) -> None:
        self.config = config
        self.pipeline = pipeline
        self.health = StreamHealth(limits)
        self.task: asyncio.Task[None] | None = None
        self.report: PipelineReport | None = None
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self.ended_at: float | None = None
        self.model_key = model_key(config.model)
        """The loaded model this stream runs on: ``auto`` moves it to the tier chosen."""
        self.choice: TierChoice | None = None
        self.retier: Retier | None = None
        """With ``model: auto``, the stream's moves between tiers as the load changes."""
        self.moving: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    def signals(self) -> StreamSignals:
        p = self.pipeline
        activity = [t for t in (p.last_frame_at, p.last_sent_at) if t is not None]
        return StreamSignals(
            opened=p.opened,
            finished=self.done and self.error is None,
            error=None if self.error is None else str(self.error) or type(self.error).__name__,
            last_frame=max(activity) if activity else None,
            sending_since=p.sending_since,
            waiting=p.source.waiting,
        )

    def state(self, now: float) -> StreamState:
        return self.health.classify(self.signals(), now)

    def _error_text(self, connection: dict[str, object] | None) -> str | None:
        """Why the stream failed; while it has not and its camera is not connected, why the camera's
        connection last failed, so ``error`` never reads null beside a failing connection."""
        if self.error is not None:
            return redact_text(str(self.error))
        if connection is not None and connection["state"] != "live":
            last = connection["last_error"]
            return None if last is None else str(last)
        return None

    def status(self, now: float) -> dict[str, object]:
        """What ``/streams`` shows of this stream."""
        snap = self.pipeline.snapshot(now)
        connection = connection_status(snap.connection)
        return {
            "id": self.id,
            "state": self.state(now).value,
            "source": self.config.source.kind,
            "sink": ",".join(s.kind for s in self.config.outputs()),
            "outputs": outputs_status(snap.outputs),
            "model": snap.model,
            "provider": snap.provider,
            "uptime_s": round(now - self.started, 3),
            **snap.live,
            "counters": snap.counters,
            "outcomes": snap.outcomes,
            "gate_skip_ratio": round(snap.gate.skip_ratio, 4),
            "queues": {q.name: {"depth": q.depth, "capacity": q.capacity} for q in snap.queues},
            "error": self._error_text(connection),
            "connection": connection,
            "model_choice": None
            if self.choice is None
            else {**self.choice.as_dict(), **({} if self.retier is None else self.retier.as_dict())},
            "keepalive": None
            if snap.keepalive is None
            else {"in_gap": snap.in_gap, **dataclasses.asdict(snap.keepalive)},
        }
