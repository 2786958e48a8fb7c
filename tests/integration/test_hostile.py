"""Hostile input against the real servers, on loopback: half-sent requests by the hundred, bad bytes in
paths and URLs, outputs that name one target twice, outputs to other hosts, uncompressed codecs, odd
frame sizes, oversized request lines, and damaged files. Each is answered in one line with its status,
nothing logs a traceback, and descriptors, threads and memory come back to where they were."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from streamer.webrtc import WebRtcServer, WhepSink
from tests.integration.rtsp_fixtures import until
from tests.integration.test_service import config_of, serving

pytestmark = pytest.mark.slow

HALF_SENT = 500
AUTH = {"Authorization": "Bearer t"}


@pytest.fixture(autouse=True)
def _descriptors_for_both_ends() -> Iterator[None]:
    """Both ends of every test socket live in this process: room for them under the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 4 * HALF_SENT + 512))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def _half_sent(port: int, data: bytes) -> bytes:
    """The status line the server answers to a request that stops part way, once it has closed; "RST"
    where the connection was reset (a connection refused past a cap, its request unread)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 60)
    except ConnectionResetError:  # refused at once, before the request was read: the answer may be lost
        return b"HTTP/1.1 RST"
    finally:
        writer.close()
    return answer.split(b"\r\n", 1)[0]


async def _flood(port: int, path: str, alive: str) -> tuple[list[bytes], list[int]]:
    """Half of ``HALF_SENT`` requests stop in their headers, half in their bodies, all from 127.0.0.1;
    meanwhile ``alive`` is asked for every 0.1 s from 127.0.0.2. Returns every answer's status line and
    the statuses ``alive`` gave."""
    halves = [
        f"GET {alive} HTTP/1.1\r\nHost: x\r\n".encode(),
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\nContent-Length: 100\r\n\r\n"
        "0123456789".encode(),
    ]
    flood = asyncio.gather(*(_half_sent(port, halves[i % 2]) for i in range(HALF_SENT)))
    statuses: list[int] = []
    # The probe comes from another loopback address, as a kubelet's comes from another host than a flood.
    probe = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=probe) as http:
        while not flood.done():
            async with http.get(f"http://127.0.0.1:{port}{alive}") as response:
                statuses.append(response.status)
            await asyncio.sleep(0.1)
    return await flood, statuses


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert "Traceback" not in caplog.text


def test_the_control_api_survives_half_sent_requests_and_hostile_streams(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    media = tmp_path / "media"
    (media / "sub").mkdir(parents=True)
    (media / "link").symlink_to(media)
    config = config_of(
        [],
        **{
            "http.token": "t",
            "http.media_roots": [str(media)],
            "http.header_timeout_s": 1.0,
            "http.body_timeout_s": 1.0,
            "http.max_connections": 2 * HALF_SENT,  # every request held to its timeout, none refused
            "http.max_connections_per_client": 2 * HALF_SENT,
        },
    )

    async def add(http: aiohttp.ClientSession, url: str, stream: dict[str, Any]) -> tuple[int, str]:
        async with http.post(url + "/streams", json=stream, headers=AUTH) as response:
            return response.status, await response.text()

    async def scenario() -> None:
        # Each request on a connection of its own, closed with its answer: an idle keep-alive connection
        # lives until the client's pool sweeps it (15 to 30 s), which is not the streams' to free.
        one_shot = aiohttp.TCPConnector(force_close=True)
        async with serving(config) as run, aiohttp.ClientSession(connector=one_shot) as http:
            url = run.control.url
            port = int(url.rsplit(":", 1)[1])
            await run.get("/healthz")
            fds, threads, rss = _fds(), _threads(), _rss_mb()

            answers, alive = await _flood(port, "/streams", "/healthz")
            assert {a.split(b" ")[1] for a in answers} == {b"408", b"401"}  # a POST without a token: 401
            assert set(alive) == {200}
            await until(lambda: _fds() <= fds, 30, "the flood's descriptors to close")

            line = await _half_sent(port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            assert line.split(b" ")[1] == b"414"

            synthetic = {"kind": "synthetic", "frames": 5, "width": 64, "height": 48}
            for key, value in (("path", "/media/a\x00.mp4"), ("url", "rtsp://h/x\r\nX: 1")):
                kind = "file" if key == "path" else "rtsp"
                status, text = await add(http, url, {"id": "nul", "source": {"kind": kind, key: value}})
                assert (status, text.count("\n")) == (400, 1)
                assert f"source.{key}: holds the control character" in text
            status, text = await add(
                http, url, {"id": "nul", "source": synthetic, "model": {"path": "/m\x00.onnx"}}
            )
            assert "model.path: holds the control character" in text

            first = {"id": "first", "source": {**synthetic, "frames": None, "realtime": True}}
            first["sink"] = {"kind": "file", "path": str(media / "d.mp4")}
            assert (await add(http, url, first))[0] == 201
            await run.wait_states({"first": "live"})
            assert (media / "d.mp4").exists()  # in use, not merely present: 409 naming the writer, not 403
            for spelling in (media / "sub" / ".." / "d.mp4", media / "link" / "d.mp4"):
                second = {
                    "id": "second",
                    "source": synthetic,
                    "sink": {"kind": "file", "path": str(spelling)},
                }
                status, text = await add(http, url, second)
                assert status == 409, text
                assert "is written by stream 'first'" in text

            rawvideo = {"kind": "file", "path": str(media / "raw.mkv"), "codec": "rawvideo"}
            status, text = await add(http, url, {"id": "raw", "source": synthetic, "sink": rawvideo})
            assert (status, "http.api_codecs" in text) == (403, True)
            elsewhere = {"kind": "rtsp", "url": "rtsp://203.0.113.9/push"}
            status, text = await add(http, url, {"id": "far", "source": synthetic, "sink": elsewhere})
            assert (status, "outside http.allowed_hosts" in text) == (403, True)

            wide = {"id": "wide", "source": {**synthetic, "width": 7680, "height": 16, "frames": 10}}
            assert (await add(http, url, wide))[0] == 201
            await run.wait_states({"wide": "ended"})

            await run.wait_states({"first": "live"})
            for stream in ("first", "wide"):
                async with http.delete(f"{url}/streams/{stream}", headers=AUTH) as response:
                    assert response.status == 200
            await until(lambda: _fds() <= fds, 30, "the streams' descriptors to close")
            assert _threads() <= threads + 2  # the loop's executor may keep a worker or two
            assert _rss_mb() < rss + 100

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    _no_tracebacks(caplog)


def test_the_webrtc_server_survives_half_sent_requests(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        server = WebRtcServer(port=0, token="t")
        WhepSink(server, "cam")
        await server.start()
        try:
            port = int(server.url.rsplit(":", 1)[1])
            async with aiohttp.ClientSession() as http, http.get(server.url + "/") as response:
                assert response.status == 200
            fds = _fds()
            answers, alive = await _flood(port, "/whep/cam", "/")  # at the default caps
            statuses = Counter(a.split(b" ")[1] for a in answers)
            assert set(statuses) <= {b"408", b"401", b"503", b"RST"}
            assert statuses[b"503"] + statuses[b"RST"] > 0  # past max_connections_per_client
            assert statuses[b"408"] + statuses[b"401"] > 0  # those let in, held to their timeouts
            assert set(alive) == {200}
            await until(lambda: _fds() <= fds, 30, "the flood's descriptors to close")
        finally:
            await server.stop()

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    _no_tracebacks(caplog)


def test_a_damaged_file_says_what_it_lost_in_streams_and_metrics(
    tmp_path: Path, real_clip: Path, caplog: pytest.LogCaptureFixture
) -> None:
    media = tmp_path / "media"
    media.mkdir()
    data = bytearray(real_clip.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    (media / "damaged.mp4").write_bytes(bytes(data))
    config = config_of([], **{"http.token": "t", "http.media_roots": [str(media)]})

    async def scenario() -> tuple[dict[str, Any], str]:
        async with serving(config) as run, aiohttp.ClientSession() as http:
            stream = {"id": "damaged", "source": {"kind": "file", "path": str(media / "damaged.mp4")}}
            async with http.post(run.control.url + "/streams", json=stream, headers=AUTH) as response:
                assert response.status == 201
            await run.wait_states({"damaged": "ended"}, timeout=60)
            _, status = await run.get("/streams/damaged", AUTH)
            _, metrics = await run.get("/metrics", AUTH)
            return status, metrics

    with caplog.at_level(logging.WARNING):
        status, metrics = asyncio.run(scenario())
    lost = status["counters"]["undecodable"]
    assert lost > 0
    assert f'streamer_frames_dropped_total{{reason="undecodable",stream="damaged"}} {lost}.0' in metrics
    said = [r.getMessage() for r in caplog.records if "could not be decoded" in r.getMessage()]
    assert said == [
        f"'{media / 'damaged.mp4'}': {lost} frames could not be decoded (damaged or missing data); "
        "the stream went on without them"
    ]
