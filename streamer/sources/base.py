"""The source port: ``recv() -> Frame`` until EndOfStream, plus ``aclose()``.

Decoding blocks, so each :class:`ThreadedSource` decodes in one thread of its own and hands frames to
the event loop through a bounded :class:`~streamer.channel.Channel`: BLOCK for files (decode only as
fast as the pipeline consumes), DROP_OLDEST for live feeds (a slow pipeline loses the oldest frames,
counted, rather than growing a queue).
"""

from __future__ import annotations

import abc
import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from streamer.channel import Channel, ChannelStats, DropPolicy
from streamer.errors import EndOfStream, SourceError, StreamerError
from streamer.frame import Frame, StreamInfo

if TYPE_CHECKING:
    from streamer.media.audio import AudioTrack

__all__ = ["Connection", "DecodeLoss", "DecodeObserver", "Source", "ThreadedSource"]

DecodeObserver = Callable[[float], None]
"""Told the seconds one frame took to decode and convert to RGB; may be called from a decode thread."""

log = logging.getLogger(__name__)


REORDER_FRAMES = 16
"""The most frames an H.264 decoder holds back to reorder them: what packets in and frames out may differ
by while a decoder is running, before a frame counts as lost."""


class DecodeLoss:
    """Frames a decoder could not make: video packets in against frames out. Each packet of a file's or
    a camera's H.264 is one picture, so once the decoder has given back the frames it held (the end of
    the input), every packet left over was lost to damaged or missing data; while it runs, only what
    exceeds the decoder's reordering delay counts. Plain counters, fed by one decode thread."""

    def __init__(self) -> None:
        self._packets = 0
        self._frames = 0
        self._settled = 0

    def packet(self) -> None:
        self._packets += 1

    def frame(self) -> None:
        self._frames += 1

    def settle(self, flushed: bool = True) -> None:
        """The decoder is done with what it was given (``flushed``: its held frames came out); what is
        left is lost, and counting starts again."""
        self._settled += max(0, self._packets - self._frames - (0 if flushed else REORDER_FRAMES))
        self._packets = self._frames = 0

    @property
    def lost(self) -> int:
        """Frames lost so far."""
        return self._settled + max(0, self._packets - self._frames - REORDER_FRAMES)


@dataclasses.dataclass(frozen=True, slots=True)
class Connection:
    """A source's connection to its camera at one moment: how it stands and how it has gone."""

    state: str
    """``connecting`` (or waiting out a backoff), ``live``, ``stalled`` or ``closed``."""
    attempts: int
    failures: int
    reconnects: int
    last_error: str | None
    last_error_at: float | None
    """Wall-clock time (Unix seconds) of ``last_error``."""
    next_retry_in: float | None
    """Seconds until the next attempt while waiting out a backoff; None otherwise."""
    reader: str | None = None
    """How the stream is read where a source has more than one way: an RTSP source's ``rtp`` (its own
    client, each frame on its marker bit) or ``ffmpeg``."""

    @property
    def live(self) -> bool:
        return self.state == "live"


class Source(abc.ABC):
    """A stream of frames of one stream id; ``info`` is valid once ``open`` returned."""

    stream_id: str
    _decode_observer: DecodeObserver | None = None

    def observe_decode(self, observer: DecodeObserver | None) -> None:
        """Report each frame's decode time (the decode stage of the metrics) to ``observer``."""
        self._decode_observer = observer

    def _decoded(self, seconds: float) -> None:
        observer = self._decode_observer
        if observer is not None:
            observer(seconds)

    @abc.abstractmethod
    async def open(self) -> StreamInfo:
        """Connect or open the file; raises SourceError (SourceNotFoundError for a missing path)."""

    @abc.abstractmethod
    async def recv(self) -> Frame:
        """The next frame; raises EndOfStream when there is none, SourceError when reading failed."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Stop producing and release the input; safe to call twice."""

    @property
    @abc.abstractmethod
    def info(self) -> StreamInfo: ...

    def stats(self) -> ChannelStats | None:
        """The hand-off's counters (frames dropped before the pipeline saw them), if it has one."""
        return None

    def connection(self) -> Connection | None:
        """The source's connection to a camera, for ``/streams`` and the metrics; None for a source
        that makes none (a file, a synthetic pattern, a WHIP stream whose publisher connects to us)."""
        return None

    @property
    def undecodable(self) -> int:
        """Frames of the input the decoder could not make (damaged or missing data), so far."""
        return 0

    @property
    def audio(self) -> AudioTrack | None:
        """Audio packets for a sink to write beside the video, once open (a file's, when asked for);
        whoever opened the source hands the track to a sink or declines it. None: no audio to give."""
        return None

    @property
    def waiting(self) -> bool:
        """Whether the source waits for someone to send it video (a WHIP stream with no publisher):
        nothing wrong, so not a stall."""
        return False

    def interrupt(self) -> None:  # noqa: B027 - optional: a source that never blocks needs nothing here
        """Make a ``recv`` waiting on live input end soon with EndOfStream (shutdown, SIGINT)."""

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> Frame:
        try:
            return await self.recv()
        except EndOfStream:
            raise StopAsyncIteration from None


class ThreadedSource(Source):
    """A source whose blocking ``_open``/``_frames`` run in one dedicated thread.

    Subclasses implement ``_open`` (returns StreamInfo) and ``_frames`` (yields Frames, indices from 0);
    any exception in them reaches the consumer from ``recv`` as a SourceError.
    """

    def __init__(self, stream_id: str, capacity: int, policy: DropPolicy) -> None:
        self.stream_id = stream_id
        self._capacity = capacity
        self._policy = policy
        self._channel: Channel[Frame] | None = None
        self._info: StreamInfo | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._handoff = threading.Lock()
        self._outbox: collections.deque[Frame] = collections.deque()
        """Live frames decoded and not yet taken by the loop: at most the capacity, the newest kept."""
        self._draining = False
        self._shed = 0
        """Live frames dropped from the outbox because the loop had not taken them."""

    @property
    def info(self) -> StreamInfo:
        if self._info is None:
            raise RuntimeError(f"source {self.stream_id!r} is not open; await open() first")
        return self._info

    @abc.abstractmethod
    def _open(self) -> StreamInfo: ...

    @abc.abstractmethod
    def _frames(self) -> Iterator[Frame]: ...

    def _close(self) -> None:
        """Release what ``_open`` acquired; runs in the decode thread when it ends."""

    async def open(self) -> StreamInfo:
        if self._info is not None:
            return self._info
        loop = asyncio.get_running_loop()
        self._channel = Channel(self._capacity, self._policy, name=f"source:{self.stream_id}")
        opened: concurrent.futures.Future[StreamInfo] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(loop, opened), name=f"decode-{self.stream_id}", daemon=True
        )
        self._thread.start()
        return await asyncio.wrap_future(opened)

    async def recv(self) -> Frame:
        if self._channel is None:
            raise RuntimeError(f"source {self.stream_id!r} is not open; await open() first")
        try:
            return await self._channel.get()
        except EndOfStream:
            if self._error is not None:
                if isinstance(self._error, StreamerError):
                    raise self._error from None
                raise SourceError(f"source {self.stream_id!r} failed: {self._error}") from self._error
            raise

    async def aclose(self) -> None:
        self._stop.set()
        if self._channel is not None:
            while self._channel.get_nowait() is not None:
                pass
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)

    def stats(self) -> ChannelStats | None:
        if self._channel is None:
            return None
        stats = self._channel.stats()
        with self._handoff:
            shed = self._shed
        return dataclasses.replace(stats, dropped=stats.dropped + shed) if shed else stats

    def interrupt(self) -> None:
        self._stop.set()

    def _run(self, loop: asyncio.AbstractEventLoop, opened: concurrent.futures.Future[StreamInfo]) -> None:
        channel = self._channel
        assert channel is not None
        try:
            try:
                info = self._open()
            except BaseException as exc:
                opened.set_exception(exc)
                return
            self._info = info
            opened.set_result(info)
            for frame in self._frames():
                if self._stop.is_set() or not self._deliver(loop, channel, frame):
                    break
        except BaseException as exc:
            log.warning("source %s stopped with an error: %s", self.stream_id, exc)
            self._error = exc
        finally:
            self._close()
            with contextlib.suppress(RuntimeError):  # the loop closed first: nobody is left to tell
                loop.call_soon_threadsafe(channel.close)

    def _deliver(self, loop: asyncio.AbstractEventLoop, channel: Channel[Frame], frame: Frame) -> bool:
        """Hand one frame to the loop, waiting for room under BLOCK; False once asked to stop."""
        if loop.is_closed():
            return False
        if channel.policy is not DropPolicy.BLOCK:
            return self._offer(loop, channel, frame)
        future = asyncio.run_coroutine_threadsafe(channel.put(frame), loop)
        while True:
            try:
                future.result(timeout=0.1)
                return True
            except concurrent.futures.TimeoutError:
                if self._stop.is_set():
                    future.cancel()
                    return False
            except (EndOfStream, concurrent.futures.CancelledError):
                return False

    def _offer(self, loop: asyncio.AbstractEventLoop, channel: Channel[Frame], frame: Frame) -> bool:
        """A live frame, handed over without waiting for the loop: a busy loop must never keep this
        thread from reading its socket (an RTSP relay drops data for a reader that falls behind, and
        the frames come out with gaps). Frames wait in a bounded outbox, newest kept, oldest dropped
        and counted with the channel's drops; one callback moves them all into the channel."""
        with self._handoff:
            if len(self._outbox) >= self._capacity:
                self._shed += 1
                if self._outbox.popleft().discontinuity:  # the break stays marked on what follows it
                    if self._outbox:
                        self._outbox[0] = dataclasses.replace(self._outbox[0], discontinuity=True)
                    else:
                        frame = dataclasses.replace(frame, discontinuity=True)
            self._outbox.append(frame)
            schedule, self._draining = not self._draining, True
        if schedule:
            try:
                loop.call_soon_threadsafe(self._drain, channel)
            except RuntimeError:  # the loop has closed
                return False
        return not self._stop.is_set()

    def _drain(self, channel: Channel[Frame]) -> None:
        """On the loop: the outbox into the channel, which drops its oldest when full."""
        with self._handoff:
            frames = list(self._outbox)
            self._outbox.clear()
            self._draining = False
        with contextlib.suppress(EndOfStream):
            for frame in frames:
                channel.put_nowait(frame)
