"""Every connection to streamer's HTTP servers is timed and capped (streamer.serving.httpserve),
against a real aiohttp server on loopback spoken to over raw sockets: the status each bad request gets, one
log line each and no traceback, and descriptors back where they were."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from streamer.errors import ConfigError
from streamer.serving.httpserve import HttpLimits, read_body, serve

LIMITS = HttpLimits(header_timeout_s=0.5, body_timeout_s=0.5, idle_timeout_s=0.5, max_connections=4)


async def _echo(request: web.Request) -> web.Response:
    body = await read_body(request, LIMITS, "http")
    return web.Response(text=f"{len(body)}")


@asynccontextmanager
async def _served(limits: HttpLimits = LIMITS) -> AsyncIterator[int]:
    app = web.Application(client_max_size=1024)
    app.router.add_get("/", _echo)
    app.router.add_post("/", _echo)
    runner, port = await serve(app, "127.0.0.1", 0, "http", limits)
    try:
        yield port
    finally:
        await runner.cleanup()


async def _exchange(port: int, data: bytes) -> bytes:
    """What the server answers to ``data`` (its status line), having closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)  # to the server's close
    writer.close()
    return answer.split(b"\r\n", 1)[0]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"414"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n", b"431"),
        (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(100)) + b"\r\n", b"431"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n", b"408"),  # headers never finished
        (b"GET / HTT", b"408"),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
            b"408",
        ),  # body never finished
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n" + b"a" * 2000, b"413"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400"),  # TLS on the plain port
        (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"200"),
    ],
)
def test_each_bad_request_gets_its_status_in_one_line_without_a_traceback(
    request_bytes: bytes, status: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> bytes:
        async with _served() as port:
            return await _exchange(port, request_bytes)

    with caplog.at_level(logging.INFO):
        line = asyncio.run(scenario())
    assert line.split(b" ")[1] == status, line
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    said = [r for r in caplog.records if r.name == "streamer.serving.httpserve"]
    assert len(said) == (0 if status == b"200" else 1), said


def test_a_connection_past_the_cap_gets_503_and_the_others_are_served() -> None:
    async def scenario() -> tuple[bytes, bytes]:
        async with _served() as port:
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITS.max_connections)]
            refused = await _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            for _, writer in held:
                writer.close()
            await asyncio.sleep(0)
            while True:  # until the server has seen the held connections go
                served = await _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if b"503" not in served:
                    return refused, served
                await asyncio.sleep(0.05)

    refused, served = asyncio.run(scenario())
    assert b" 503 " in refused
    assert b" 200 " in served


def test_half_sent_requests_by_the_hundred_are_all_closed_and_leave_no_descriptors() -> None:
    limits = HttpLimits(
        header_timeout_s=0.5, body_timeout_s=0.5, max_connections=1000, max_connections_per_client=1000
    )

    async def scenario() -> tuple[int, int, list[bytes]]:
        async with _served(limits) as port:
            before = _fds()
            half = [
                b"GET /streams HTTP/1.1\r\nHost: x\r\n",
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab",
            ]
            answers = await asyncio.gather(*(_exchange(port, half[i % 2]) for i in range(200)))
            while _fds() > before:  # the server's side of each socket closes after the client's
                await asyncio.sleep(0.05)
            return before, _fds(), answers

    before, after, answers = asyncio.run(scenario())
    assert after <= before
    assert {a.split(b" ")[1] for a in answers} == {b"408"}


def test_one_client_past_its_own_cap_gets_503_while_another_is_served() -> None:
    limits = HttpLimits(max_connections_per_client=2)

    async def scenario() -> tuple[bytes, bytes]:
        async with _served(limits) as port:
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            refused = await _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            other = (await asyncio.wait_for(reader.read(), 30)).split(b"\r\n", 1)[0]
            writer.close()
            for _, held_writer in held:
                held_writer.close()
            return refused, other

    refused, other = asyncio.run(scenario())
    assert b" 503 " in refused
    assert b" 200 " in other


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(ConfigError, match="header_timeout_s"):
        HttpLimits(header_timeout_s=0)
    with pytest.raises(ConfigError, match="max_connections"):
        HttpLimits(max_connections=0)
