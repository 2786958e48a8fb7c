"""STUN/TURN servers: the URLs and credentials accepted, the Link headers that advertise them (RFC 9725
section 4.6), the config that declares them, and that the credential shows nowhere it should not."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from streamer.app import build_ice_server
from streamer.config import load_config
from streamer.errors import ConfigError
from streamer.webrtc import WebRtcServer, WhipSource
from streamer.webrtc.ice import IceServer, check_ice_url, rtc_configuration

SECRET = "Tr0ub4dor&3"
TURN = IceServer(("turn:turn.example.net:3478?transport=udp", "turns:turn.example.net:5349"), "alice", SECRET)
STUN = IceServer(("stun:stun.example.net",))


def test_links_are_written_as_rfc_9725_writes_them() -> None:
    assert STUN.links() == ['<stun:stun.example.net>; rel="ice-server"']
    assert TURN.links() == [
        '<turn:turn.example.net:3478?transport=udp>; rel="ice-server"; username="alice"; '
        f'credential="{SECRET}"; credential-type="password"',
        '<turns:turn.example.net:5349>; rel="ice-server"; username="alice"; '
        f'credential="{SECRET}"; credential-type="password"',
    ]
    mixed = IceServer(("stun:t.example.net", "turn:t.example.net"), "alice", SECRET)
    assert mixed.links()[0] == '<stun:t.example.net>; rel="ice-server"'  # STUN takes no credential
    assert "credential=" in mixed.links()[1]


def test_aiortc_gets_every_server_and_the_credential_stays_out_of_repr() -> None:
    config = rtc_configuration(["stun:127.0.0.1:3478"], [TURN])
    assert config.iceServers is not None
    first, second = config.iceServers
    assert first.urls == "stun:127.0.0.1:3478"
    assert (second.urls, second.username, second.credential) == (list(TURN.urls), "alice", SECRET)
    assert rtc_configuration().iceServers == []  # not aiortc's default Google server
    assert SECRET not in repr(TURN)
    assert SECRET not in str(TURN)


@pytest.mark.parametrize(
    "url",
    [
        "stun:stun.example.net",
        "stun:192.0.2.7:3478",
        "stuns:stun.example.net:5349",
        "turn:turn.example.net?transport=tcp",
        "turn:turn.example.net:3478?transport=udp",
        "turns:turn.example.net:443?transport=tcp",
    ],
)
def test_stun_and_turn_urls_browsers_and_aiortc_take_are_accepted(url: str) -> None:
    assert check_ice_url(url) == url


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://turn.example.net", "not a stun:, stuns:, turn: or turns: URL"),
        ("turn://turn.example.net", "not a stun:"),
        ("turn:[2001:db8::1]:3478", "IPv4"),  # aiortc's parser takes no IPv6 literal
        ("turn:turn.example.net:0", "port 0 is out of range"),
        ("turn:turn.example.net:70000", "port 70000 is out of range"),
        ("turn:turn.example.net?transport=sctp", "transport=udp|tcp"),
        ("stun:stun.example.net?transport=udp", "STUN URL takes no ?transport"),
        ("turns:turn.example.net?transport=udp", "TURN over TLS runs on TCP"),
        ("turn:-bad-.example.net", "neither a hostname nor an IPv4 address"),
        ("turn:300.1.2.3", "neither a hostname nor an IPv4 address"),
        ("turn:" + "a" * 600, "not a stun:"),
    ],
)
def test_bad_urls_are_refused_naming_the_url_and_the_fix(url: str, named: str) -> None:
    with pytest.raises(ConfigError, match="ICE server URL") as raised:
        check_ice_url(url)
    assert named in str(raised.value)
    assert "e.g." in str(raised.value) or "use" in str(raised.value) or "drop" in str(raised.value)


def test_a_url_with_user_info_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError, match="user info") as raised:
        check_ice_url(f"turn:alice:{SECRET}@turn.example.net")
    assert SECRET not in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        check_ice_url(f"turn:turn.example.net?transport=udp&password={SECRET}")
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize(
    ("urls", "username", "credential", "named"),
    [
        (("turn:t.example.net",), None, None, "needs a username and a credential"),
        (("turn:t.example.net",), "alice", None, "needs a username and a credential"),
        (("turn:t.example.net",), None, SECRET, "needs a username and a credential"),
        (("stun:t.example.net",), "alice", SECRET, "takes no username or credential"),
        ((), None, None, "lists 0 URLs"),
        (("stun:t.example.net",) * 9, None, None, "lists 9 URLs"),
    ],
)
def test_servers_without_the_credentials_they_need_are_refused(
    urls: tuple[str, ...], username: str | None, credential: str | None, named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        IceServer(urls, username, credential)


@pytest.mark.parametrize(
    "credential", ['pa"ss', "pa,ss", "pa;ss", "pa ss", "pa\\ss", "pässword", "", "x" * 513]
)
def test_credentials_a_link_header_cannot_carry_are_refused_without_showing_them(credential: str) -> None:
    with pytest.raises(ConfigError, match="TURN credential") as raised:
        IceServer(("turn:t.example.net",), "alice", credential)
    if credential:
        assert credential not in str(raised.value)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_config_declares_turn_servers_and_hides_the_credential(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "webrtc:\n"
            "  stun_servers: ['stun:stun.example.net:3478']\n"
            "  ice_servers:\n"
            "    - urls: ['turn:turn.example.net:3478?transport=udp',\n"
            "             'turn:turn.example.net:3478?transport=tcp']\n"
            "      username: alice\n"
            f"      credential: '{SECRET}'\n"
            "  cors_origins: ['HTTPS://Studio.Example.net:443', 'http://localhost:3000']\n",
        )
    )
    w = config.webrtc
    assert build_ice_server(w.ice_servers[0]) == IceServer(
        ("turn:turn.example.net:3478?transport=udp", "turn:turn.example.net:3478?transport=tcp"),
        "alice",
        SECRET,
    )
    assert w.advertise_ice_servers is None  # advertised because a TURN server is configured
    assert w.cors_origins == ["https://studio.example.net", "http://localhost:3000"]  # as browsers send them
    assert SECRET not in repr(config)
    assert SECRET not in config.model_dump_json()


@pytest.mark.parametrize(
    ("yaml", "named"),
    [
        ("ice_servers: [{urls: ['turn:t.example.net']}]", "needs a username and a credential"),
        (
            "ice_servers: [{urls: ['turn:t.example.net'], username: a, credential: 123456}]",
            "must be a string",
        ),
        ("ice_servers: [{urls: ['turn:t.example.net'], username: a, credential: 'x\"y'}]", "TURN credential"),
        (
            "ice_servers: [{urls: ['turn:t.example.net'], username: a, credential: x, secret: y}]",
            "unknown key",
        ),
        ("ice_servers: [{urls: []}]", "urls"),
        ("ice_servers: [{urls: ['ftp://t.example.net']}]", "ICE server URL"),
        ("stun_servers: ['turn:t.example.net']", "list it under ice_servers"),
        ("stun_servers: ['stun:t.example.net:99999']", "out of range"),
        ("cors_origins: ['https://studio.example.net/']", "write 'https://studio.example.net'"),
        ("cors_origins: ['*', 'https://studio.example.net']", "stands alone"),
        ("cors_origins: ['null']", "not an http or https origin"),
        ("advertise_ice_servers: maybe", "advertise_ice_servers"),
    ],
)
def test_bad_webrtc_settings_fail_in_one_line_naming_the_setting(
    tmp_path: Path, yaml: str, named: str
) -> None:
    with pytest.raises(ConfigError, match="webrtc") as raised:
        load_config(write(tmp_path, f"webrtc:\n  {yaml}\n"))
    message = str(raised.value)
    assert named in message
    assert "\n" not in message
    assert "123456" not in message  # a credential, even a mistyped one, is never shown


def test_server_refuses_what_would_expose_it_or_advertise_nothing() -> None:
    with pytest.raises(ConfigError, match="no token"):
        WebRtcServer(cors_origins=["*"])
    with pytest.raises(ConfigError, match="no STUN or TURN server to advertise"):
        WebRtcServer(advertise_ice_servers=True)
    with pytest.raises(ConfigError, match="needs a username"):
        WebRtcServer(stun_servers=("turn:t.example.net",))  # a TURN URL among the STUN ones


def test_options_advertises_the_servers_only_to_authorised_clients(caplog: pytest.LogCaptureFixture) -> None:
    """OPTIONS gathers nothing, so no STUN or TURN server needs to answer here; the 201's Link headers
    are checked against a real TURN server in tests/integration/test_turn.py."""

    async def scenario() -> None:
        server = WebRtcServer(
            port=0, token="t0ken", stun_servers=("stun:stun.example.net",), ice_servers=(TURN,)
        )
        WhipSource(server, "cam")
        await server.start()
        try:
            async with aiohttp.ClientSession(server.url) as client:
                bearer = {"Authorization": "Bearer t0ken"}
                async with client.options("/whip/cam", headers=bearer) as authorised:
                    assert authorised.status == 200
                    assert authorised.headers["Accept-Post"] == "application/sdp"
                    assert authorised.headers.getall("Link") == [*STUN.links(), *TURN.links()]
                async with client.options("/whep/cam") as anonymous:
                    assert anonymous.status == 200
                    assert "Link" not in anonymous.headers
                async with client.options("/whip/cam", headers={"Authorization": "Bearer nope"}) as wrong:
                    assert wrong.status == 401
                    assert "Link" not in wrong.headers
        finally:
            await server.stop()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(scenario())
    assert "turn:turn.example.net:3478?transport=udp" in caplog.text  # the start line names the servers
    assert "advertised in Link headers" in caplog.text
    assert SECRET not in caplog.text


def test_stun_alone_is_not_advertised_unless_asked() -> None:
    async def scenario(advertise: bool | None) -> list[str]:
        server = WebRtcServer(stun_servers=("stun:stun.example.net",), advertise_ice_servers=advertise)
        async with TestClient(TestServer(server.app, host="127.0.0.1", port=0)) as client:
            response = await client.options("/whip/cam")
            assert response.status == 200
            return response.headers.getall("Link", [])

    assert asyncio.run(scenario(None)) == []
    assert asyncio.run(scenario(True)) == ['<stun:stun.example.net>; rel="ice-server"']
