"""A sink that discards frames, for benchmarks and pipelines run only for their metrics."""

from __future__ import annotations

from streamer.frame import Frame, StreamInfo
from streamer.sinks.base import Sink

__all__ = ["NullSink"]


class NullSink(Sink):
    """Counts what it is sent and checks nothing, so it never limits the pipeline it measures."""

    def __init__(self) -> None:
        self._written = 0

    @property
    def frames_written(self) -> int:
        return self._written

    async def open(self, info: StreamInfo) -> None:
        return None

    async def send(self, frame: Frame) -> None:
        self._written += 1

    async def aclose(self) -> None:
        return None
