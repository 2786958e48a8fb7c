"""The servers a process runs: the WebRTC (WHIP/WHEP) server, the operations endpoint, and the STUN
and TURN servers the WebRTC peers use."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Self

from pydantic import Field, SecretStr, field_validator, model_validator

from streamer.config.base import Strict
from streamer.config.net import check_ice_server, check_ice_url, check_origins, is_loopback
from streamer.media.codecs import COMPRESSED_CODECS

__all__ = ["PLACEHOLDER_TOKEN", "HttpConfig", "IceServerConfig", "ServerLimits", "WebRtcConfig"]


class IceServerConfig(Strict):
    """A STUN or TURN server as browsers' ``RTCIceServer`` has it: ``urls``, ``username``, ``credential``."""

    urls: list[str] = Field(min_length=1, max_length=8)
    """stun:, stuns:, turn: or turns: URLs of one server (RFC 7064, 7065), e.g.
    ``turn:turn.example.net:3478?transport=udp``."""
    username: str | None = None
    credential: SecretStr | None = None
    """The TURN long-term password: a secret, shown nowhere (logs, errors, ``repr``) but to authorised
    clients, in the Link headers that advertise it."""

    @model_validator(mode="before")
    @classmethod
    def _credential_is_text(cls, data: Any) -> Any:
        """Refuse a credential that is not text here, where the error quotes the whole entry (which
        errors never show) rather than the field's value."""
        if isinstance(data, dict) and not isinstance(data.get("credential"), str | SecretStr | None):
            raise ValueError("the credential must be a string (quote it in YAML); the value is not shown")
        return data

    @model_validator(mode="after")
    def _usable(self) -> IceServerConfig:
        # a ConfigError (a ValueError) naming what is wrong, never the credential
        check_ice_server(self.urls, self.username, self.secret())
        return self

    def secret(self) -> str | None:
        """The credential revealed, for the WebRTC server that hands it to its peers and clients."""
        return None if self.credential is None else self.credential.get_secret_value()


class ServerLimits(Strict):
    """Each connection's time and size on an HTTP server (``streamer.serving.httpserve.HttpLimits``)."""

    header_timeout_s: float = Field(10.0, gt=0.0, le=300.0)
    """A connection's first request headers not complete in this time get 408 and the connection closes."""
    body_timeout_s: float = Field(10.0, gt=0.0, le=300.0)
    """A request body not received in this time gets 408."""
    idle_timeout_s: float = Field(30.0, gt=0.0, le=3600.0)
    """A keep-alive connection without a request for this long is closed."""
    max_request_line: int = Field(8190, ge=256, le=65536)
    """Bytes of a request line; longer gets 414."""
    max_header_bytes: int = Field(8190, ge=256, le=65536)
    """Bytes of one header line; longer gets 431."""
    max_headers: int = Field(64, ge=8, le=1024)
    """Header lines in one request; more get 431."""
    max_connections: int = Field(256, ge=1, le=65536)
    """Connections open at once; one more is answered 503 and closed."""
    max_connections_per_client: int = Field(32, ge=1, le=65536)
    """Connections open at once from one client address; one more is answered 503 and closed."""


PLACEHOLDER_TOKEN = "change-me-to-a-long-random-token"
"""The token the compose recipe ships with: refused off loopback, where anyone could use it."""


class WebRtcConfig(ServerLimits):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    token: str | None = Field(None, min_length=1, max_length=4096)
    ice_addresses: list[str] | None = None
    stun_servers: list[str] = Field(default_factory=list, max_length=8)
    """stun: or stuns: URLs; a STUN server needs no credential."""
    ice_servers: list[IceServerConfig] = Field(default_factory=list, max_length=8)
    """STUN and TURN servers with credentials: the server's own peers use them (aiortc takes the first
    STUN and the first TURN URL of all), and ``advertise_ice_servers`` tells clients of them."""
    advertise_ice_servers: bool | None = None
    """Send the STUN and TURN servers, credentials included, to authorised clients in ``Link: <...>;
    rel="ice-server"`` headers (RFC 9725) on the 201 answer and on OPTIONS; None: when a TURN server is
    configured."""
    cors_origins: list[str] = Field(default_factory=list, max_length=64)
    """Origins (``https://studio.example.net``) whose web pages may publish and play; ``['*']``: any
    (needs ``token``); []: the server's own pages only."""
    max_body_bytes: int = Field(64 * 1024, ge=1024, le=1024 * 1024)
    connect_timeout_s: float = Field(20.0, gt=0.0, le=600.0)
    publisher_stale_s: float = Field(3.0, gt=0.0, le=600.0)
    """A connected WHIP publisher that has sent no video for this long is replaced by a new offer for its
    stream (a browser tab closed abruptly stays 'connected' for about 30 s); before that, 409."""
    max_sessions: int = Field(64, ge=1, le=4096)
    """WHIP and WHEP sessions open at once; an offer past it gets 503 with Retry-After."""
    max_players: int = Field(16, ge=1, le=4096)
    """WHEP players of one stream at once; past it, 503 with Retry-After."""
    shared_h264: bool = True
    """Players whose offer takes H.264 in Constrained Baseline (every browser's does) share one encode
    per stream (libx264 ultrafast, zerolatency, at ``player_bitrate``; a keyframe as a player joins or
    reports a lost picture), so the cores pay one encode however many play. False: aiortc encodes for
    each player (VP8 or H.264), each player's bitrate following its own congestion control, for players
    on links that cannot carry ``player_bitrate``. Players that offer no such H.264 get their own
    encoder either way."""
    player_bitrate: int | None = Field(None, ge=100_000, le=100_000_000)
    """The shared H.264 encode's bits per second; None: 0.1 bit per pixel at 30 fps (0.7 Mbit/s at
    640x360, 2.8 at 1280x720)."""

    @field_validator("stun_servers")
    @classmethod
    def _stun_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not check_ice_url(url).startswith("stun"):
                raise ValueError(f"{url!r} is a TURN URL; list it under ice_servers with its credentials")
        return urls

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        return list(check_origins(origins))  # as browsers write them, so they compare exactly

    @model_validator(mode="after")
    def _no_placeholder_token(self) -> Self:
        if self.token == PLACEHOLDER_TOKEN and not is_loopback(self.host):
            raise ValueError(
                f"token is the recipe's placeholder {PLACEHOLDER_TOKEN!r}, and host {self.host} is reachable "
                "from other machines: set a long random token of your own (openssl rand -hex 24)"
            )
        return self


class HttpConfig(ServerLimits):
    """The operations endpoint: /healthz, /readyz, /metrics, /streams (aiohttp)."""

    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=0, le=65535)
    """None: no HTTP endpoint; 0: any free port."""
    token: str | None = Field(None, min_length=1, max_length=4096)
    """Bearer token for every route (adding and removing streams included); without one, reads are open
    and only trusted loopback clients may add and remove streams."""
    read_token: str | None = Field(None, min_length=1, max_length=4096)
    """A second bearer token that reads (GET /streams, /metrics) but cannot add or remove: for monitoring."""
    token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The environment variable ``token`` is read from at start (a Kubernetes Secret given as env),
    so the token never sits in a config file; unset or empty there is an error, not an open endpoint."""
    read_token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The same for ``read_token``."""
    public_probes: bool = True
    """/healthz and /readyz answer without a token (Kubernetes probes); false: they need one too."""
    trust_loopback: bool | None = None
    """Without a token, loopback clients may add and remove streams. None: only while ``host`` is a
    loopback address (behind a proxy on the same host, every client looks local: set false)."""
    media_roots: list[Path] = Field(default_factory=list, max_length=64)
    """Directories whose files streams added through the API may read (file sources) and write (file
    sinks); empty: no file paths through the API. Sample clips are always allowed."""
    model_roots: list[Path] = Field(default_factory=list, max_length=64)
    """Directories whose ONNX files API streams may load; empty: only the shipped default model."""
    allowed_hosts: list[str] | None = Field(None, max_length=1024)
    """Hosts API streams may pull from or push to over RTSP besides loopback; ``['*']``: any. None: the
    hosts the config file's own streams use."""
    max_streams: int = Field(32, ge=1, le=4096)
    """Streams running at once, config and API together; an add past it gets 429."""
    max_output_mb: int = Field(4096, ge=1, le=10**9)
    """The largest file an output added through the API may write (its ``max_mb`` is capped to it)."""
    api_codecs: list[str] = Field(default_factory=lambda: list(COMPRESSED_CODECS), max_length=64)
    """Encoders an output added through the API may name; uncompressed ones (rawvideo: 0.7 MB a 360p
    frame) fill a disk in minutes, so they are left out unless listed here."""
    ended_retention_s: float = Field(300.0, ge=0.0, le=86400.0)
    """An ended stream's status stays in /streams this long, then it is removed with its metrics."""

    @model_validator(mode="before")
    @classmethod
    def _tokens_from_the_environment(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for key in ("token", "read_token"):
            variable = data.get(f"{key}_env")
            if variable is None:
                continue
            if data.get(key) is not None:
                raise ValueError(f"http.{key} and http.{key}_env are both set; keep one")
            value = os.environ.get(str(variable), "").strip()
            if not value:
                raise ValueError(
                    f"http.{key}_env names {variable}, which is unset or empty in this environment; set it "
                    f"(a Secret's key), or remove http.{key}_env"
                )
            data = {**data, key: value}
        return data

    def trusts_loopback(self) -> bool:
        if self.trust_loopback is not None:
            return self.trust_loopback
        return is_loopback(self.host)
