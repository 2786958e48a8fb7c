from __future__ import annotations

import asyncio

import pytest

from streamer.channel import Channel, DropPolicy
from streamer.errors import ConfigError, EndOfStream


def test_drop_oldest_returns_what_it_evicted() -> None:
    async def main() -> None:
        channel: Channel[int] = Channel(2, DropPolicy.DROP_OLDEST)
        assert [await channel.put(i) for i in range(4)] == [None, None, 0, 1]
        assert [await channel.get(), await channel.get()] == [2, 3]
        stats = channel.stats()
        assert (stats.put, stats.got, stats.dropped, stats.max_depth) == (4, 2, 2, 2)

    asyncio.run(main())


def test_latest_only_keeps_one() -> None:
    async def main() -> None:
        channel: Channel[int] = Channel(10, DropPolicy.LATEST_ONLY)
        for i in range(5):
            channel.put_nowait(i)
        assert len(channel) == 1
        assert await channel.get() == 4

    asyncio.run(main())


def test_block_waits_for_room_and_loses_nothing() -> None:
    async def main() -> list[int]:
        channel: Channel[int] = Channel(1, DropPolicy.BLOCK)

        async def produce() -> None:
            for i in range(20):
                await channel.put(i)
            channel.close()

        producer = asyncio.create_task(produce())
        received = [item async for item in channel]
        await producer
        assert channel.stats().max_depth == 1
        return received

    assert asyncio.run(main()) == list(range(20))


def test_closed_channel_drains_then_ends() -> None:
    async def main() -> None:
        channel: Channel[str] = Channel(4)
        await channel.put("a")
        channel.close()
        assert await channel.get() == "a"
        with pytest.raises(EndOfStream):
            await channel.get()
        with pytest.raises(EndOfStream):
            await channel.put("b")

    asyncio.run(main())


def test_put_nowait_on_full_blocking_channel_is_an_error_not_a_drop() -> None:
    async def main() -> None:
        channel: Channel[int] = Channel(1)
        channel.put_nowait(1)
        with pytest.raises(RuntimeError, match="full"):
            channel.put_nowait(2)

    asyncio.run(main())


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        Channel(0)
