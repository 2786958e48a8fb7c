"""Who may use the WHIP/WHEP endpoints, and what an authorised client is told, applied to aiohttp requests.

Three things decide it: the bearer token (every WHIP and WHEP request carries it when one is set), the
origins whose pages may call from a browser (:class:`~streamer.webrtc.cors.CorsPolicy` decides, this
module answers the preflights and adds the headers), and the ICE servers advertised in
``Link: <turn:...>; rel="ice-server"`` headers (RFC 9725 section 4.6), which carry TURN credentials and
so go only to a client that showed the token, never to a preflight.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from multidict import CIMultiDict

from streamer.errors import ConfigError
from streamer.serving.httpserve import check_bearer
from streamer.webrtc.cors import CorsPolicy, check_origins
from streamer.webrtc.ice import IceServer

__all__ = ["Access", "is_preflight", "unknown_stream", "with_links"]

_ENDPOINT_METHODS = ("POST", "OPTIONS")
"""What a page on another origin may send an endpoint: its offer, and the OPTIONS that asks for the ICE
servers (with a token, so not CORS-safelisted)."""
_SESSION_METHODS = ("DELETE", "PATCH")


def is_preflight(request: web.Request) -> bool:
    """A browser's CORS preflight: an OPTIONS naming the method it is about to send."""
    return request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers


def with_links(headers: dict[str, str], links: Sequence[str]) -> CIMultiDict[str]:
    """``headers`` plus one ``Link`` header per ICE server URL (a header each, as RFC 9725 writes them,
    which clients that split a joined header on ',' also read)."""
    merged = CIMultiDict(headers)
    for link in links:
        merged.add("Link", link)
    return merged


def unknown_stream(what: str, stream: str, known: Iterable[str]) -> web.HTTPNotFound:
    """The 404 for a stream id this server has no ``what`` for, naming those it has: a request names a
    stream, and only the streams declared are served."""
    names = ", ".join(sorted(known)) or "none"
    return web.HTTPNotFound(text=f"no {what} for stream {stream!r}; this server has: {names}\n")


class Access:
    """The token, the CORS policy and the advertised ICE server links of one server.

    Build it with :meth:`configure`, which refuses settings that would open the server to any web page
    or advertise servers that do not exist.
    """

    def __init__(self, token: str | None, cors: CorsPolicy, links: tuple[str, ...]) -> None:
        self._token = token or None
        self.cors = cors
        self.links = links
        """The ``Link`` header values an authorised client is sent; empty when nothing is advertised."""

    @classmethod
    def configure(
        cls,
        token: str | None,
        cors_origins: Sequence[str],
        ice_servers: Sequence[IceServer],
        advertise_ice_servers: bool | None,
    ) -> Access:
        """The access of a server with these settings (``advertise_ice_servers`` None: advertise when one
        of ``ice_servers`` is a TURN server); raises ConfigError naming the setting to change."""
        cors = CorsPolicy(check_origins(cors_origins))
        if cors.any_origin and not token:
            raise ConfigError(
                "webrtc.cors_origins is ['*'] but no token is set, so any web page a visitor opens could "
                "publish and play; set webrtc.token, or list the origins allowed"
            )
        advertise = (
            any(s.has_turn for s in ice_servers) if advertise_ice_servers is None else advertise_ice_servers
        )
        if advertise and not ice_servers:
            raise ConfigError(
                "webrtc.advertise_ice_servers is true but there is no STUN or TURN server to advertise; "
                "configure webrtc.ice_servers or set advertise_ice_servers to null"
            )
        links = tuple(link for server in ice_servers for link in server.links()) if advertise else ()
        return cls(token, cors, links)

    def authorize(self, request: web.Request) -> None:
        """Nothing with the right token or none configured; a 401 otherwise."""
        if self._token is not None:
            check_bearer(request, self._token)

    def may_see_ice_servers(self, request: web.Request) -> bool:
        """Whether a plain OPTIONS may read the TURN credentials: with a token configured, only with that
        token (a wrong one is a 401, not a silent omission)."""
        if self._token is None or "Authorization" in request.headers:
            self.authorize(request)
            return True
        return False

    def middleware(self) -> Middleware:
        """CORS headers on every WHIP/WHEP response but a preflight (which answers its own), refusals
        included, so a page on an allowed origin can read why it was refused."""
        policy = self.cors

        @web.middleware
        async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
            if (
                not policy.origins
                or is_preflight(request)
                or not request.path.startswith(("/whip/", "/whep/"))
            ):
                return await handler(request)
            headers = policy.response_headers(request.headers.get("Origin"))
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                exc.headers.update(headers)
                raise
            response.headers.update(headers)
            return response

        return cors

    async def options_endpoint(self, request: web.Request) -> web.Response:
        """A CORS preflight, or a client asking for the ICE servers (RFC 9725 section 4.6) before it
        gathers, as it must here: this server takes no trickled candidates."""
        headers = {"Allow": "OPTIONS, POST", "Accept-Post": "application/sdp"}
        if is_preflight(request):
            return self._preflight(request, _ENDPOINT_METHODS, headers)
        links = self.links if self.links and self.may_see_ice_servers(request) else ()
        return web.Response(headers=with_links(headers, links))

    async def options_session(self, request: web.Request) -> web.Response:
        """A CORS preflight for a session's DELETE or PATCH, or a client asking what it allows."""
        headers = {"Allow": "OPTIONS, DELETE, PATCH"}
        if is_preflight(request):
            return self._preflight(request, _SESSION_METHODS, headers)
        return web.Response(headers=headers)

    def _preflight(
        self, request: web.Request, methods: tuple[str, ...], headers: dict[str, str]
    ) -> web.Response:
        """200 with the CORS grant for an allowed origin; 403 with no grant and the reason otherwise."""
        decision = self.cors.preflight(
            request.headers.get("Origin"),
            request.headers.get("Access-Control-Request-Method", ""),
            request.headers.get("Access-Control-Request-Headers", ""),
            methods,
        )
        if not decision.allowed:
            raise web.HTTPForbidden(
                headers=decision.headers, text=f"CORS preflight refused: {decision.reason}\n"
            )
        return web.Response(headers={**headers, **decision.headers})
