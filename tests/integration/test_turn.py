"""WHIP through a real TURN server: coturn on loopback, a relay-only aiortc publisher, frames that arrive.

The server is given the TURN server with its credentials and advertises it (RFC 9725 section 4.6): the
publisher asks for it with an OPTIONS before it gathers (this server takes no trickled candidates),
reads it from the ``Link`` headers, and gathers with aiortc's relay transport policy, so its only
candidate is the address coturn allocates it; every packet it sends goes through coturn. coturn's own
log shows the allocation, the user, and the packets it relayed. Nothing leaves 127.0.0.1: coturn listens
and relays there, and every peer is told of no other server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiortc import (
    RTCConfiguration,
    RTCIceServer,
    RTCIceTransportPolicy,
    RTCPeerConnection,
    RTCSessionDescription,
)

from streamer.frame import Frame
from streamer.media import framecode
from streamer.webrtc import WebRtcServer, WhipSource
from streamer.webrtc.ice import IceServer, restrict_host_addresses
from tests.integration.rtsp_fixtures import until
from tests.integration.test_webrtc import HEIGHT, WIDTH, CountingCamera
from tests.integration.test_whip_profiles import serving as whip_serving

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOKEN = "test-token"
USER, PASSWORD, REALM = "alice", "secret", "streamer.test"
RELAY_PORTS = (61000, 61099)
"""coturn's relay ports: above Linux's ephemeral range (32768-60999), so no client socket holds them."""
STUN_BINDING = b"\x00\x01\x00\x00\x21\x12\xa4\x42"
"""A STUN Binding request's header but its transaction id (RFC 8489 section 5): coturn's readiness probe."""


def udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Coturn:
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"turn:127.0.0.1:{self.port}?transport=udp"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def allocations(self) -> dict[str, str]:
        """The relay addresses coturn allocated (``127.0.0.1:61003``), each with its session's id.

        coturn writes ``Local relay addr: ADDR`` and then ``session ID: new, ...`` for each allocation."""
        found = re.findall(r"Local relay addr: (\S+)\n[^\n]*session (\d+): new,", self.log())
        return dict(found)

    def relayed(self, session: str) -> tuple[int, int] | None:
        """(packets, bytes) coturn sent from ``session``'s relay address to its peers, once the allocation
        is released (coturn writes its ``peer usage`` then); None before."""
        usage = re.search(rf"session {session}: peer usage: .*, sp=(\d+), sb=(\d+)", self.log())
        return None if usage is None else (int(usage[1]), int(usage[2]))


def answers_stun(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.5)
        sock.sendto(STUN_BINDING + bytes(12), ("127.0.0.1", port))
        try:
            reply, _ = sock.recvfrom(2048)
        except OSError:
            return False
    return reply[:2] == b"\x01\x01"  # a Binding success response


@pytest.fixture
def coturn(tmp_path: Path) -> Iterator[Coturn]:
    """coturn on a free loopback port, long-term credentials for alice, relaying on loopback only."""
    turnserver = shutil.which("turnserver")
    if turnserver is None:
        pytest.skip("coturn's turnserver is not installed (apt-get install coturn; .ci/run installs it)")
    port = udp_port()
    server = Coturn(port, tmp_path / "turnserver.log")
    command = [
        turnserver,
        "-n",  # no configuration file: only these options
        "--listening-ip=127.0.0.1",
        "--relay-ip=127.0.0.1",
        f"--listening-port={port}",
        f"--min-port={RELAY_PORTS[0]}",
        f"--max-port={RELAY_PORTS[1]}",
        "--lt-cred-mech",
        f"--user={USER}:{PASSWORD}",
        f"--realm={REALM}",
        "--allow-loopback-peers",  # the peers (this test's server and client) are on 127.0.0.1
        "--no-tcp",
        "--no-tls",
        "--no-dtls",
        "--no-cli",
        "--no-rfc5780",
        "--no-software-attribute",
        f"--userdb={tmp_path / 'turndb'}",
        f"--pidfile={tmp_path / 'turnserver.pid'}",
        "--log-file=stdout",
        "--verbose",  # one line per allocation, with its user and relay address
    ]
    with server.log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not answers_stun(port):
            if process.poll() is not None:
                pytest.fail(f"turnserver exited with {process.returncode}:\n{server.log()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"turnserver did not answer on 127.0.0.1:{port} within 30 s:\n{server.log()[-3000:]}"
                )
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_LINK = re.compile(r'<([^>]*)>((?:\s*;\s*[^;,=\s]+\s*=\s*(?:"[^"]*"|[^;,\s]*))*)')
_PARAM = re.compile(r';\s*([^;,=\s]+)\s*=\s*(?:"([^"]*)"|([^;,\s]*))')


def ice_servers_of(links: list[str]) -> list[RTCIceServer]:
    """The ``rel="ice-server"`` links of ``Link`` header values (RFC 8288, RFC 9725 section 4.6) as aiortc
    servers: one per URL, with its username and credential where it has them."""
    servers = []
    for match in _LINK.finditer(", ".join(links)):
        params = {m[1].lower(): m[2] if m[2] is not None else m[3] for m in _PARAM.finditer(match[2])}
        if "ice-server" in params.get("rel", "").split():
            servers.append(RTCIceServer(match[1], params.get("username"), params.get("credential")))
    return servers


def candidates(sdp: str) -> list[str]:
    """The candidate types (host, srflx, relay) an SDP lists, in order."""
    return re.findall(r"^a=candidate:.* typ (\w+)", sdp, flags=re.MULTILINE)


def serving(
    turn: IceServer,
) -> contextlib.AbstractAsyncContextManager[tuple[WebRtcServer, WhipSource, aiohttp.ClientSession]]:
    """The WHIP profiles test's server, given ``turn`` and advertising it."""
    return whip_serving(ice_servers=(turn,), advertise_ice_servers=True, connect_timeout_s=60.0)


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def advertised(http: aiohttp.ClientSession, server: WebRtcServer) -> list[str]:
    """What an authorised client asks before it gathers: the ``Link`` headers of an OPTIONS."""
    async with http.options(f"{server.url}/whip/cam", headers=AUTH) as response:
        assert response.status == 200, await response.text()
        return response.headers.getall("Link", [])


async def publish(
    http: aiohttp.ClientSession, server: WebRtcServer, pc: RTCPeerConnection, loopback: bool = False
) -> tuple[str, str, list[str], str]:
    """Send a camera from ``pc`` (host candidates on 127.0.0.1 only with ``loopback``); returns the offer,
    the server's answer, the answer's ``Link`` headers and the session's URL path."""
    pc.addTransceiver(CountingCamera(), direction="sendonly")
    with restrict_host_addresses(["127.0.0.1"] if loopback else None):
        await pc.setLocalDescription(await pc.createOffer())
    offer: str = pc.localDescription.sdp
    headers = {**AUTH, "Content-Type": "application/sdp"}
    async with http.post(f"{server.url}/whip/cam", data=offer, headers=headers) as response:
        answer = await response.text()
        assert response.status == 201, answer
        links = response.headers.getall("Link", [])
        location = response.headers["Location"]
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    return offer, answer, links, location


def relay_only(servers: list[RTCIceServer]) -> RTCPeerConnection:
    """A publisher that gathers only relayed candidates, as a browser with iceTransportPolicy 'relay'."""
    return RTCPeerConnection(
        RTCConfiguration(iceServers=servers, iceTransportPolicy=RTCIceTransportPolicy.RELAY)
    )


async def frames_of(source: WhipSource, count: int) -> list[Frame]:
    await asyncio.wait_for(source.open(), 60)
    return [await asyncio.wait_for(source.recv(), 30) for _ in range(count)]


def check_frames(frames: list[Frame]) -> None:
    """Frames of the camera's size, each with its number readable, in the order they were sent."""
    assert {f.pixels.shape for f in frames} == {(HEIGHT, WIDTH, 3)}
    codes = [framecode.read(f.pixels) for f in frames]
    read = [code for code in codes if code is not None]
    assert read == codes
    assert read == sorted(read)


def test_a_relay_only_publisher_reaches_the_server_through_coturn(coturn: Coturn) -> None:
    """The advertised TURN server gives the publisher a relay address; its video arrives through it."""

    async def scenario() -> tuple[list[str], str, str, list[str], list[Frame], str]:
        async with serving(IceServer((coturn.url,), USER, PASSWORD)) as (server, source, http):
            links = await advertised(http, server)
            pc = relay_only(ice_servers_of(links))
            try:
                offer, answer, answer_links, _ = await publish(http, server, pc)
                frames = await frames_of(source, 10)
                await until(lambda: pc.connectionState == "connected", 30, "the publisher to connect")
            finally:
                await pc.close()  # releases the allocation: coturn then logs what it relayed
            relay = re.search(r"^a=candidate:.* (\S+) (\d+) typ relay", offer, flags=re.MULTILINE)
            assert relay is not None, offer
            session = coturn.allocations().get(f"{relay[1]}:{relay[2]}")
            assert session is not None, f"coturn allocated no {relay[1]}:{relay[2]}:\n{coturn.log()[-3000:]}"
            await until(lambda: coturn.relayed(session) is not None, 30, "coturn to log the relayed usage")
            return links, offer, answer, answer_links, frames, session

    links, offer, answer, answer_links, frames, session = asyncio.run(scenario())

    # The server advertised its TURN server with the credentials, before the offer and on the answer.
    servers = ice_servers_of(links)
    assert [(s.urls, s.username, s.credential) for s in servers] == [(coturn.url, USER, PASSWORD)]
    assert answer_links == links
    # The publisher's only candidate was the address coturn allocated to alice.
    assert candidates(offer) == ["relay"]
    log = coturn.log()
    assert f"session {session}: new, realm=<{REALM}>, username=<{USER}>" in log
    assert (
        f"session {session}: realm <{REALM}> user <{USER}>: incoming packet ALLOCATE processed, success"
        in log
    )
    assert "relay" in candidates(answer)  # the server's own peer allocated through coturn too
    # Its video came through the relay: every RTP packet the server got passed coturn.
    check_frames(frames)
    relayed = coturn.relayed(session)
    assert relayed is not None
    packets, sent = relayed
    assert packets >= len(frames)  # each frame is at least one RTP packet
    assert sent > 0


def test_a_wrong_turn_password_allocates_nothing_and_a_relay_only_publisher_cannot_connect(
    coturn: Coturn, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator's wrong credential: coturn refuses it (401) and allocates nothing, so a publisher that
    may only use the relay offers no candidate and never connects; one on the LAN still gets through."""
    caplog.set_level(logging.INFO, logger="streamer.webrtc.server")

    async def scenario() -> tuple[list[str], str, str, str, str, list[Frame]]:
        async with serving(IceServer((coturn.url,), USER, "not-the-password")) as (server, source, http):
            links = await advertised(http, server)
            pc = relay_only(ice_servers_of(links))
            lan = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # host candidates on 127.0.0.1
            try:
                offer, _, _, location = await publish(http, server, pc)  # 201: the offer itself is valid
                # The next publisher takes the stream from a session that has not connected.
                _, lan_answer, _, _ = await publish(http, server, lan, loopback=True)
                frames = await frames_of(source, 10)
                state = pc.connectionState
            finally:
                await pc.close()
                await lan.close()
            return links, offer, location, state, lan_answer, frames

    links, offer, location, state, lan_answer, frames = asyncio.run(scenario())

    assert [(s.username, s.credential) for s in ice_servers_of(links)] == [(USER, "not-the-password")]
    assert candidates(offer) == []  # no relay address, and no other kind under the relay policy
    assert state == "new"  # aiortc starts no ICE without a candidate of its own
    session = location.rsplit("/", 1)[1]
    assert any(f"session {session} on cam replaced before it connected" in r.message for r in caplog.records)
    log = coturn.log()
    assert f"check_stun_auth: user {USER} credentials are incorrect" in log
    assert f"user <{USER}>: incoming packet message processed, error 401: Unauthorized" in log
    assert "ALLOCATE processed, success" not in log
    assert coturn.allocations() == {}
    assert candidates(lan_answer) == ["host"]  # the server's own allocation was refused too
    check_frames(frames)


def test_an_unreachable_turn_server_leaves_lan_publishers_connecting_on_host_candidates() -> None:
    """A TURN server that never answers (a firewall dropping its packets): the server asks it for a relay
    address, gives up when aiortc's gathering does, and answers with its host candidates, over which a
    publisher on the LAN sends its video as usual."""

    async def scenario() -> tuple[str, list[Frame], list[bytes]]:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
            silent.bind(("127.0.0.1", 0))
            silent.setblocking(False)
            turn = IceServer((f"turn:127.0.0.1:{silent.getsockname()[1]}?transport=udp",), USER, PASSWORD)
            async with serving(turn) as (server, source, http):
                lan = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # host candidates on 127.0.0.1
                try:
                    _, answer, _, _ = await publish(http, server, lan, loopback=True)
                    frames = await frames_of(source, 10)
                finally:
                    await lan.close()
            asked = []
            with contextlib.suppress(BlockingIOError):
                while True:
                    asked.append(silent.recv(2048))
        return answer, frames, asked

    answer, frames, asked = asyncio.run(scenario())

    assert any(packet[:2] == b"\x00\x03" for packet in asked)  # the server sent it an Allocate request
    assert candidates(answer) == ["host"]
    check_frames(frames)
