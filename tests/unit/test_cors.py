"""CORS for publishers and players on other origins: the pure decisions, then the server's answers to
preflights and real requests through aiohttp's test client (real aiortc offers, no media)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiortc import RTCPeerConnection

from streamer.webrtc import WebRtcServer, WhepSink, WhipSource
from streamer.webrtc.cors import ALLOWED_HEADERS, CorsPolicy, check_origins
from streamer.webrtc.ice import IceServer, restrict_host_addresses, rtc_configuration

TOKEN = "t0ken"
STUDIO = "https://studio.example.net"
EVIL = "https://evil.example.com"
TURN = IceServer(("turn:turn.example.net:3478?transport=udp",), "alice", "s3cret")


def preflight(
    origin: str | None, method: str = "POST", headers: str = "authorization,content-type"
) -> dict[str, str]:
    sent = {"Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}
    return sent if origin is None else {**sent, "Origin": origin}


def test_only_listed_origins_are_allowed_and_none_is_by_default() -> None:
    policy = CorsPolicy(check_origins([STUDIO, "http://localhost:3000"]))
    assert policy.allowed(STUDIO) == STUDIO
    assert policy.allowed("http://localhost:3000") == "http://localhost:3000"
    for other in (EVIL, "https://studio.example.net.evil.com", "http://studio.example.net", "null", "", None):
        assert policy.allowed(other) is None
    assert policy.allowed(STUDIO + "x" * 400) is None  # longer than any origin: not parsed further
    assert CorsPolicy().allowed(STUDIO) is None
    assert CorsPolicy().response_headers(STUDIO) == {}
    assert CorsPolicy(("*",)).allowed(EVIL) == "*"


def test_real_responses_expose_what_a_whip_client_reads_and_vary_on_origin() -> None:
    policy = CorsPolicy((STUDIO,))
    assert policy.response_headers(STUDIO) == {
        "Vary": "Origin",
        "Access-Control-Allow-Origin": STUDIO,
        "Access-Control-Expose-Headers": "Location, Link, ETag, Accept-Patch",
    }
    assert policy.response_headers(EVIL) == {"Vary": "Origin"}  # no grant, and caches keep them apart
    assert "Access-Control-Allow-Credentials" not in CorsPolicy(("*",)).response_headers(EVIL)


def test_a_preflight_is_granted_only_for_an_allowed_origin_method_and_headers() -> None:
    policy = CorsPolicy((STUDIO,))
    granted = policy.preflight(STUDIO, "POST", "Authorization, Content-Type, If-Match", ("POST",))
    assert granted.allowed
    assert granted.headers["Access-Control-Allow-Origin"] == STUDIO
    assert granted.headers["Access-Control-Allow-Methods"] == "POST"
    assert granted.headers["Access-Control-Allow-Headers"] == ", ".join(ALLOWED_HEADERS)
    refusals = {
        "origin": policy.preflight(EVIL, "POST", "", ("POST",)),
        "no Origin": policy.preflight(None, "POST", "", ("POST",)),
        "method 'PUT'": policy.preflight(STUDIO, "PUT", "", ("POST",)),
        "request header 'x-forwarded-for'": policy.preflight(STUDIO, "POST", "x-forwarded-for", ("POST",)),
        "over 1024 bytes": policy.preflight(STUDIO, "POST", "a," * 600, ("POST",)),
    }
    for named, decision in refusals.items():
        assert not decision.allowed
        assert named in decision.reason
        assert "Access-Control-Allow-Origin" not in decision.headers


Client = TestClient[web.Request, web.Application]


@contextlib.asynccontextmanager
async def served(cors_origins: list[str], token: str | None = TOKEN) -> AsyncIterator[Client]:
    server = WebRtcServer(token=token, cors_origins=cors_origins)
    WhipSource(server, "cam")
    WhepSink(server, "cam")
    async with TestClient(TestServer(server.app, host="127.0.0.1", port=0)) as client:
        yield client


async def make_offer(direction: str) -> str:
    pc = RTCPeerConnection(rtc_configuration())
    pc.addTransceiver("video", direction=direction)
    with restrict_host_addresses(["127.0.0.1"]):
        await pc.setLocalDescription(await pc.createOffer())
    sdp: str = pc.localDescription.sdp
    await pc.close()
    return sdp


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(scenario)


def test_a_page_on_an_allowed_origin_publishes_reads_the_answer_and_leaves() -> None:
    async def scenario() -> None:
        async with served([STUDIO]) as client:
            granted = await client.options("/whip/cam", headers=preflight(STUDIO))
            assert granted.status == 200, await granted.text()
            assert granted.headers["Access-Control-Allow-Origin"] == STUDIO
            assert "POST" in granted.headers["Access-Control-Allow-Methods"]
            assert "Authorization" in granted.headers["Access-Control-Allow-Headers"]
            assert granted.headers["Accept-Post"] == "application/sdp"
            assert "Link" not in granted.headers  # a preflight carries no token: never the credentials
            assert "Access-Control-Allow-Credentials" not in granted.headers

            sdp = {"Content-Type": "application/sdp", "Authorization": f"Bearer {TOKEN}", "Origin": STUDIO}
            created = await client.post("/whip/cam", data=await make_offer("sendonly"), headers=sdp)
            assert created.status == 201, await created.text()
            assert created.headers["Access-Control-Allow-Origin"] == STUDIO
            exposed = created.headers["Access-Control-Expose-Headers"]
            assert {"Location", "Link"} <= {name.strip() for name in exposed.split(",")}
            location = created.headers["Location"]

            leaving = await client.options(location, headers=preflight(STUDIO, "DELETE", "authorization"))
            assert leaving.status == 200
            assert leaving.headers["Access-Control-Allow-Methods"] == "DELETE, PATCH"
            deleted = await client.delete(
                location, headers={"Authorization": f"Bearer {TOKEN}", "Origin": STUDIO}
            )
            assert deleted.status == 200
            assert deleted.headers["Access-Control-Allow-Origin"] == STUDIO

            refused = await client.post(
                "/whep/cam", data="v=0\r\n", headers={**sdp, "Authorization": "Bearer x"}
            )
            assert refused.status == 401
            assert refused.headers["Access-Control-Allow-Origin"] == STUDIO  # so the page can read why

    run(scenario())


def test_other_origins_get_no_grant_and_a_reason() -> None:
    async def scenario() -> None:
        async with served([STUDIO]) as client:
            for path in ("/whip/cam", "/whep/cam", "/whip/cam/some-session"):
                refused = await client.options(path, headers=preflight(EVIL))
                assert refused.status == 403
                assert "Access-Control-Allow-Origin" not in refused.headers
                assert "not allowed" in await refused.text()
            wrong_method = await client.options("/whip/cam", headers=preflight(STUDIO, "PUT"))
            assert wrong_method.status == 403
            assert "Access-Control-Allow-Origin" not in wrong_method.headers
            odd_header = await client.options("/whep/cam", headers=preflight(STUDIO, headers="x-api-key"))
            assert odd_header.status == 403
            assert "x-api-key" in await odd_header.text()

            sdp = {"Content-Type": "application/sdp", "Authorization": f"Bearer {TOKEN}", "Origin": EVIL}
            played = await client.post("/whep/cam", data=await make_offer("recvonly"), headers=sdp)
            assert played.status == 201  # the server answers; the browser keeps the answer from the page
            assert "Access-Control-Allow-Origin" not in played.headers
            assert played.headers["Vary"] == "Origin"

    run(scenario())


def test_without_cors_origins_the_server_stays_same_origin() -> None:
    async def scenario() -> None:
        async with served([]) as client:
            refused = await client.options("/whip/cam", headers=preflight(STUDIO))
            assert refused.status == 403
            assert "webrtc.cors_origins" in await refused.text()
            plain = await client.options("/whip/cam", headers={"Origin": STUDIO})
            assert plain.status == 200
            assert not any(name.startswith("Access-Control-") for name in plain.headers)

    run(scenario())


@pytest.mark.parametrize("origin", [EVIL, STUDIO])
def test_a_wildcard_grants_every_origin_without_echoing_it_or_credentials(origin: str) -> None:
    async def scenario() -> None:
        async with served(["*"]) as client:
            granted = await client.options("/whep/cam", headers=preflight(origin))
            assert granted.status == 200
            assert granted.headers["Access-Control-Allow-Origin"] == "*"
            assert "Access-Control-Allow-Credentials" not in granted.headers
            asked = await client.options("/whep/cam", headers={"Origin": origin})  # no token: no Link
            assert asked.headers["Access-Control-Allow-Origin"] == "*"
            assert "Link" not in asked.headers

    run(scenario())


def test_a_page_on_an_allowed_origin_may_ask_for_the_ice_servers_with_its_token() -> None:
    async def scenario() -> None:
        server = WebRtcServer(token=TOKEN, cors_origins=[STUDIO], ice_servers=(TURN,))
        async with TestClient(TestServer(server.app, host="127.0.0.1", port=0)) as client:
            granted = await client.options("/whip/cam", headers=preflight(STUDIO, "OPTIONS", "authorization"))
            assert granted.status == 200
            assert "Link" not in granted.headers
            asked = await client.options(
                "/whip/cam", headers={"Origin": STUDIO, "Authorization": f"Bearer {TOKEN}"}
            )
            assert asked.headers.getall("Link") == TURN.links()
            assert "Link" in asked.headers["Access-Control-Expose-Headers"]

    run(scenario())
