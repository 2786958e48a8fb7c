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
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
from collections.abc import Callable, Iterator, Sequence

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer

from streamer.errors import ConfigError

__all__ = [
    "check_addresses",
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


def is_loopback(host: str) -> bool:
    """True for 'localhost' and loopback IP literals: a bind address no other machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


def rtc_configuration(stun_servers: Sequence[str] = ()) -> RTCConfiguration:
    """A peer configuration with only the given STUN servers: none by default, not aiortc's Google one."""
    return RTCConfiguration(iceServers=[RTCIceServer(urls=url) for url in stun_servers])
