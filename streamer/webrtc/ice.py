"""Which local addresses WebRTC peers gather ICE candidates on, and no STUN unless asked.

aioice gathers host candidates on every interface address except loopback (``aioice.ice
.get_host_addresses`` skips 127.0.0.1 on purpose), and aiortc adds Google's STUN server when given no
ICE servers. A media server wants neither by default: it should offer only the addresses operators
chose, and a loopback-only host (a test, a laptop demo) has no candidate at all otherwise.

aioice reads the addresses from a module-level function at gathering time and offers no per-connection
setting, so :func:`restrict_host_addresses` installs, once, a wrapper around that function that
consults a context variable: inside ``with restrict_host_addresses([...])`` (and in the tasks started
from it, such as the gathering ``setLocalDescription`` runs) candidates come from that list; anywhere
else in the process aioice behaves exactly as before.

Beyond the LAN a peer needs a TURN server: :class:`IceServer` is one STUN or TURN server as a browser's
``RTCIceServer`` has it, checked once (RFC 7064 / 7065 URLs, credentials a ``Link`` header can carry),
and :meth:`IceServer.links` writes the ``Link: <turn:...>; rel="ice-server"`` values RFC 9725 section 4.6
advertises to clients.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer

from streamer.config.net import check_ice_server, check_ice_url, is_loopback
from streamer.errors import ConfigError

__all__ = [
    "IceServer",
    "check_addresses",
    "check_ice_url",
    "default_ice_addresses",
    "is_loopback",
    "restrict_host_addresses",
    "rtc_configuration",
]

_RESTRICTED: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "streamer_ice_host_addresses", default=None
)
_original: Callable[[bool, bool], list[str]] | None = None


def _host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    """aioice's address lookup, narrowed to the active restriction when there is one."""
    assert _original is not None
    chosen = _RESTRICTED.get()
    if chosen is None:
        return _original(use_ipv4, use_ipv6)
    return [a for a in chosen if (use_ipv6 if ipaddress.ip_address(a).version == 6 else use_ipv4)]


def _install() -> None:
    global _original
    if _original is None:
        _original = aioice.ice.get_host_addresses
        aioice.ice.get_host_addresses = _host_addresses


def check_addresses(addresses: Sequence[str]) -> list[str]:
    """``addresses`` if each is an IP literal, else a ConfigError naming the first that is not."""
    if not addresses:
        raise ConfigError("ice_addresses is empty, so peers could never connect; list at least one address")
    for address in addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ConfigError(
                f"ICE address {address!r} is not an IP address; list the interface addresses to offer, "
                "e.g. ['127.0.0.1'] or ['192.168.1.20']"
            ) from None
    return list(addresses)


@contextlib.contextmanager
def restrict_host_addresses(addresses: Sequence[str] | None) -> Iterator[None]:
    """Gather host candidates only on ``addresses`` (IP literals) within the block; None: aioice's own."""
    if addresses is None:
        yield
        return
    check_addresses(addresses)
    _install()
    token = _RESTRICTED.set(tuple(addresses))
    try:
        yield
    finally:
        _RESTRICTED.reset(token)


def default_ice_addresses(host: str) -> list[str] | None:
    """The candidates a server bound to ``host`` offers: that address, or every interface (None).

    A wildcard bind ('0.0.0.0', '::', '') leaves the choice to aioice (all non-loopback interfaces);
    a hostname other than localhost cannot be mapped to an interface here, so it must be configured.
    """
    if host in ("", "0.0.0.0", "::"):
        return None
    if host == "localhost":
        return ["127.0.0.1"]
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        raise ConfigError(
            f"cannot tell which interface the server host {host!r} is on; bind to an IP address or set "
            "ice_addresses to the addresses peers should reach"
        ) from None


@dataclass(frozen=True, slots=True)
class IceServer:
    """One STUN or TURN server with its credentials, as browsers' ``RTCIceServer``; checked on creation.

    A TURN URL needs ``username`` and ``credential`` (long-term password, RFC 8489 section 9.2); a STUN
    URL takes none. ``credential`` is a secret: it stays out of ``repr`` and so out of logs and errors.
    """

    urls: tuple[str, ...]
    username: str | None = None
    credential: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_ice_server(self.urls, self.username, self.credential)

    @property
    def has_turn(self) -> bool:
        """Whether any URL is a TURN one: a relay, the server a client behind a strict NAT needs."""
        return any(url.startswith("turn") for url in self.urls)

    def rtc(self) -> RTCIceServer:
        """This server for aiortc, which uses the first STUN and the first TURN URL it is given."""
        return RTCIceServer(urls=list(self.urls), username=self.username, credential=self.credential)

    def links(self) -> list[str]:
        """One ``Link`` header value per URL, written as RFC 9725 section 4.6 does (credentials on TURN)."""
        values = []
        for url in self.urls:
            value = f'<{url}>; rel="ice-server"'
            if url.startswith("turn"):
                value += f'; username="{self.username}"; credential="{self.credential}"'
                value += '; credential-type="password"'
            values.append(value)
        return values


def rtc_configuration(
    stun_servers: Sequence[str] = (), ice_servers: Sequence[IceServer] = ()
) -> RTCConfiguration:
    """A peer configuration with only the given STUN and TURN servers: none by default, not aiortc's
    Google STUN server."""
    servers = [RTCIceServer(urls=url) for url in stun_servers] + [server.rtc() for server in ice_servers]
    return RTCConfiguration(iceServers=servers)
