"""The checks of network names a config gives (bind hosts, CORS origins, STUN and TURN servers), owned
here so the schema needs no network library; the WebRTC server and the control API use the same ones.

Each returns what it was given in its canonical form, or raises a ConfigError naming the value (never a
secret in it) and how to write it.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Sequence

from streamer.errors import ConfigError
from streamer.redact import redact_url

__all__ = ["MAX_ORIGIN", "check_ice_server", "check_ice_url", "check_origins", "is_loopback"]


def is_loopback(host: str) -> bool:
    """True for 'localhost' and loopback IP literals: a bind address no other machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


MAX_ORIGIN = 300
"""Longer than any origin (scheme, a 253-character host, a port): a longer header is not one."""
_MAX_ORIGINS = 64
_DEFAULT_PORTS = {"http": 80, "https": 443}


def check_origins(origins: Sequence[str]) -> tuple[str, ...]:
    """``origins`` as browsers write them in ``Origin`` (lower case, no default port), or a ConfigError
    naming the first that is not an origin and how to write it."""
    if len(origins) > _MAX_ORIGINS:
        raise ConfigError(f"webrtc.cors_origins lists {len(origins)} origins; at most {_MAX_ORIGINS}")
    if "*" in origins:
        if len(origins) > 1:
            raise ConfigError(
                "webrtc.cors_origins: '*' allows every origin and stands alone; list '*' or origins"
            )
        return ("*",)
    return tuple(dict.fromkeys(_origin(o) for o in origins))


def _shown(text: str) -> str:
    """A configured origin as an error shows it: user info or a query in it may hold a secret."""
    return redact_url(text) if any(c in text for c in "@?#") else text


def _origin(text: str) -> str:
    how = "write it as scheme://host, with a port where it has one, e.g. 'https://studio.example.net' or 'http://localhost:3000'"
    if len(text) > MAX_ORIGIN:
        raise ConfigError(f"webrtc.cors_origins: {_shown(text[:60])!r}... is longer than any origin; {how}")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        raise ConfigError(f"webrtc.cors_origins: {_shown(text)!r} is not an origin; {how}") from None
    host = parts.hostname
    if (
        parts.scheme not in _DEFAULT_PORTS
        or not host
        or parts.username is not None
        or parts.password is not None
    ):
        raise ConfigError(f"webrtc.cors_origins: {_shown(text)!r} is not an http or https origin; {how}")
    if parts.path or parts.query or parts.fragment or text.endswith(("?", "#")):
        bare = f"{parts.scheme}://{parts.netloc}"
        raise ConfigError(
            f"webrtc.cors_origins: {_shown(text)!r} has a path; an origin has none: write {bare!r}"
        )
    if ":" in host:  # an IPv6 literal, unbracketed by urlsplit: browsers send its compressed form
        try:
            host = f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            raise ConfigError(
                f"webrtc.cors_origins: {_shown(text)!r} has a malformed IPv6 address; {how}"
            ) from None
    shown = f"{parts.scheme.lower()}://{host.lower()}"
    return shown if port is None or port == _DEFAULT_PORTS[parts.scheme.lower()] else f"{shown}:{port}"


_ICE_URL = re.compile(
    r"(?P<scheme>stuns?|turns?):(?P<host>[A-Za-z0-9.-]{1,253})(?::(?P<port>[0-9]{1,5}))?"
    r"(?:\?transport=(?P<transport>udp|tcp))?"
)
"""An RFC 7064 STUN or RFC 7065 TURN URI with a hostname or IPv4 host: aiortc's own parser takes no
IPv6 literal (``[::1]``), and a URL it cannot parse would fail every peer connection."""
_HOSTNAME_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_MAX_URL = 512
_MAX_SECRET = 512
_SECRET_CHARS = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]+")
"""Printable ASCII but space, ``"``, ``,``, ``;`` and ``\\``: what survives inside a quoted ``Link``
attribute even for clients that split the header naively on ``,`` and ``;`` (OBS Studio does)."""


def check_ice_url(url: str) -> str:
    """``url`` if it is a STUN or TURN URL that aiortc and browsers accept, else a ConfigError naming it."""
    example = "e.g. 'turn:turn.example.net:3478?transport=udp' or 'stun:stun.example.net:3478'"
    if "@" in url:
        raise ConfigError(
            f"ICE server URL {_masked(url)!r} carries user info; give the username and credential as fields "
            "of their own"
        )
    match = _ICE_URL.fullmatch(url) if len(url) <= _MAX_URL else None
    if match is None:
        raise ConfigError(
            f"ICE server URL {_masked(url)!r} is not a stun:, stuns:, turn: or turns: URL of a hostname or "
            f"IPv4 address with an optional port and ?transport=udp|tcp; write it as {example}"
        )
    scheme, host, port, transport = match.group("scheme", "host", "port", "transport")
    if not _is_host(host):
        raise ConfigError(
            f"ICE server URL {url!r}: {host!r} is neither a hostname nor an IPv4 address; {example}"
        )
    if port is not None and not 1 <= int(port) <= 65535:
        raise ConfigError(f"ICE server URL {url!r}: port {port} is out of range; use 1-65535")
    if scheme.startswith("stun") and transport is not None:
        raise ConfigError(f"ICE server URL {url!r}: a STUN URL takes no ?transport (RFC 7064); drop it")
    if scheme == "turns" and transport == "udp":
        raise ConfigError(f"ICE server URL {url!r}: TURN over TLS runs on TCP; use ?transport=tcp or drop it")
    return url


def _masked(url: str) -> str:
    """A URL that failed the check, as an error shows it: its user info and query values may be secrets."""
    head, mark, query = url.partition("?")
    scheme, colon, rest = head.partition(":")
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    shown = scheme + colon + rest + mark + re.sub(r"=[^&]*", "=***", query)
    return shown if len(shown) <= 100 else shown[:85] + "..."


def _is_host(host: str) -> bool:
    if host.replace(".", "").isdigit():
        try:
            return ipaddress.ip_address(host).version == 4
        except ValueError:
            return False
    return all(_HOSTNAME_LABEL.fullmatch(label) for label in host.removesuffix(".").split("."))


def _check_secret(value: str, what: str) -> None:
    """A ConfigError naming ``what`` (never the value: it may be a password) if it cannot be advertised."""
    if not 1 <= len(value) <= _MAX_SECRET or not _SECRET_CHARS.fullmatch(value):
        raise ConfigError(
            f"the TURN {what} must be 1-{_MAX_SECRET} printable ASCII characters without spaces, '\"', ',', "
            f"';' or '\\' (it travels in a Link header); choose another (the value is not shown)"
        )


def check_ice_server(urls: Sequence[str], username: str | None, credential: str | None) -> None:
    """A ConfigError naming what is wrong (never the credential) unless ``urls`` with ``username`` and
    ``credential`` are one STUN or TURN server a browser's ``RTCIceServer`` takes: a TURN URL needs both
    (long-term password, RFC 8489 section 9.2), a STUN URL neither."""
    if not 1 <= len(urls) <= 8:
        raise ConfigError(f"an ICE server lists {len(urls)} URLs; give 1 to 8")
    for url in urls:
        check_ice_url(url)
    if any(url.startswith("turn") for url in urls):
        if username is None or credential is None:
            raise ConfigError(
                f"TURN server {urls[0]!r} needs a username and a credential (its long-term password)"
            )
        _check_secret(username, "username")
        _check_secret(credential, "credential")
    elif username is not None or credential is not None:
        raise ConfigError(
            f"STUN server {urls[0]!r} takes no username or credential; drop them, or list a turn: URL"
        )
