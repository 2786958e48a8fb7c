"""A live source's decode thread hands frames over without waiting for the event loop.

A relay drops data for a reader that stops reading its socket, so a decode thread that waits for a busy
loop turns a loop hiccup into frames lost upstream, with gaps that cut the windows. Here the loop is
held on purpose until the decode thread has produced everything: it must get there without the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from fractions import Fraction

import pytest

from streamer.channel import DropPolicy
from streamer.errors import EndOfStream
from streamer.frame import Frame, StreamInfo
from streamer.sources.base import ThreadedSource
from tests.factories import make_frame


class Burst(ThreadedSource):
    """``count`` frames as fast as the thread can make them, once ``go`` is set; ``done`` once the last
    is handed over."""

    def __init__(self, count: int, capacity: int, policy: DropPolicy) -> None:
        super().__init__("burst", capacity, policy)
        self.count = count
        self.go = threading.Event()
        self.done = threading.Event()

    def hold_the_loop(self) -> bool:
        """Blocks the calling (loop) thread from before the first frame until the last is handed over."""
        self.go.set()
        return self.done.wait(30)

    def _open(self) -> StreamInfo:
        return StreamInfo(8, 8, Fraction(30), Fraction(1, 30), live=True)

    def _frames(self) -> Iterator[Frame]:
        self.go.wait(30)
        for i in range(self.count):
            yield make_frame(i)
        self.done.set()


async def drain(source: ThreadedSource) -> list[Frame]:
    """Every frame the source still delivers, until it ends."""
    got = []
    while True:
        try:
            got.append(await source.recv())
        except EndOfStream:
            return got


def test_a_live_source_keeps_decoding_while_the_loop_is_busy_and_keeps_the_newest_frames() -> None:
    async def scenario() -> tuple[bool, list[int], int]:
        source = Burst(20, capacity=8, policy=DropPolicy.DROP_OLDEST)
        await source.open()
        finished = source.hold_the_loop()  # the thread must not need the loop
        got = [f.index for f in await drain(source)]
        stats = source.stats()
        await source.aclose()
        assert stats is not None
        return finished, got, stats.dropped

    finished, got, dropped = asyncio.run(scenario())
    assert finished
    assert got == list(range(12, 20))  # the newest capacity frames, in order
    assert dropped == 12


def test_a_file_source_still_waits_for_room_and_loses_nothing() -> None:
    async def scenario() -> list[int]:
        source = Burst(20, capacity=2, policy=DropPolicy.BLOCK)
        await source.open()
        source.go.set()
        got = [f.index for f in await drain(source)]
        await source.aclose()
        return got

    assert asyncio.run(scenario()) == list(range(20))


class BrokenBurst(Burst):
    """Frame 3 starts a new run (a reconnect, say)."""

    def _frames(self) -> Iterator[Frame]:
        self.go.wait(30)
        for i in range(self.count):
            yield make_frame(i, discontinuity=i == 3)
        self.done.set()


@pytest.mark.parametrize("capacity", [1, 4])
def test_a_run_break_dropped_on_the_way_stays_marked_on_the_frame_after_it(capacity: int) -> None:
    async def scenario() -> list[Frame]:
        source = BrokenBurst(8, capacity=capacity, policy=DropPolicy.DROP_OLDEST)
        await source.open()
        assert source.hold_the_loop()
        got = await drain(source)
        await source.aclose()
        return got

    got = asyncio.run(scenario())
    assert [f.index for f in got] == list(range(8 - capacity, 8))
    assert got[0].discontinuity  # frame 3 was dropped; the first kept frame after it carries the break
