"""Several outputs of one stream: the same frames to each sink, each behind a bounded queue of its own.

A sink that is slow or stuck holds up only itself. In a live stream each output's queue drops its
oldest frame when full (counted per output), so a blocked RTSP server or a stalled disk loses its own
frames while the other outputs and the model keep pace; in a file run (a source that is not live) the
queues block instead, so no output loses a frame and the slowest sets the pace, as a single sink would.
An output whose send fails is left behind (one warning; its error in ``/streams``), and the stream fails
only once every output has. Each sink encodes for itself: two outputs of the same codec and size encode
twice (one shared encode is not built). The source's audio, a queue with one reader, goes to the first
output that writes it, said in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamer.channel import Channel, DropPolicy
from streamer.errors import ConfigError, EndOfStream, SinkError
from streamer.frame import Frame, StreamInfo
from streamer.sinks.base import Sink

if TYPE_CHECKING:
    from streamer.audio import AudioTrack

__all__ = ["OutputStats", "TeeSink", "sinks_of"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OutputStats:
    name: str
    written: int
    dropped: int
    """Frames this output's full queue let go (live streams only)."""
    depth: int
    capacity: int
    error: str | None


class _Output:
    def __init__(self, sink: Sink, name: str) -> None:
        self.sink = sink
        self.name = name
        self.queue: Channel[Frame] | None = None
        self.task: asyncio.Task[None] | None = None
        self.written = 0
        self.error: BaseException | None = None

    def stats(self) -> OutputStats:
        queue = None if self.queue is None else self.queue.stats()
        return OutputStats(
            self.name,
            self.written,
            0 if queue is None else queue.dropped,
            0 if queue is None else queue.depth,
            0 if queue is None else queue.capacity,
            None if self.error is None else str(self.error) or type(self.error).__name__,
        )


class TeeSink(Sink):
    """Sends each frame to every sink of ``sinks`` (named ``names`` in logs and ``/streams``), each
    through its own queue of ``capacity`` frames."""

    def __init__(self, sinks: Sequence[Sink], names: Sequence[str], capacity: int = 8) -> None:
        if not sinks or len(sinks) != len(names):
            raise ConfigError(f"a tee needs one name per sink and at least one sink; got {len(sinks)} sinks")
        if capacity < 1:
            raise ConfigError(f"each output's queue must hold at least one frame, got {capacity}")
        self._outputs = [_Output(sink, name) for sink, name in zip(sinks, names, strict=True)]
        self._capacity = capacity
        self.live = any(s.live for s in sinks)

    @property
    def sinks(self) -> list[Sink]:
        return [o.sink for o in self._outputs]

    def outputs(self) -> list[OutputStats]:
        return [o.stats() for o in self._outputs]

    def attach_audio(self, track: AudioTrack) -> bool:
        for output in self._outputs:
            if output.sink.attach_audio(track):
                if len(self._outputs) > 1:
                    log.info("output %s writes the source's audio (one output can)", output.name)
                return True
        return False

    async def open(self, info: StreamInfo) -> None:
        opened = await asyncio.gather(*(o.sink.open(info) for o in self._outputs), return_exceptions=True)
        failed = [r for r in opened if isinstance(r, BaseException)]
        if failed:
            await asyncio.gather(*(o.sink.aclose() for o in self._outputs), return_exceptions=True)
            raise failed[0]
        policy = DropPolicy.DROP_OLDEST if info.live else DropPolicy.BLOCK
        for output in self._outputs:
            output.queue = Channel(self._capacity, policy, name=f"output:{output.name}")
            output.task = asyncio.get_running_loop().create_task(
                self._drain(output), name=f"output-{output.name}"
            )

    async def send(self, frame: Frame) -> None:
        working = [o for o in self._outputs if o.error is None and o.queue is not None]
        if not working:
            first = self._outputs[0].error
            if isinstance(first, SinkError):
                raise first
            raise SinkError(f"every output of this stream failed; the first: {first}")
        for output in working:
            assert output.queue is not None
            with contextlib.suppress(EndOfStream):  # it failed meanwhile: send goes on to the rest
                await output.queue.put(frame)

    async def _drain(self, output: _Output) -> None:
        assert output.queue is not None
        try:
            while True:
                frame = await output.queue.get()
                await output.sink.send(frame)
                output.written += 1
        except EndOfStream:
            return
        except Exception as err:  # any sink's failure: this output stops, the others go on
            output.error = err
            output.queue.close()
            others = len(self._outputs) - 1
            log.warning("output %s failed: %s; %d other output(s) go on", output.name, err, others)

    async def aclose(self) -> None:
        """Lets each output write what is queued, then closes every sink; the first error is raised."""
        for output in self._outputs:
            if output.queue is not None:
                output.queue.close()
        await asyncio.gather(*(o.task for o in self._outputs if o.task is not None))
        closed = await asyncio.gather(*(o.sink.aclose() for o in self._outputs), return_exceptions=True)
        errors = [r for r in closed if isinstance(r, BaseException)]
        if errors:
            raise errors[0]


def sinks_of(sink: Sink) -> list[Sink]:
    """The sinks a stream writes to: a tee's outputs, or the one sink."""
    return sink.sinks if isinstance(sink, TeeSink) else [sink]
