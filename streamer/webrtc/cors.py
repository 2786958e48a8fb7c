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

from collections.abc import Sequence
from dataclasses import dataclass

from streamer.config.net import MAX_ORIGIN, check_origins

__all__ = ["ALLOWED_HEADERS", "EXPOSED_HEADERS", "CorsPolicy", "Preflight", "check_origins"]

ALLOWED_HEADERS = ("Authorization", "Content-Type", "If-Match")
"""Request headers a cross-origin WHIP/WHEP client sends: the bearer token, ``application/sdp``, and
the ETag of a session (RFC 9725 section 4.3)."""
EXPOSED_HEADERS = ("Location", "Link", "ETag", "Accept-Patch")
"""Response headers a cross-origin page must read: the session URL, the ICE servers, and the session's
ETag and PATCH formats where a server sends them."""
MAX_AGE_S = 600
"""How long a browser may reuse a preflight's answer."""

_MAX_REQUEST_HEADERS = 1024


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
        if origin is None or not self.origins or len(origin) > MAX_ORIGIN:
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
            shown = "no Origin" if origin is None else f"origin {origin[:MAX_ORIGIN]!r}"
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
