"""One stream's figures at one moment: what ``/streams``, ``/metrics`` and the viewer's live line read.

The pipeline makes it (``Pipeline.snapshot``) from its own counters and what its source and sink say
of themselves (``Source.connection``, ``Sink.outputs``, ``Sink.reconnects``), so no reader asks which
kind of source or sink a stream has.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime

from streamer.channel import ChannelStats
from streamer.core.features import FeatureCacheStats
from streamer.core.gate import GateStats
from streamer.core.keepalive import KeepAliveStats
from streamer.core.misswatch import MissWatchStats
from streamer.redact import redact_text
from streamer.sinks.base import OutputStats
from streamer.sources.base import Connection

__all__ = ["StreamSnapshot", "connection_status", "outputs_status"]


@dataclass(frozen=True, slots=True)
class StreamSnapshot:
    """A stream's figures at one moment."""

    model: str
    provider: str
    counters: dict[str, int]
    """Frames in and out, model calls, windows skipped, frames passed through and dropped, frames the
    decoder could not make."""
    outcomes: dict[str, int]
    """Frames by how they left (``Outcome`` values)."""
    live: dict[str, object]
    """Rates, recent latency, size, enhanced share and the blend's inputs (``Pipeline.live_figures``)."""
    gate: GateStats
    features: FeatureCacheStats
    misses: MissWatchStats
    queues: list[ChannelStats]
    source_dropped: int
    """Frames the source's hand-off let go before the pipeline saw them."""
    sink_dropped: int
    sink_reconnects: int
    connection: Connection | None
    """The source's connection to its camera; None for a source that makes none."""
    outputs: list[OutputStats] | None
    """Each output of a stream that writes to several; None for one output."""
    noise_sigma: float | None
    quantizer: float | None
    weight: float
    keepalive: KeepAliveStats | None
    in_gap: bool
    """The live output is keeping its clock while the source is silent."""


def connection_status(stats: Connection | None) -> dict[str, object] | None:
    """A source's connection to its camera, so a dead camera reads as one: attempts, the last error,
    the retry."""
    if stats is None:
        return None
    when = stats.last_error_at
    stamp = None if when is None else datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")
    return {
        "state": stats.state,
        "attempts": stats.attempts,
        "failures": stats.failures,
        "reconnects": stats.reconnects,
        "last_error": None if stats.last_error is None else redact_text(stats.last_error),
        "last_error_at": stamp,
        "next_retry_in": None if stats.next_retry_in is None else round(stats.next_retry_in, 1),
        "reader": stats.reader,
    }


def outputs_status(outputs: list[OutputStats] | None) -> list[dict[str, object]] | None:
    """Each output of a stream with several: frames written and let go, its queue, its error."""
    if outputs is None:
        return None
    return [
        {**dataclasses.asdict(o), "error": None if o.error is None else redact_text(o.error)} for o in outputs
    ]
