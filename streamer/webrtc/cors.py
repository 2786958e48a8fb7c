"""Which web pages on other origins may publish and play, decided from the request's headers alone.

A page on ``https://studio.example.net`` that posts an offer to this server is a cross-origin request:
the browser first sends an OPTIONS *preflight* and sends the real request only if the answer names the
page's origin, and lets the page read ``Location`` and ``Link`` only if the real response exposes them.
:class:`CorsPolicy` makes those decisions (pure: headers in, headers out); the server applies them. By
default no origin is allowed, so only the server's own pages (same origin) use it from a browser.

An origin is allowed only if it is listed exactly as browsers send it (``scheme://host[:port]``); the
request's ``Origin`` is never echoed unless it is. ``*`` allows every origin and is accepted only alone.
Bearer tokens travel in ``Authorization``, which CORS allows without credentials mode, so the policy
never sends ``Access-Control-Allow-Credentials``: a ``*`` never meets cookies.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from streamer.errors import ConfigError
from streamer.redact import redact_url

__all__ = ["ALLOWED_HEADERS", "EXPOSED_HEADERS", "CorsPolicy", "Preflight", "check_origins"]

ALLOWED_HEADERS = ("Authorization", "Content-Type", "If-Match")
"""Request headers a cross-origin WHIP/WHEP client sends: the bearer token, ``application/sdp``, and
the ETag of a session (RFC 9725 section 4.3)."""
EXPOSED_HEADERS = ("Location", "Link", "ETag", "Accept-Patch")
"""Response headers a cross-origin page must read: the session URL, the ICE servers, and the session's
ETag and PATCH formats where a server sends them."""
MAX_AGE_S = 600
"""How long a browser may reuse a preflight's answer."""

_MAX_ORIGIN = 300
"""Longer than any origin (scheme, a 253-character host, a port): a longer header is not one."""
_MAX_REQUEST_HEADERS = 1024
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
    if len(text) > _MAX_ORIGIN:
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


@dataclass(frozen=True, slots=True)
class Preflight:
    """The answer to a CORS preflight: ``allowed`` with the headers to send, or refused with a reason."""

    allowed: bool
    headers: dict[str, str]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    """The origins (from :func:`check_origins`) whose pages may use the WHIP/WHEP URLs; empty: none."""

    origins: tuple[str, ...] = ()

    @property
    def any_origin(self) -> bool:
        return self.origins == ("*",)

    def allowed(self, origin: str | None) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a request from ``origin``, or None (no CORS)."""
        if origin is None or not self.origins or len(origin) > _MAX_ORIGIN:
            return None
        if self.any_origin:
            return "*"
        return origin if origin in self.origins else None

    def response_headers(self, origin: str | None) -> dict[str, str]:
        """Headers for the real (not preflight) response to a request from ``origin``."""
        if not self.origins:
            return {}
        headers = {} if self.any_origin else {"Vary": "Origin"}  # the answer depends on the Origin
        allow = self.allowed(origin)
        if allow is not None:
            headers["Access-Control-Allow-Origin"] = allow
            headers["Access-Control-Expose-Headers"] = ", ".join(EXPOSED_HEADERS)
        return headers

    def preflight(
        self, origin: str | None, method: str, request_headers: str, methods: Sequence[str]
    ) -> Preflight:
        """Whether a page on ``origin`` may send ``method`` with ``request_headers`` (the comma-separated
        ``Access-Control-Request-Headers``) to a URL that answers ``methods``."""
        vary = {} if self.any_origin else {"Vary": "Origin"}
        allow = self.allowed(origin)
        if allow is None:
            shown = "no Origin" if origin is None else f"origin {origin[:_MAX_ORIGIN]!r}"
            return Preflight(False, vary, f"{shown} is not allowed (webrtc.cors_origins)")
        if method not in methods:
            return Preflight(
                False, vary, f"method {method[:16]!r} is not allowed here; use {', '.join(methods)}"
            )
        if len(request_headers) > _MAX_REQUEST_HEADERS:
            return Preflight(
                False, vary, f"Access-Control-Request-Headers is over {_MAX_REQUEST_HEADERS} bytes"
            )
        wanted = {name.strip().lower() for name in request_headers.split(",") if name.strip()}
        extra = sorted(wanted - {name.lower() for name in ALLOWED_HEADERS})
        if extra:
            allowed = ", ".join(ALLOWED_HEADERS)
            return Preflight(
                False, vary, f"request header {extra[0][:40]!r} is not allowed; send only {allowed}"
            )
        return Preflight(
            True,
            {
                **vary,
                "Access-Control-Allow-Origin": allow,
                "Access-Control-Allow-Methods": ", ".join(methods),
                "Access-Control-Allow-Headers": ", ".join(ALLOWED_HEADERS),
                "Access-Control-Max-Age": str(MAX_AGE_S),
            },
        )
