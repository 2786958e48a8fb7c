"""Several outputs of one stream: the same frames to each sink, each behind a bounded queue of its own.

A sink that is slow or stuck holds up only itself. In a live stream each output's queue drops its
oldest frame when full (counted per output), so a blocked RTSP server or a stalled disk loses its own
frames while the other outputs and the model keep pace; in a file run (a source that is not live) the
queues block instead, so no output loses a frame and the slowest sets the pace, as a single sink would.
An output whose send fails is left behind (one warning; its error in ``/streams``), and the stream fails
only once every output has.

Outputs whose encodes would be the same (equal :meth:`PacketSink.encoding`: two RTSP servers, or an
RTSP push and a recording that follows it) share one: frames go to a :class:`SharedEncoder` behind its
own queue, and its packets to each of those outputs' queues, so the stream encodes once per encoding,
not once per output. An output that lost packets to its full queue resumes at the next keyframe, which
it asks the encoder for. The source's audio, a queue with one reader, goes to the first output that
writes it, said in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamer.channel import Channel, DropPolicy
from streamer.errors import ConfigError, EndOfStream, SinkError
from streamer.frame import Frame, StreamInfo
from streamer.sinks.base import OutputStats, PacketSink, Sink
from streamer.sinks.encoder import EncodedFrame, Encoding, SharedEncoder

if TYPE_CHECKING:
    from streamer.media.audio import AudioTrack

__all__ = ["OutputStats", "TeeSink", "sinks_of"]

log = logging.getLogger(__name__)


class _Output:
    def __init__(self, sink: Sink, name: str) -> None:
        self.sink = sink
        self.name = name
        self.queue: Channel[Frame] | None = None
        self.group: _Group | None = None
        self.packets: Channel[EncodedFrame] | None = None
        """A shared encode's output: its queue of packets (``queue`` stays None)."""
        self.task: asyncio.Task[None] | None = None
        self.written = 0
        self.error: BaseException | None = None

    @property
    def working(self) -> bool:
        return self.error is None and (self.queue is not None or self.packets is not None)

    def stats(self) -> OutputStats:
        error = None if self.error is None else str(self.error) or type(self.error).__name__
        if self.group is not None:
            packets, frames = self.packets, self.group.queue
            lost = (0 if packets is None else packets.stats().dropped) + (
                0 if frames is None else frames.stats().dropped
            )
            return OutputStats(
                self.name,
                self.sink.frames_written,
                lost + self.sink.frames_dropped,
                0 if packets is None else len(packets),
                0 if packets is None else packets.capacity,
                error,
                shared=True,
            )
        queue = None if self.queue is None else self.queue.stats()
        return OutputStats(
            self.name,
            self.written,
            (0 if queue is None else queue.dropped) + self.sink.frames_dropped,
            0 if queue is None else queue.depth,
            0 if queue is None else queue.capacity,
            error,
        )


class _Group:
    """Outputs that take one shared encode's packets."""

    def __init__(self, encoding: Encoding, members: list[_Output]) -> None:
        self.encoding = encoding
        self.members = members
        self.encoder: SharedEncoder | None = None
        self.queue: Channel[Frame] | None = None
        """Frames waiting for the encoder."""
        self.task: asyncio.Task[None] | None = None

    @property
    def working(self) -> bool:
        return self.queue is not None and any(m.working for m in self.members)


def _groups(outputs: list[_Output]) -> list[_Group]:
    """Outputs with equal encodings, two or more of them, each set made a group."""
    by_encoding: dict[Encoding, list[_Output]] = {}
    for output in outputs:
        encoding = output.sink.encoding() if isinstance(output.sink, PacketSink) else None
        if encoding is not None:
            by_encoding.setdefault(encoding, []).append(output)
    groups = [_Group(e, members) for e, members in by_encoding.items() if len(members) > 1]
    for group in groups:
        for member in group.members:
            member.group = group
    return groups


class TeeSink(Sink):
    """Sends each frame to every sink of ``sinks`` (named ``names`` in logs and ``/streams``), each
    through its own queue of ``capacity`` frames; outputs of equal encodings share one encode."""

    def __init__(self, sinks: Sequence[Sink], names: Sequence[str], capacity: int = 8) -> None:
        if not sinks or len(sinks) != len(names):
            raise ConfigError(f"a tee needs one name per sink and at least one sink; got {len(sinks)} sinks")
        if capacity < 1:
            raise ConfigError(f"each output's queue must hold at least one frame, got {capacity}")
        self._outputs = [_Output(sink, name) for sink, name in zip(sinks, names, strict=True)]
        self._groups = _groups(self._outputs)
        self._capacity = capacity
        self.live = any(s.live for s in sinks)

    @property
    def sinks(self) -> list[Sink]:
        return [o.sink for o in self._outputs]

    def outputs(self) -> list[OutputStats]:
        return [o.stats() for o in self._outputs]

    @property
    def frames_dropped(self) -> int:
        """Frames its outputs let go (full queues, their own sinks' drops included)."""
        return sum(o.dropped for o in self.outputs())

    @property
    def reconnects(self) -> int:
        return sum(o.sink.reconnects for o in self._outputs)

    def attach_audio(self, track: AudioTrack) -> bool:
        for output in self._outputs:
            if output.sink.attach_audio(track):
                if len(self._outputs) > 1:
                    log.info("output %s writes the source's audio (one output can)", output.name)
                return True
        return False

    async def open(self, info: StreamInfo) -> None:
        try:
            for group in self._groups:
                group.encoder = SharedEncoder(group.encoding, info)
                await asyncio.to_thread(group.encoder.open)
                names = ", ".join(m.name for m in group.members)
                log.info("outputs %s share one encode: %s", names, group.encoding.describe())
            opened = await asyncio.gather(
                *(self._open(o, info) for o in self._outputs), return_exceptions=True
            )
            failed = [r for r in opened if isinstance(r, BaseException)]
            if failed:
                await asyncio.gather(*(o.sink.aclose() for o in self._outputs), return_exceptions=True)
                raise failed[0]
        except BaseException:
            self._close_encoders()
            raise
        policy = DropPolicy.DROP_OLDEST if info.live else DropPolicy.BLOCK
        loop = asyncio.get_running_loop()
        for output in self._outputs:
            if output.group is None:
                output.queue = Channel(self._capacity, policy, name=f"output:{output.name}")
                output.task = loop.create_task(self._drain(output), name=f"output-{output.name}")
            else:
                output.packets = Channel(self._capacity, policy, name=f"output:{output.name}")
                output.task = loop.create_task(self._drain_packets(output), name=f"output-{output.name}")
        for group in self._groups:
            group.queue = Channel(self._capacity, policy, name="encode")
            group.task = loop.create_task(self._encode(group), name="shared-encode")

    async def _open(self, output: _Output, info: StreamInfo) -> None:
        sink, group = output.sink, output.group
        if group is None:
            await sink.open(info)
            return
        assert isinstance(sink, PacketSink)
        assert group.encoder is not None
        await sink.open_encoded(info, group.encoder)

    async def send(self, frame: Frame) -> None:
        if not any(o.working for o in self._outputs):
            first = self._outputs[0].error
            if isinstance(first, SinkError):
                raise first
            raise SinkError(f"every output of this stream failed; the first: {first}")
        queues = [o.queue for o in self._outputs if o.group is None and o.working]
        queues += [g.queue for g in self._groups if g.working]
        for queue in queues:
            assert queue is not None
            with contextlib.suppress(EndOfStream):  # it failed meanwhile: send goes on to the rest
                await queue.put(frame)

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
            self._fail(output, err)

    async def _drain_packets(self, output: _Output) -> None:
        assert output.packets is not None
        assert isinstance(output.sink, PacketSink)
        try:
            while True:
                await output.sink.send_encoded(await output.packets.get())
        except EndOfStream:
            return
        except Exception as err:
            self._fail(output, err)

    def _fail(self, output: _Output, err: Exception) -> None:
        output.error = err
        for queue in (output.queue, output.packets):
            if queue is not None:
                queue.close()
        others = len(self._outputs) - 1
        log.warning("output %s failed: %s; %d other output(s) go on", output.name, err, others)

    async def _encode(self, group: _Group) -> None:
        """Encodes the group's frames once and hands each frame's packets to every member; at the end
        flushes the encoder and closes the members' queues."""
        assert group.queue is not None
        assert group.encoder is not None
        encoder = group.encoder
        try:
            while True:
                try:
                    frame: Frame | None = await group.queue.get()
                except EndOfStream:
                    frame = None
                encoded = await asyncio.to_thread(encoder.encode, frame)
                for member in group.members:
                    if member.working:
                        assert member.packets is not None
                        with contextlib.suppress(EndOfStream):
                            await member.packets.put(encoded)
                if frame is None:
                    return
        except Exception as err:  # the encoder itself failed: every output of it stops
            for member in group.members:
                if member.error is None:
                    self._fail(member, err)
        finally:
            group.queue.close()
            for member in group.members:
                if member.packets is not None:
                    member.packets.close()

    async def aclose(self) -> None:
        """Lets each output write what is queued, then closes every sink; the first error is raised."""
        for output in self._outputs:
            if output.queue is not None:
                output.queue.close()
        for group in self._groups:
            if group.queue is not None:
                group.queue.close()
        await asyncio.gather(*(g.task for g in self._groups if g.task is not None))
        await asyncio.gather(*(o.task for o in self._outputs if o.task is not None))
        closed = await asyncio.gather(*(o.sink.aclose() for o in self._outputs), return_exceptions=True)
        self._close_encoders()
        errors = [r for r in closed if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    def _close_encoders(self) -> None:
        for group in self._groups:
            if group.encoder is not None:
                group.encoder.close()


def sinks_of(sink: Sink) -> list[Sink]:
    """The sinks a stream writes to: a tee's outputs, or the one sink."""
    return sink.sinks if isinstance(sink, TeeSink) else [sink]
