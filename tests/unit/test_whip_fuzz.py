"""Bad input on the WHIP and WHEP endpoints: each refusal for both, then random requests (hypothesis).

The server is a real :class:`WebRtcServer` on a loopback port; fuzzed requests are written byte for
byte on a raw socket, so headers can lie (a Content-Length that disagrees with the body). Every answer
must be a 4xx with a one-line reason, or 201 for an offer that happens to be valid; never a 5xx; and
the server must still answer a good offer afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from aiohttp import ClientSession, http_exceptions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamer.webrtc import WebRtcServer, WhepSink, WhipSource
from tests.unit.test_whip_http import AUTH, SDP, TOKEN, make_offer, served

T = TypeVar("T")
DIRECTION = {"whip": "sendonly", "whep": "recvonly"}


# --- each refusal, on both endpoints -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["whip", "whep"])
def test_wrong_token_invalid_sdp_and_oversized_body_are_refused_on_both_endpoints(kind: str) -> None:
    direction = "sendonly" if kind == "whip" else "recvonly"

    async def scenario() -> None:
        async with served(max_body_bytes=4096) as (_, client):
            offer = await make_offer(direction)
            ct = {"Content-Type": "application/sdp"}
            answers = {
                "no token": await client.post(f"/{kind}/cam", data=offer, headers=ct),
                "wrong token": await client.post(
                    f"/{kind}/cam", data=offer, headers={**ct, "Authorization": "Bearer nope"}
                ),
                "not a bearer": await client.post(
                    f"/{kind}/cam", data=offer, headers={**ct, "Authorization": f"Basic {TOKEN}"}
                ),
                "not SDP": await client.post(f"/{kind}/cam", data=b"hello", headers=SDP),
                "half an offer": await client.post(
                    f"/{kind}/cam", data=offer[: len(offer) // 2], headers=SDP
                ),
                "no fingerprint": await client.post(
                    f"/{kind}/cam", data=offer.replace("a=fingerprint", "a=x"), headers=SDP
                ),
                "not UTF-8": await client.post(f"/{kind}/cam", data=b"v=0\r\n\xff\xfe", headers=SDP),
                "oversized": await client.post(
                    f"/{kind}/cam", data="v=0\r\n" + "a=x\r\n" * 2000, headers=SDP
                ),
            }
            expected = {
                "no token": (401, "bearer token"),
                "wrong token": (401, "bearer token"),
                "not a bearer": (401, "bearer token"),
                "not SDP": (400, "must start with 'v=0'"),
                "half an offer": (400, ""),
                "no fingerprint": (400, "DTLS fingerprint"),
                "not UTF-8": (400, "not UTF-8"),
                "oversized": (413, "larger than 4096 bytes"),
            }
            for case, response in answers.items():
                reason = (await response.text()).strip()
                assert (response.status, case) == (expected[case][0], case), reason
                assert expected[case][1] in reason, case
                assert reason
                assert "\n" not in reason
            # None of it took the stream: a good offer still gets in.
            good = await client.post(f"/{kind}/cam", data=offer, headers=SDP)
            assert good.status == 201, await good.text()

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ["whip", "whep"])
def test_a_client_that_leaves_mid_body_is_not_logged_as_a_server_failure(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        server = WebRtcServer(port=0)
        WhipSource(server, "cam")
        WhepSink(server, "cam")
        await server.start()
        port = int(server.url.rsplit(":", 1)[1])
        try:
            short = Request("POST", f"/{kind}/cam", (("Content-Type", "application/sdp"),), b"v=0\r\n", 1000)
            assert (await send_raw(port, short)).status is None  # it hung up: nobody to answer
            await good_offer_still_answered(port, {kind: await make_offer(DIRECTION[kind])}, kinds=(kind,))
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


# --- random requests -----------------------------------------------------------------------------------


@dataclass
class Live:
    """A real server on 127.0.0.1 whose event loop runs in a thread, so hypothesis can drive it."""

    server: WebRtcServer
    loop: asyncio.AbstractEventLoop
    port: int
    offers: dict[str, str]

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="whip-fuzz-loop", daemon=True)
    thread.start()

    async def start() -> tuple[WebRtcServer, dict[str, str]]:
        server = WebRtcServer(port=0, token=TOKEN, max_body_bytes=4096, connect_timeout_s=2.0)
        WhipSource(server, "cam")
        WhepSink(server, "cam")
        await server.start()
        return server, {"whip": await make_offer("sendonly"), "whep": await make_offer("recvonly")}

    server, offers = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    port = int(server.url.rsplit(":", 1)[1])
    try:
        yield Live(server, loop, port, offers)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        asyncio.run_coroutine_threadsafe(cancel_leftovers(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def cancel_leftovers() -> None:
    """aiortc's connect tasks of ended sessions may still wait on ICE: end them before the loop goes."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    declared: int | None
    """Content-Length sent, which may disagree with the body; None sends none."""


def mutated(offer: str) -> st.SearchStrategy[bytes]:
    """A real offer with lines dropped, duplicated, truncated or spliced with random bytes."""
    lines = offer.split("\r\n")
    edits = st.lists(
        st.tuples(
            st.integers(0, len(lines) - 1), st.sampled_from(["drop", "dup", "cut", "junk"]), st.binary()
        ),
        max_size=4,
    )

    def apply(changes: list[tuple[int, str, bytes]]) -> bytes:
        out = [line.encode() for line in lines]
        for at, how, junk in changes:
            at = min(at, len(out) - 1)
            if how == "drop" and len(out) > 1:
                del out[at]
            elif how == "dup":
                out.insert(at, out[at])
            elif how == "cut":
                out[at] = out[at][: len(out[at]) // 2]
            else:
                out[at] = out[at] + junk
        return b"\r\n".join(out)

    return edits.map(apply)


header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)


def bodies(offers: dict[str, str]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=6000),
        st.text(max_size=3000).map(lambda s: s.encode("utf-8")),
        st.binary(max_size=200).map(lambda b: b"v=0\r\n" + b),
        st.sampled_from(sorted(offers)).flatmap(lambda kind: mutated(offers[kind])),
    )


@st.composite
def requests(draw: st.DrawFn, offers: dict[str, str]) -> Request:
    kind = draw(st.sampled_from(["whip", "whep"]))
    stream = draw(st.sampled_from(["cam", "cam.original", "nope", "%2e%2e", "c%20m", "x" * 300]))
    method = draw(st.sampled_from(["POST"] * 6 + ["DELETE", "PATCH", "GET", "PUT"]))
    path = f"/{kind}/{stream}"
    if method in ("DELETE", "PATCH"):
        path += "/" + draw(st.text("abcdefghijklmnopqrstuvwxyz0123456789_-", max_size=30))
    body = draw(bodies(offers))
    headers: list[tuple[str, str]] = []
    content_type = draw(
        st.sampled_from(["application/sdp"] * 4 + ["application/sdp; charset=utf-8", "text/plain", "", None])
        | header_text
    )
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    authorization = draw(
        st.sampled_from(
            [f"Bearer {TOKEN}"] * 4 + [f"bearer {TOKEN}", "Bearer", "Bearer x", f"Basic {TOKEN}", None]
        )
        | header_text
    )
    if authorization is not None:
        headers.append(("Authorization", authorization))
    how = draw(st.sampled_from(["exact"] * 5 + ["none", "more", "less", "huge"]))
    declared = {
        "exact": len(body),
        "none": None,
        "more": len(body) + 10,
        "less": max(0, len(body) - 10),
        "huge": 10**9,
    }[how]
    return Request(method, path, tuple(headers), body, declared)


@dataclass(frozen=True)
class Answer:
    status: int | None
    """None when the server closed without answering."""
    headers: dict[str, str]
    body: str


async def send_raw(port: int, request: Request) -> Answer:
    """Writes ``request`` as is and reads the first response (``Connection: close`` ends it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = [f"{request.method} {request.path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
        head += [f"{name}: {value}" for name, value in request.headers]
        if request.declared is not None:
            head.append(f"Content-Length: {request.declared}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + request.body)
        await writer.drain()
        if request.declared is not None and request.declared > len(request.body):
            writer.write_eof()  # the rest of the promised body never comes: only the end of input tells
        raw = await asyncio.wait_for(reader.read(), 20)
    except (ConnectionResetError, BrokenPipeError):
        raw = b""
    finally:
        writer.close()
    if not raw:
        return Answer(None, {}, "")
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    return Answer(int(status_line.split()[1]), headers, body.decode("utf-8", "replace"))


async def delete(port: int, location: str) -> int:
    async with (
        ClientSession() as session,
        session.delete(f"http://127.0.0.1:{port}{location}", headers=AUTH) as response,
    ):
        return response.status


async def good_offer_still_answered(
    port: int, offers: dict[str, str], kinds: tuple[str, ...] = ("whip", "whep")
) -> None:
    async with ClientSession() as session:
        for kind in kinds:
            url = f"http://127.0.0.1:{port}/{kind}/cam"
            async with session.post(url, data=offers[kind], headers=SDP) as response:
                assert response.status == 201, await response.text()
                location = response.headers["Location"]
            assert await delete(port, location) == 200


def test_random_requests_get_a_4xx_with_one_line_or_a_201_and_never_break_the_server(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    answered: dict[int | None, int] = {}

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(request=requests(live.offers))
    def check(request: Request) -> None:
        answer = live.call(send_raw(live.port, request))
        answered[answer.status] = answered.get(answer.status, 0) + 1
        if answer.status is None:
            # Only a body cut short of its Content-Length may go unanswered: the server waits for the rest.
            assert request.declared is not None, request
            assert request.declared > len(request.body), request
            return
        if answer.status == 201:
            # A mutation that left the offer valid: it got a session, which the client now ends.
            assert request.method == "POST"
            assert answer.body.startswith("v=0")
            assert live.call(delete(live.port, answer.headers["location"])) == 200
            return
        assert 400 <= answer.status < 500, (answer, request)
        reason = answer.body.strip()
        assert reason
        framed = request.declared == len(request.body) or (request.declared is None and not request.body)
        if framed:
            assert "\n" not in reason, reason
        # else the bytes past the body are not HTTP: aiohttp's parser answers 400 with its own page.

    with caplog.at_level(logging.ERROR):
        check()
        live.call(good_offer_still_answered(live.port, live.offers))
    # aiohttp's HTTP parser logs malformed requests (a body longer than its Content-Length) at ERROR and
    # answers 400 itself; anything else logged at ERROR is a handler that raised: a 500.
    failures = [
        r
        for r in caplog.records
        if r.levelno >= logging.ERROR
        and not (r.exc_info and isinstance(r.exc_info[1], http_exceptions.HttpProcessingError))
    ]
    assert not failures, caplog.text
    print(f"answers by status: {dict(sorted(answered.items(), key=lambda kv: str(kv[0])))}")
