"""An aiohttp server for WHIP ingest, WHEP playback and a built-in viewer page, on the pipeline's loop.

Routes (``{stream}`` is a stream id declared by a :class:`~streamer.webrtc.source.WhipSource` or
:class:`~streamer.webrtc.sink.WhepSink`; anything else is a 404):

- ``POST /whip/{stream}`` (SDP offer) -> 201, SDP answer, ``Location: /whip/{stream}/{session}``; one
  publisher per stream, a second gets 409. ``DELETE`` the Location to leave. The offer's video must
  include VP8 or H.264 in a profile FFmpeg decodes (:data:`~streamer.webrtc.codecs.ACCEPTED`).
- ``POST /whep/{stream}`` -> 201 likewise, any number of players; ``{stream}.original`` plays the
  frames as they entered the pipeline. ``DELETE`` the Location to stop.
- ``PATCH`` on a session: 405, trickle ICE is not supported (the offer must carry its candidates).
- ``OPTIONS`` on an endpoint or a session: a CORS preflight (answered for ``cors_origins`` only), or a
  client asking for the ICE servers before it gathers its candidates.
- ``GET /`` and ``GET /view/{stream}``: the viewer (publish the browser camera, play both streams).

Beyond the LAN: ``ice_servers`` (STUN and TURN with credentials) are used by the server's own peers and,
as RFC 9725 section 4.6 has it, advertised to authorised clients in ``Link: <turn:...>; rel="ice-server"``
headers on the 201 and on a plain OPTIONS (never on a preflight, which carries no token). Pages on other
origins may publish and play when their origin is listed in ``cors_origins``
(:class:`~streamer.webrtc.cors.CorsPolicy`); none is by default.

Every refusal is a 4xx with a one-line text reason. With a token configured, WHIP and WHEP requests
need ``Authorization: Bearer <token>``; a server reachable from other machines refuses to start
without one. Peers gather host candidates only on ``ice_addresses`` and use no STUN server unless given.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from aiohttp import ClientPayloadError, web
from aiohttp.typedefs import Handler, Middleware
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpTransceiver, RTCSessionDescription
from multidict import CIMultiDict

from streamer.errors import ConfigError
from streamer.serving.httpserve import HttpLimits, check_bearer, read_body, serve
from streamer.serving.memory import release_memory
from streamer.webrtc.codecs import refusal, relabel_h264, video_formats, video_section
from streamer.webrtc.cors import CorsPolicy, check_origins
from streamer.webrtc.ice import (
    IceServer,
    check_addresses,
    default_ice_addresses,
    is_loopback,
    restrict_host_addresses,
    rtc_configuration,
)
from streamer.webrtc.lipsync import LipSync, listen
from streamer.webrtc.playback import ORIGINAL_SUFFIX, FrameHub, PlayerAudioTrack, PlayerTrack

__all__ = ["Ingest", "WebRtcServer"]

log = logging.getLogger(__name__)

_STREAM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
_Kind = Literal["whip", "whep"]


class Ingest(Protocol):
    """What the server hands a WHIP publisher's video (and sound) to; :class:`WhipSource` is one."""

    keep_audio: bool
    """Whether the publisher's first audio m-line is answered (recvonly) and its sound handed over."""

    def attach(self, track: MediaStreamTrack, audio: MediaStreamTrack | None, sync: LipSync) -> None:
        """A publisher's video track, its audio track if it sends one (and ``keep_audio``), and the
        clocks its sender reports feed, once its offer is answered."""

    def detach(self) -> None:
        """That publisher left: it sent DELETE, or its connection failed, closed or never came up."""

    def idle_s(self, now: float) -> float | None:
        """Seconds since the current publisher's last video frame (monotonic ``now``); None before one."""


@dataclass(eq=False)
class _Session:
    id: str
    kind: _Kind
    stream: str
    pc: RTCPeerConnection
    track: PlayerTrack | None = None
    sound: PlayerAudioTrack | None = None
    """A WHEP player's audio track, where the stream carries the source's audio."""
    timer: asyncio.TimerHandle | None = None
    opened: float = field(default_factory=time.monotonic)
    attached: bool = False
    """A WHIP session whose track the ingest took, and so must be told when it ends."""
    ended: bool = False


def _offer_problem(sdp: str, kind: _Kind) -> str | None:
    """Why ``sdp`` cannot be a WHIP (publisher sends video) or WHEP (player receives video) offer."""
    lines = [line.strip() for line in sdp.splitlines()]
    if not lines or lines[0] != "v=0":
        return "the body is not an SDP offer: it must start with 'v=0'"
    video = video_section(sdp)
    if video is None:
        return "the offer has no video m-line; offer one video track"
    if not any(line.startswith("a=fingerprint:") for line in lines):
        return "the offer has no DTLS fingerprint (a=fingerprint:); WebRTC media must be encrypted"
    direction = next((d for d in _DIRECTIONS if f"a={d}" in video), "sendrecv")
    wanted = ("sendrecv", "sendonly") if kind == "whip" else ("sendrecv", "recvonly")
    if direction not in wanted:
        role = "WHIP publisher must send video" if kind == "whip" else "WHEP player must receive video"
        return f"the offer's video is {direction!r}; a {role} ({wanted[1]})"
    formats = video_formats(video)
    if kind == "whip" and not any(f.decodable for f in formats):
        return refusal(formats)
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "no detail"


_RETRY_AFTER_S = 5
"""Retry-After of a session refused at a cap: players come and go within seconds."""
_RELEASE_AFTER_S = 2.0
"""How long after a session ends its memory is collected: players leaving together share one collection."""
_ENDPOINT_METHODS = ("POST", "OPTIONS")
"""What a page on another origin may send an endpoint: its offer, and the OPTIONS that asks for the ICE
servers (with a token, so not CORS-safelisted)."""
_SESSION_METHODS = ("DELETE", "PATCH")


def _is_preflight(request: web.Request) -> bool:
    """A browser's CORS preflight: an OPTIONS naming the method it is about to send."""
    return request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers


def _cors_middleware(policy: CorsPolicy) -> Middleware:
    """CORS headers on every WHIP/WHEP response but a preflight (which answers its own), refusals included,
    so a page on an allowed origin can read why it was refused."""

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not policy.origins or _is_preflight(request) or not request.path.startswith(("/whip/", "/whep/")):
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


class WebRtcServer:
    """WHIP/WHEP endpoints for the pipeline's streams; ``await start()``, ``await stop()``.

    ``port=0`` binds a free port (see :attr:`url`). ``ice_addresses`` None offers the bind address
    (127.0.0.1 for loopback, every interface for a wildcard bind). A session that has not connected
    within ``connect_timeout_s`` is ended, and a newer publisher replaces one that has not connected,
    or one connected that has sent no video for ``publisher_stale_s`` (a tab closed abruptly), so a
    stale session cannot hold a stream's publisher slot. At most ``max_sessions`` sessions are open,
    ``max_players`` of them players of one stream; past either, an offer gets 503 with Retry-After.
    ``stun_servers`` and ``ice_servers`` are advertised in Link headers when ``advertise_ice_servers``
    is true (None: when one is a TURN server); ``cors_origins`` ('*' only with a token) may use it
    from their pages.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8080,
        token: str | None = None,
        ice_addresses: list[str] | None = None,
        max_body_bytes: int = 64 * 1024,
        *,
        stun_servers: tuple[str, ...] = (),
        ice_servers: tuple[IceServer, ...] = (),
        advertise_ice_servers: bool | None = None,
        cors_origins: Sequence[str] = (),
        connect_timeout_s: float = 20.0,
        publisher_stale_s: float = 3.0,
        max_sessions: int = 64,
        max_players: int = 16,
        limits: HttpLimits | None = None,
    ) -> None:
        if not token and not is_loopback(host):
            raise ConfigError(
                f"webrtc.host is {host!r}, reachable from other machines, but no token is set; set "
                "webrtc.token (clients then send 'Authorization: Bearer <token>') or bind to 127.0.0.1"
            )
        if max_body_bytes < 1024:
            raise ConfigError(f"webrtc.max_body_bytes is {max_body_bytes}; an SDP offer needs at least 1024")
        self._cors = CorsPolicy(check_origins(cors_origins))
        if self._cors.any_origin and not token:
            raise ConfigError(
                "webrtc.cors_origins is ['*'] but no token is set, so any web page a visitor opens could "
                "publish and play; set webrtc.token, or list the origins allowed"
            )
        self._ice_servers = (*(IceServer((url,)) for url in stun_servers), *ice_servers)
        advertise = (
            any(s.has_turn for s in self._ice_servers)
            if advertise_ice_servers is None
            else advertise_ice_servers
        )
        if advertise and not self._ice_servers:
            raise ConfigError(
                "webrtc.advertise_ice_servers is true but there is no STUN or TURN server to advertise; "
                "configure webrtc.ice_servers or set advertise_ice_servers to null"
            )
        self._links = (
            tuple(link for server in self._ice_servers for link in server.links()) if advertise else ()
        )
        self.host = host
        self._port = port
        self._token = token or None
        self._ice = (
            check_addresses(ice_addresses) if ice_addresses is not None else default_ice_addresses(host)
        )
        self._max_body = max_body_bytes
        self._limits = limits or HttpLimits()
        self._connect_timeout = connect_timeout_s
        self._publisher_stale = publisher_stale_s
        self._max_sessions = max_sessions
        self._max_players = max_players
        self._viewer = importlib.resources.files(__package__).joinpath("viewer.html").read_text("utf-8")
        self._ingests: dict[str, Ingest] = {}
        self._hubs: dict[str, FrameHub] = {}
        self._figures: dict[str, Callable[[], Mapping[str, object]]] = {}
        self._publishers: dict[str, _Session] = {}
        self._sessions: dict[str, _Session] = {}
        self._runner: web.AppRunner | None = None
        self._ending: set[asyncio.Task[None]] = set()
        self._releasing: asyncio.Task[None] | None = None
        self._release_due = False
        self.app = web.Application(client_max_size=max_body_bytes, middlewares=[_cors_middleware(self._cors)])
        self.app.on_shutdown.append(self._on_shutdown)
        self.app.add_routes(
            [
                web.get("/", self._view),
                web.get("/view/{stream}", self._view),
                web.get("/view/{stream}/figures", self._view_figures),
                web.post("/whip/{stream}", self._whip),
                web.post("/whep/{stream}", self._whep),
                web.delete("/{kind:whip|whep}/{stream}/{session}", self._delete),
                web.patch("/{kind:whip|whep}/{stream}/{session}", self._patch),
                web.options("/{kind:whip|whep}/{stream}", self._options_endpoint),
                web.options("/{kind:whip|whep}/{stream}/{session}", self._options_session),
            ]
        )

    @property
    def url(self) -> str:
        """The base URL, with the bound port once started."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    @property
    def viewer_url(self) -> str:
        """The base URL a browser elsewhere reaches: a wildcard bind address (0.0.0.0, ::) stands for
        the first ICE address, the address peers are told; the bind address otherwise."""
        host = self.host
        if host in ("0.0.0.0", "::") and self._ice:
            host = self._ice[0]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self._port}"

    async def start(self) -> None:
        """Bind and serve; raises ConfigError naming the address when it cannot be bound."""
        if self._runner is not None:
            return
        self._runner, self._port = await serve(self.app, self.host, self._port, "webrtc", self._limits)
        urls = [url for server in self._ice_servers for url in server.urls]  # no credentials in a URL
        log.info(
            "WHIP/WHEP server on %s (ICE addresses %s; ICE servers %s, %s; CORS origins %s)",
            self.url,
            self._ice or "all interfaces",
            ", ".join(urls) or "none",
            "advertised in Link headers" if self._links else "not advertised",
            ", ".join(self._cors.origins) or "none (same origin only)",
        )

    async def stop(self) -> None:
        """End every session and stop serving; safe to call twice."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        else:
            await self._end_all()

    def declare_ingest(self, stream: str, ingest: Ingest) -> None:
        """Accept WHIP publishers for ``stream``; raises ConfigError if it is taken or malformed."""
        self._check_id(stream, taken=stream in self._ingests, what="WHIP source")
        self._ingests[stream] = ingest

    async def release_ingest(self, stream: str) -> None:
        """Stop accepting publishers for ``stream`` and end the current one."""
        self._ingests.pop(stream, None)
        session = self._publishers.get(stream)
        if session is not None:
            await self._end(session)

    def declare_playback(self, name: str) -> FrameHub:
        """Make ``name`` playable over WHEP; returns the hub its frames are published to."""
        self._check_id(name, taken=name in self._hubs, what="WHEP stream")
        hub = self._hubs[name] = FrameHub(name)
        return hub

    def declare_figures(self, name: str, figures: Callable[[], Mapping[str, object]]) -> None:
        """What ``GET /view/{name}/figures`` answers (the viewer's live line) while ``name`` plays."""
        self._figures[name] = figures

    async def release_playback(self, name: str) -> None:
        """Stop serving ``name`` and end its players' sessions."""
        self._figures.pop(name, None)
        hub = self._hubs.pop(name, None)
        if hub is None:
            return
        await asyncio.gather(
            *(self._end(s) for s in tuple(self._sessions.values()) if s.kind == "whep" and s.stream == name)
        )
        hub.close()

    def _check_id(self, stream: str, taken: bool, what: str) -> None:
        if not _STREAM_ID.fullmatch(stream):
            raise ConfigError(
                f"stream id {stream!r} is not usable in a URL path; use letters, digits, '_', '.' and '-'"
            )
        if taken:
            raise ConfigError(f"a {what} for stream {stream!r} already exists on this server; use another id")

    # HTTP handlers

    async def _view(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self._viewer,
            content_type="text/html",
            headers={
                "Content-Security-Policy": (
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                    "connect-src 'self'; media-src 'self' blob:"
                ),
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            },
        )

    async def _view_figures(self, request: web.Request) -> web.Response:
        """The stream's live figures, for the viewer; the same token as playing it."""
        stream = request.match_info["stream"]
        self._authorize(request)
        figures = self._figures.get(stream)
        if figures is None:
            raise self._unknown("stream with figures", stream, self._figures)
        return web.json_response(dict(figures()), headers={"Cache-Control": "no-store"})

    async def _whip(self, request: web.Request) -> web.Response:
        stream = request.match_info["stream"]
        self._authorize(request)
        ingest = self._ingests.get(stream)
        if ingest is None:
            raise self._unknown("WHIP source", stream, self._ingests)
        offer = await self._read_offer(request, "whip")
        held = self._publishers.get(stream)
        if held is not None and held.pc.connectionState == "connected":
            now = time.monotonic()
            idle = ingest.idle_s(now)
            quiet = now - held.opened if idle is None else idle
            if quiet > self._publisher_stale:
                log.info(
                    "WHIP session %s on %s replaced: connected, but no video for %.1f s",
                    held.id,
                    stream,
                    quiet,
                )
                await self._end(held)
                held = None
        if held is not None and held.pc.connectionState == "connected":
            raise web.HTTPConflict(
                text=f"stream {stream!r} already has a publisher sending video; it must leave (DELETE its "
                f"session URL), or send nothing for {self._publisher_stale:g} s (webrtc.publisher_stale_s)\n"
            )
        if held is not None:  # an offer that never connected holds no slot against a newer publisher
            log.info("WHIP session %s on %s replaced before it connected", held.id, stream)
            await self._end(held)
        self._check_room("whip", stream)
        session = self._open_session("whip", stream)
        self._publishers[stream] = session
        relabelled = relabel_h264(offer)  # so aiortc answers every H.264 profile FFmpeg decodes
        answer, video, audio = await self._negotiate(
            session, relabelled.sdp, "recvonly", audio=ingest.keep_audio
        )
        ingest = self._ingests.get(stream)
        if ingest is None or session.ended:  # the source was closed while the offer was being answered
            await self._end(session)
            raise self._unknown("WHIP source", stream, self._ingests)
        sync = LipSync()
        listen(video.receiver, sync.video)
        if audio is not None:
            listen(audio.receiver, sync.audio)
        ingest.attach(video.receiver.track, None if audio is None else audio.receiver.track, sync)
        session.attached = True
        return self._created(session, relabelled.answer(answer))

    async def _whep(self, request: web.Request) -> web.Response:
        stream = request.match_info["stream"]
        self._authorize(request)
        hub = self._hubs.get(stream)
        if hub is None:
            raise self._unknown("WHEP stream", stream, self._hubs)
        offer = await self._read_offer(request, "whep")
        self._check_room("whep", stream)
        session = self._open_session("whep", stream)
        session.track = hub.subscribe()
        if hub.carries_audio:
            session.sound = hub.subscribe_audio()
        answer, _, _ = await self._negotiate(session, offer, "sendonly", audio=session.sound is not None)
        if session.ended:  # the stream was released while the offer was being answered
            raise self._unknown("WHEP stream", stream, self._hubs)
        return self._created(session, answer)

    async def _delete(self, request: web.Request) -> web.Response:
        session = self._session_of(request)
        await self._end(session)
        return web.Response(text="session ended\n")

    async def _options_endpoint(self, request: web.Request) -> web.Response:
        """A CORS preflight, or a client asking for the ICE servers (RFC 9725 section 4.6) before it
        gathers, as it must here: this server takes no trickled candidates."""
        headers = {"Allow": "OPTIONS, POST", "Accept-Post": "application/sdp"}
        if _is_preflight(request):
            return self._preflight(request, _ENDPOINT_METHODS, headers)
        links = self._links if self._links and self._may_see_ice_servers(request) else ()
        return web.Response(headers=self._with_links(headers, links))

    async def _options_session(self, request: web.Request) -> web.Response:
        headers = {"Allow": "OPTIONS, DELETE, PATCH"}
        if _is_preflight(request):
            return self._preflight(request, _SESSION_METHODS, headers)
        return web.Response(headers=headers)

    async def _patch(self, request: web.Request) -> web.Response:
        self._session_of(request)
        raise web.HTTPMethodNotAllowed(
            "PATCH",
            ["DELETE"],
            text="trickle ICE is not supported; send the offer once ICE gathering is complete\n",
        )

    # helpers

    def _authorize(self, request: web.Request) -> None:
        if self._token is not None:
            check_bearer(request, self._token)

    def _may_see_ice_servers(self, request: web.Request) -> bool:
        """Whether a plain OPTIONS may read the TURN credentials: with a token configured, only with that
        token (a wrong one is a 401, not a silent omission)."""
        if self._token is None or "Authorization" in request.headers:
            self._authorize(request)
            return True
        return False

    def _preflight(
        self, request: web.Request, methods: tuple[str, ...], headers: dict[str, str]
    ) -> web.Response:
        """200 with the CORS grant for an allowed origin; 403 with no grant and the reason otherwise."""
        decision = self._cors.preflight(
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

    @staticmethod
    def _with_links(headers: dict[str, str], links: Sequence[str]) -> CIMultiDict[str]:
        """``headers`` plus one ``Link`` header per ICE server URL (a header each, as RFC 9725 writes
        them, which clients that split a joined header on ',' also read)."""
        merged = CIMultiDict(headers)
        for link in links:
            merged.add("Link", link)
        return merged

    def _unknown(self, what: str, stream: str, known: Iterable[str]) -> web.HTTPNotFound:
        names = ", ".join(sorted(known)) or "none"
        return web.HTTPNotFound(text=f"no {what} for stream {stream!r}; this server has: {names}\n")

    def _session_of(self, request: web.Request) -> _Session:
        self._authorize(request)
        kind, stream, sid = (request.match_info[k] for k in ("kind", "stream", "session"))
        session = self._sessions.get(sid)
        if session is None or session.kind != kind or session.stream != stream:
            raise web.HTTPNotFound(text=f"no {kind.upper()} session {sid!r} on stream {stream!r}\n")
        return session

    async def _read_offer(self, request: web.Request, kind: _Kind) -> str:
        if request.content_type != "application/sdp":
            raise web.HTTPUnsupportedMediaType(
                text=f"expected Content-Type: application/sdp, got {request.content_type!r}\n"
            )
        too_large = web.HTTPRequestEntityTooLarge(
            self._max_body,
            request.content_length or self._max_body + 1,
            text=f"the offer is larger than {self._max_body} bytes; an SDP offer is a few KiB\n",
        )
        if request.content_length is not None and request.content_length > self._max_body:
            raise too_large
        try:
            body = await read_body(request, self._limits, "webrtc")
        except web.HTTPRequestEntityTooLarge:
            raise too_large from None
        except (ConnectionError, ClientPayloadError):
            # The client went away mid-body: answered (if anyone still listens) as its fault, not logged
            # as a handler failure with a traceback per bad client.
            raise web.HTTPBadRequest(
                text="the body ended before its Content-Length; send the whole offer\n"
            ) from None
        try:
            sdp = body.decode("utf-8")
        except UnicodeDecodeError:
            raise web.HTTPBadRequest(text="the body is not UTF-8 text; send an SDP offer\n") from None
        problem = _offer_problem(sdp, kind)
        if problem is not None:
            raise web.HTTPBadRequest(text=problem + "\n")
        return sdp

    def _check_room(self, kind: _Kind, stream: str) -> None:
        """503 with Retry-After past ``max_sessions`` in all or ``max_players`` on one stream: each session
        is a peer connection, sockets and (for a player) an encoder; unbounded, they exhaust the box."""
        retry = {"Retry-After": str(_RETRY_AFTER_S)}
        if len(self._sessions) >= self._max_sessions:
            raise web.HTTPServiceUnavailable(
                headers=retry,
                text=f"{len(self._sessions)} WebRTC sessions are open (webrtc.max_sessions); retry later\n",
            )
        played = stream.removesuffix(ORIGINAL_SUFFIX)
        players = sum(
            1
            for s in self._sessions.values()
            if s.kind == "whep" and s.stream.removesuffix(ORIGINAL_SUFFIX) == played
        )
        if kind == "whep" and players >= self._max_players:
            raise web.HTTPServiceUnavailable(
                headers=retry,
                text=f"stream {played!r} has {players} players, its original's counted "
                "(webrtc.max_players); retry later, or fan out through a relay (MediaMTX, go2rtc)\n",
            )

    def _open_session(self, kind: _Kind, stream: str) -> _Session:
        pc = RTCPeerConnection(rtc_configuration(ice_servers=self._ice_servers))
        session = _Session(secrets.token_urlsafe(16), kind, stream, pc)
        self._sessions[session.id] = session
        session.timer = asyncio.get_running_loop().call_later(self._connect_timeout, self._expire, session)

        @session.pc.on("connectionstatechange")
        def changed() -> None:
            state = session.pc.connectionState
            if state == "connected" and session.timer is not None:
                session.timer.cancel()
            elif state in ("failed", "closed"):
                self._end_soon(session)

        return session

    def _expire(self, session: _Session) -> None:
        if session.pc.connectionState != "connected":
            log.info("%s session %s on %s did not connect in time", session.kind, session.id, session.stream)
            self._end_soon(session)

    def _end_soon(self, session: _Session) -> None:
        """End a session from a callback; the task is kept until done so it is neither lost nor leaked."""
        task = asyncio.get_running_loop().create_task(self._end(session))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _negotiate(
        self, session: _Session, offer: str, direction: Literal["recvonly", "sendonly"], audio: bool
    ) -> tuple[str, RTCRtpTransceiver, RTCRtpTransceiver | None]:
        """Answer ``offer`` with its first video m-line ``direction``, its first audio m-line so too
        where ``audio`` (a player that gets sound, an ingest that keeps it), every other one inactive.

        Any failure ends the session and becomes a 400 carrying aiortc's reason.
        """
        pc = session.pc
        try:
            with restrict_host_addresses(self._ice):
                await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
                transceivers = pc.getTransceivers()
                video = next((t for t in transceivers if t.kind == "video"), None)
                if video is None:
                    raise ValueError("aiortc found no video m-line it can answer")
                sound = next((t for t in transceivers if t.kind == "audio"), None) if audio else None
                if session.sound is not None and sound is None:  # a player that offered no audio
                    session.sound.stop()
                    session.sound = None
                for other in transceivers:
                    other.direction = direction if other is video or other is sound else "inactive"
                if session.track is not None:
                    video.sender.replaceTrack(session.track)
                if sound is not None and session.sound is not None:
                    sound.sender.replaceTrack(session.sound)
                await pc.setLocalDescription(await pc.createAnswer())
        except Exception as exc:  # aiortc reports malformed SDP with many exception types
            await self._end(session)
            reason = _one_line(str(exc) or type(exc).__name__)
            raise web.HTTPBadRequest(text=f"cannot answer the offer: {reason}\n") from None
        return pc.localDescription.sdp, video, sound

    def _created(self, session: _Session, answer: str) -> web.Response:
        video = video_section(answer)
        formats = video_formats(video) if video is not None else []
        chosen = str(formats[0]) if formats else "no video"  # the first format is the one sent
        log.info("%s session %s on stream %s: %s", session.kind.upper(), session.id, session.stream, chosen)
        return web.Response(
            status=201,
            text=answer,
            content_type="application/sdp",
            headers=self._with_links(
                {"Location": f"/{session.kind}/{session.stream}/{session.id}"}, self._links
            ),
        )

    async def _end(self, session: _Session) -> None:
        if session.ended:
            return
        session.ended = True
        if session.timer is not None:
            session.timer.cancel()
        self._sessions.pop(session.id, None)
        if session.kind == "whip" and self._publishers.get(session.stream) is session:
            del self._publishers[session.stream]
            ingest = self._ingests.get(session.stream)
            if ingest is not None and session.attached:
                ingest.detach()
        if session.track is not None:
            session.track.stop()
        if session.sound is not None:
            session.sound.stop()
        await session.pc.close()
        log.info("%s session %s on stream %s ended", session.kind.upper(), session.id, session.stream)
        self._release_soon()

    def _release_soon(self) -> None:
        """Give a session's memory back (its encoder, buffers and peer objects, in reference cycles):
        once, shortly after, for all the sessions a burst of players ends together."""
        self._release_due = True
        if self._releasing is None or self._releasing.done():
            self._releasing = asyncio.get_running_loop().create_task(self._release(), name="webrtc-release")

    async def _release(self) -> None:
        while self._release_due:  # sessions that ended during a collection get one more
            self._release_due = False
            await asyncio.sleep(_RELEASE_AFTER_S)
            await asyncio.to_thread(release_memory)

    async def _end_all(self) -> None:
        await asyncio.gather(*(self._end(s) for s in tuple(self._sessions.values())), *self._ending)
        releasing, self._releasing = self._releasing, None
        if releasing is not None:
            releasing.cancel()
            await asyncio.gather(releasing, return_exceptions=True)

    async def _on_shutdown(self, app: web.Application) -> None:
        await self._end_all()
