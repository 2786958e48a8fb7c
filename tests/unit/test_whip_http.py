"""The WHIP/WHEP HTTP surface through aiohttp's test client on loopback, and the pieces it is built from.

Offers are real aiortc offers; no media flows, so these stay fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Coroutine
from fractions import Fraction
from typing import Any

import aioice.ice
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiortc import RTCPeerConnection

from streamer.errors import ConfigError, SourceError
from streamer.frame import Frame
from streamer.webrtc import ORIGINAL_SUFFIX, FrameHub, WebRtcServer, WhepSink, WhipSource
from streamer.webrtc import server as server_module
from streamer.webrtc.ice import default_ice_addresses, is_loopback, restrict_host_addresses, rtc_configuration
from streamer.webrtc.sink import RTP_CLOCK_RATE, RtpClock

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SDP = {"Content-Type": "application/sdp", **AUTH}


async def make_offer(direction: str = "sendonly", kind: str = "video") -> str:
    pc = RTCPeerConnection(rtc_configuration())
    pc.addTransceiver(kind, direction=direction)
    with restrict_host_addresses(["127.0.0.1"]):
        await pc.setLocalDescription(await pc.createOffer())
    sdp: str = pc.localDescription.sdp
    await pc.close()
    return sdp


Client = TestClient[web.Request, web.Application]


@contextlib.asynccontextmanager
async def served(
    token: str | None = TOKEN, max_body_bytes: int = 64 * 1024
) -> AsyncIterator[tuple[WebRtcServer, Client]]:
    """A server with stream 'cam' ingested and played (plus 'cam.original'), behind aiohttp's test client."""
    server = WebRtcServer(token=token, max_body_bytes=max_body_bytes)
    WhipSource(server, "cam")
    WhepSink(server, "cam")
    async with TestClient(TestServer(server.app, host="127.0.0.1", port=0)) as client:
        yield server, client


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(scenario)


def test_publish_and_play_need_the_bearer_token() -> None:
    async def scenario() -> None:
        async with served() as (_, client):
            offer = await make_offer()
            missing = await client.post("/whip/cam", data=offer, headers={"Content-Type": "application/sdp"})
            assert missing.status == 401
            assert missing.headers["WWW-Authenticate"] == 'Bearer realm="streamer"'
            wrong = await client.post(
                "/whip/cam",
                data=offer,
                headers={"Content-Type": "application/sdp", "Authorization": "Bearer x"},
            )
            assert wrong.status == 401
            assert "invalid_token" in wrong.headers["WWW-Authenticate"]
            assert "Authorization: Bearer" in await wrong.text()
            played = await client.post("/whep/cam", data=await make_offer("recvonly"), headers={})
            assert played.status == 401

            ok = await client.post("/whip/cam", data=offer, headers=SDP)
            assert ok.status == 201, await ok.text()
            assert ok.content_type == "application/sdp"
            assert ok.headers["Location"].startswith("/whip/cam/")
            answer = await ok.text()
            assert answer.startswith("v=0")
            assert "a=recvonly" in answer
            candidates = [line for line in answer.splitlines() if line.startswith("a=candidate")]
            assert candidates
            assert all(" 127.0.0.1 " in line for line in candidates)

    run(scenario())


def test_players_get_an_answer_that_sends_video_and_many_may_play() -> None:
    async def scenario() -> None:
        async with served() as (_, client):
            locations = set()
            for name in ("cam", "cam", "cam" + ORIGINAL_SUFFIX):
                response = await client.post(f"/whep/{name}", data=await make_offer("recvonly"), headers=SDP)
                assert response.status == 201, await response.text()
                assert "a=sendonly" in await response.text()
                locations.add(response.headers["Location"])
            assert len(locations) == 3

    run(scenario())


def test_no_token_configured_on_loopback_lets_anyone_in() -> None:
    async def scenario() -> None:
        async with served(token=None) as (_, client):
            response = await client.post(
                "/whip/cam", data=await make_offer(), headers={"Content-Type": "application/sdp"}
            )
            assert response.status == 201

    run(scenario())


def test_an_offer_that_never_connected_holds_no_publisher_slot() -> None:
    async def scenario() -> None:
        async with served() as (server, client):
            first = await client.post("/whip/cam", data=await make_offer(), headers=SDP)
            assert first.status == 201
            second = await client.post("/whip/cam", data=await make_offer(), headers=SDP)
            assert second.status == 201  # the first never connected: the newer publisher takes over
            assert (await client.delete(first.headers["Location"], headers=AUTH)).status == 404
            assert len(server._sessions) == 1
            assert (await client.delete(second.headers["Location"], headers=AUTH)).status == 200

    run(scenario())


def test_sessions_past_the_caps_get_503_and_free_their_place_when_they_end() -> None:
    async def scenario() -> None:
        server = WebRtcServer(token=TOKEN, max_sessions=3, max_players=2)
        WhipSource(server, "cam")
        WhepSink(server, "cam")
        WhepSink(server, "lobby")
        async with TestClient(TestServer(server.app, host="127.0.0.1", port=0)) as client:
            offers = [await make_offer("recvonly") for _ in range(2)]
            players = [await client.post("/whep/cam", data=offer, headers=SDP) for offer in offers]
            assert [p.status for p in players] == [201, 201]
            third = await client.post("/whep/cam", data=await make_offer("recvonly"), headers=SDP)
            assert third.status == 503
            assert third.headers["Retry-After"] == "5"
            assert "webrtc.max_players" in await third.text()
            original = await client.post(
                f"/whep/cam{ORIGINAL_SUFFIX}", data=await make_offer("recvonly"), headers=SDP
            )
            assert original.status == 503  # one cap for the stream and its original
            assert "its original's counted" in await original.text()
            other = await client.post("/whep/lobby", data=await make_offer("recvonly"), headers=SDP)
            assert other.status == 201  # another stream's players are counted apart
            full = await client.post("/whip/cam", data=await make_offer(), headers=SDP)
            assert full.status == 503
            assert "webrtc.max_sessions" in await full.text()
            assert (await client.delete(players[0].headers["Location"], headers=AUTH)).status == 200
            assert (await client.post("/whip/cam", data=await make_offer(), headers=SDP)).status == 201

    run(scenario())


def test_players_that_leave_give_their_memory_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    released: list[int] = []
    monkeypatch.setattr(server_module, "release_memory", lambda: released.append(1))
    monkeypatch.setattr(server_module, "_RELEASE_AFTER_S", 0.0)

    async def scenario() -> None:
        async with served() as (server, client):
            offers = [await make_offer("recvonly") for _ in range(3)]
            played = [await client.post("/whep/cam", data=offer, headers=SDP) for offer in offers]
            assert released == []
            for response in played:
                assert (await client.delete(response.headers["Location"], headers=AUTH)).status == 200
            releasing = server._releasing
            assert releasing is not None
            await releasing
            assert 1 <= len(released) <= 3  # one per burst, one more for any that ended during it

    run(scenario())


def test_delete_ends_a_session_once_and_unknown_ones_are_404() -> None:
    async def scenario() -> None:
        async with served() as (_, client):
            played = await client.post("/whep/cam", data=await make_offer("recvonly"), headers=SDP)
            location = played.headers["Location"]
            session = location.rsplit("/", 1)[1]
            assert (await client.delete(f"/whip/cam/{session}", headers=AUTH)).status == 404  # wrong kind
            assert (await client.delete(f"/whep/other/{session}", headers=AUTH)).status == 404  # wrong stream
            assert (await client.delete(location)).status == 401
            assert (await client.delete(location, headers=AUTH)).status == 200
            gone = await client.delete(location, headers=AUTH)
            assert gone.status == 404
            assert session in await gone.text()

    run(scenario())


def test_wrong_content_type_size_stream_and_method_are_refused_with_a_reason() -> None:
    async def scenario() -> None:
        async with served(max_body_bytes=4096) as (_, client):
            offer = await make_offer()
            text_plain = {"Content-Type": "text/plain", **AUTH}
            cases = {
                415: await client.post("/whip/cam", data=offer, headers=text_plain),
                413: await client.post("/whip/cam", data="v=0\r\n" + "a=x\r\n" * 2000, headers=SDP),
                404: await client.post("/whip/nope", data=offer, headers=SDP),
                405: await client.get("/whip/cam", headers=AUTH),
            }
            for status, response in cases.items():
                assert response.status == status
                reason = await response.text()
                assert reason.strip()
                assert "\n" not in reason.strip()
            assert "application/sdp" in await cases[415].text()
            assert "4096" in await cases[413].text()
            assert "cam" in await cases[404].text()  # names the streams there are

            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(100):
                    yield b"a=padding-padding-padding-padding-padding-padding\r\n"

            chunked = await client.post("/whip/cam", data=chunks(), headers=SDP)
            assert chunked.status == 413
            patched = await client.patch("/whip/cam/whatever", data="", headers=AUTH)
            assert patched.status == 404
            published = await client.post("/whip/cam", data=offer, headers=SDP)
            trickle = await client.patch(published.headers["Location"], data="", headers=AUTH)
            assert trickle.status == 405
            assert trickle.headers["Allow"] == "DELETE"

    run(scenario())


def test_garbage_offers_are_400_and_never_crash_the_server() -> None:
    async def scenario() -> None:
        async with served() as (_, client):
            offer = await make_offer()
            garbage = [
                os.urandom(2000),
                b"\xff\xfe" + offer.encode("utf-16-le"),
                b"",
                b"hello",
                b"v=0\r\n",
                offer[: len(offer) // 2].encode(),
                offer.replace("m=video", "m=vidéo").encode(),
                (await make_offer(kind="audio")).encode(),
                offer.replace("a=sendonly", "a=recvonly").encode(),
                offer.replace("a=fingerprint", "a=fingerprint-x").encode(),
                offer.replace("a=ice-ufrag", "a=x").encode(),
                "\r\n".join(line for line in offer.splitlines() if not line.startswith("a=rtpmap")).encode(),
            ]
            for body in garbage:
                response = await client.post("/whip/cam", data=body, headers=SDP)
                reason = await response.text()
                assert response.status == 400, (body[:60], response.status, reason)
                assert reason.strip()
                assert "\n" not in reason.strip()
            wrong_way = await client.post("/whep/cam", data=offer, headers=SDP)  # a publisher's offer
            assert wrong_way.status == 400
            assert "receive video" in await wrong_way.text()
            # Nothing was left holding the stream: a good offer still gets in.
            assert (await client.post("/whip/cam", data=offer, headers=SDP)).status == 201

    run(scenario())


def test_viewer_page_is_served_and_self_contained() -> None:
    async def scenario() -> None:
        async with served() as (_, client):
            for path in ("/", "/view/cam"):
                response = await client.get(path)
                assert response.status == 200
                assert response.content_type == "text/html"
                page = await response.text()
                assert "/whip/" in page
                assert "/whep/" in page
                assert "requestVideoFrameCallback" in page
                assert "http://" not in page
                assert "https://" not in page
                assert "src=" not in page
                assert "default-src 'none'" in response.headers["Content-Security-Policy"]

    run(scenario())


def test_a_server_other_machines_can_reach_needs_a_token() -> None:
    for host in ("0.0.0.0", "192.0.2.7", "::", "example.org"):
        with pytest.raises(ConfigError, match=r"no token is set.*webrtc\.token"):
            WebRtcServer(host=host)
    WebRtcServer(host="0.0.0.0", token=TOKEN)
    WebRtcServer(host="localhost")
    WebRtcServer(host="127.0.0.2")


def test_start_on_a_taken_port_names_it_and_url_shows_the_bound_port() -> None:
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(ConfigError, match=f"127.0.0.1:{port}"):
                await WebRtcServer(port=port).start()
        server = WebRtcServer(port=0)
        await server.start()
        try:
            assert server.url.startswith("http://127.0.0.1:")
            assert not server.url.endswith(":0")
        finally:
            await server.stop()
            await server.stop()

    run(scenario())


def test_stream_ids_are_checked_and_each_is_declared_once() -> None:
    server = WebRtcServer()
    WhipSource(server, "cam", relay_original=False)
    with pytest.raises(ConfigError, match="already exists"):
        WhipSource(server, "cam")
    WhepSink(server, "cam")
    with pytest.raises(ConfigError, match="already exists"):
        WhepSink(server, "cam")
    for bad in ("", "a/b", "../x", "sp ace"):
        with pytest.raises(ConfigError, match="not usable in a URL"):
            WhepSink(server, bad)


def test_open_without_a_publisher_times_out_with_a_source_error() -> None:
    async def scenario() -> None:
        source = WhipSource(WebRtcServer(), "cam", open_timeout_s=0.05)
        with pytest.raises(SourceError, match=r"no publisher .*'cam'.*/whip/cam"):
            await source.open()
        await source.aclose()
        await source.aclose()

    run(scenario())


def test_ice_addresses_follow_the_bind_host_and_restriction_is_scoped() -> None:
    assert default_ice_addresses("127.0.0.1") == ["127.0.0.1"]
    assert default_ice_addresses("localhost") == ["127.0.0.1"]
    assert default_ice_addresses("192.0.2.7") == ["192.0.2.7"]
    assert default_ice_addresses("0.0.0.0") is None
    with pytest.raises(ConfigError, match="ice_addresses"):
        default_ice_addresses("camera.local")
    with pytest.raises(ConfigError, match="not an IP address"):
        WebRtcServer(ice_addresses=["eth0"])
    with pytest.raises(ConfigError, match="empty"):
        WebRtcServer(ice_addresses=[])
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("10.0.0.1")
    with restrict_host_addresses(["127.0.0.1", "::1"]):
        assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=True) == ["127.0.0.1", "::1"]
        assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False) == ["127.0.0.1"]
    assert "127.0.0.1" not in aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=True)
    assert rtc_configuration().iceServers == []


def frame(index: int, value: int = 0, pts: int | None = None) -> Frame:
    pixels = np.full((16, 16, 3), value, dtype=np.uint8)
    return Frame(pixels, index, index * 3000 if pts is None else pts, Fraction(1, 90000), 0.0, "cam")


def test_a_player_holds_only_the_newest_frame_and_counts_what_it_skipped() -> None:
    async def scenario() -> None:
        hub = FrameHub("cam")
        early = hub.subscribe()
        for i in range(5):
            hub.publish(frame(i, value=10 * i))
        late = hub.subscribe()
        hub.publish(frame(5, value=50))
        video = await early.recv()
        assert video.to_ndarray(format="rgb24").mean() == pytest.approx(50, abs=1)
        assert video.time_base == Fraction(1, RTP_CLOCK_RATE)
        assert early.stats().dropped == 5
        assert early.stats().depth == 0
        assert late.stats().dropped == 0
        assert late.stats().put == 1
        early.stop()
        assert hub.players == 1
        hub.close()
        assert hub.players == 0
        assert hub.published == 6

    run(scenario())


def test_rtp_clock_follows_media_time_and_never_goes_back() -> None:
    clock = RtpClock(max_step_s=1.0, nominal_fps=30.0)
    assert [clock.stamp(t) for t in (10.0, 10.1, 10.2)] == [0, 9000, 18000]
    assert clock.stamp(0.5) == 21000  # a new publisher's clock restarts: one nominal frame on
    assert clock.stamp(0.6) == 30000
    assert clock.stamp(60.0) == 33000  # a jump forward of a minute is not waited for
    assert clock.stamp(60.0) == 36000  # a repeated time still moves on


def test_the_viewers_figures_need_the_token_and_name_only_streams_that_have_them() -> None:
    """GET /view/{stream}/figures: 401 without the token, 404 (one line, the names there are) for a
    stream with no figures or a hostile name, the figures' JSON otherwise, not cached."""

    async def scenario() -> None:
        async with served() as (server, client):
            server.declare_figures("cam", lambda: {"stream": "cam", "fps_out": 29.9})
            auth = {"Authorization": f"Bearer {TOKEN}"}
            assert (await client.get("/view/cam/figures")).status == 401
            wrong = await client.get("/view/cam/figures", headers={"Authorization": "Bearer nope"})
            assert wrong.status == 401
            ok = await client.get("/view/cam/figures", headers=auth)
            assert ok.status == 200
            assert ok.headers["Cache-Control"] == "no-store"
            assert await ok.json() == {"stream": "cam", "fps_out": 29.9}
            for name in ("other", "cam.original", "..%2F..%2Fetc", "x" * 300, "%00"):
                missing = await client.get(f"/view/{name}/figures", headers=auth)
                assert missing.status == 404
                text = await missing.text()
                assert text.count("\n") == 1
                assert "this server has: cam" in text
            await server.release_playback("cam")
            assert (await client.get("/view/cam/figures", headers=auth)).status == 404

    run(scenario())
