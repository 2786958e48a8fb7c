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

This module holds the routes, the streams declared, and the WHIP and WHEP handlers that join a stream to
a session; the rest is in its neighbours: :mod:`~streamer.webrtc.access` (token, CORS, advertised ICE
servers), :mod:`~streamer.webrtc.offers` (what an offer must be), :mod:`~streamer.webrtc.sessions` (the
peer connections, their caps and their end) and :mod:`~streamer.webrtc.viewer` (the page).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence

from aiohttp import web

from streamer.errors import ConfigError
from streamer.media.sdp import video_section
from streamer.serving.httpserve import HttpLimits, serve
from streamer.serving.memory import release_memory
from streamer.webrtc.access import Access, unknown_stream, with_links
from streamer.webrtc.codecs import relabel_h264, shared_h264_offer, video_formats
from streamer.webrtc.ice import IceServer, check_addresses, default_ice_addresses, is_loopback
from streamer.webrtc.jitter import release_on_marker
from streamer.webrtc.lipsync import LipSync, listen
from streamer.webrtc.offers import read_offer
from streamer.webrtc.playback import FrameHub
from streamer.webrtc.sessions import Ingest, Session, Sessions
from streamer.webrtc.shared_h264 import keyframe_on_loss
from streamer.webrtc.viewer import Figures, Viewer

__all__ = ["Ingest", "WebRtcServer"]

log = logging.getLogger(__name__)

_STREAM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_RELEASE_AFTER_S = 2.0
"""How long after a session ends its memory is collected: players leaving together share one collection."""


def _check_exposure(host: str, token: str | None, max_body_bytes: int) -> None:
    """Refuse a server reachable from other machines without a token, and a body cap below an offer."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"webrtc.host is {host!r}, reachable from other machines, but no token is set; set "
            "webrtc.token (clients then send 'Authorization: Bearer <token>') or bind to 127.0.0.1"
        )
    if max_body_bytes < 1024:
        raise ConfigError(f"webrtc.max_body_bytes is {max_body_bytes}; an SDP offer needs at least 1024")


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
        shared_h264: bool = True,
        player_bitrate: int | None = None,
    ) -> None:
        """``shared_h264``: players whose offer takes H.264 share one encode per stream at
        ``player_bitrate`` (None: by the frames' size), ``streamer.webrtc.shared_h264``; the others,
        and all of them where False, get an encoder of their own from aiortc."""
        _check_exposure(host, token, max_body_bytes)
        self._shared_h264 = shared_h264
        self._player_bitrate = player_bitrate
        self._ice_servers = (*(IceServer((url,)) for url in stun_servers), *ice_servers)
        self._access = Access.configure(token, cors_origins, self._ice_servers, advertise_ice_servers)
        self.host = host
        self._port = port
        self._ice = (
            check_addresses(ice_addresses) if ice_addresses is not None else default_ice_addresses(host)
        )
        self._max_body = max_body_bytes
        self._limits = limits or HttpLimits()
        self._publisher_stale = publisher_stale_s
        self._viewer = Viewer(self._access)
        self._ingests: dict[str, Ingest] = {}
        self._hubs: dict[str, FrameHub] = {}
        self._sessions = Sessions(
            ingests=self._ingests,
            ice_servers=self._ice_servers,
            ice_addresses=self._ice,
            connect_timeout_s=connect_timeout_s,
            max_sessions=max_sessions,
            max_players=max_players,
            on_end=self._release_soon,
        )
        self._runner: web.AppRunner | None = None
        self._releasing: asyncio.Task[None] | None = None
        self._release_due = False
        self.app = web.Application(client_max_size=max_body_bytes, middlewares=[self._access.middleware()])
        self.app.on_shutdown.append(self._on_shutdown)
        self.app.add_routes(self._routes())

    def _routes(self) -> list[web.RouteDef]:
        """The viewer's pages, the WHIP and WHEP endpoints, and their sessions' URLs."""
        return [
            web.get("/", self._viewer.page),
            web.get("/view/{stream}", self._viewer.page),
            web.get("/view/{stream}/figures", self._viewer.figures),
            web.post("/whip/{stream}", self._whip),
            web.post("/whep/{stream}", self._whep),
            web.delete("/{kind:whip|whep}/{stream}/{session}", self._delete),
            web.patch("/{kind:whip|whep}/{stream}/{session}", self._patch),
            web.options("/{kind:whip|whep}/{stream}", self._access.options_endpoint),
            web.options("/{kind:whip|whep}/{stream}/{session}", self._access.options_session),
        ]

    @property
    def url(self) -> str:
        """The base URL, with the bound port once started."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    @property
    def serving(self) -> bool:
        """Bound and answering requests: between ``start`` and ``stop``."""
        return self._runner is not None

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
            "advertised in Link headers" if self._access.links else "not advertised",
            ", ".join(self._access.cors.origins) or "none (same origin only)",
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
        session = self._sessions.publisher(stream)
        if session is not None:
            await self._sessions.end(session)

    def declare_playback(self, name: str) -> FrameHub:
        """Make ``name`` playable over WHEP; returns the hub its frames are published to."""
        self._check_id(name, taken=name in self._hubs, what="WHEP stream")
        hub = self._hubs[name] = FrameHub(name, self._player_bitrate)
        return hub

    def declare_figures(self, name: str, figures: Figures) -> None:
        """What ``GET /view/{name}/figures`` answers (the viewer's live line) while ``name`` plays."""
        self._viewer.declare_figures(name, figures)

    async def release_playback(self, name: str) -> None:
        """Stop serving ``name`` and end its players' sessions."""
        self._viewer.release_figures(name)
        hub = self._hubs.pop(name, None)
        if hub is None:
            return
        await self._sessions.end_players(name)
        hub.close()

    def _check_id(self, stream: str, taken: bool, what: str) -> None:
        if not _STREAM_ID.fullmatch(stream):
            raise ConfigError(
                f"stream id {stream!r} is not usable in a URL path; use letters, digits, '_', '.' and '-'"
            )
        if taken:
            raise ConfigError(f"a {what} for stream {stream!r} already exists on this server; use another id")

    # HTTP handlers

    async def _whip(self, request: web.Request) -> web.Response:
        stream = request.match_info["stream"]
        self._access.authorize(request)
        ingest = self._ingests.get(stream)
        if ingest is None:
            raise unknown_stream("WHIP source", stream, self._ingests)
        offer = await read_offer(request, "whip", self._max_body, self._limits)
        await self._free_publisher_slot(stream, ingest)
        self._sessions.check_room("whip", stream)
        session = self._sessions.open("whip", stream)
        relabelled = relabel_h264(offer)  # so aiortc answers every H.264 profile FFmpeg decodes
        answer, video, audio = await self._sessions.answer(
            session, relabelled.sdp, "recvonly", audio=ingest.keep_audio
        )
        ingest = self._ingests.get(stream)
        if ingest is None or session.ended:  # the source was closed while the offer was being answered
            await self._sessions.end(session)
            raise unknown_stream("WHIP source", stream, self._ingests)
        release_on_marker(video.receiver)  # each frame decoded on its last packet, not the next's first
        sync = LipSync()
        listen(video.receiver, sync.video)
        if audio is not None:
            listen(audio.receiver, sync.audio)
        ingest.attach(video.receiver.track, None if audio is None else audio.receiver.track, sync)
        session.attached = True
        return self._created(session, relabelled.answer(answer))

    async def _free_publisher_slot(self, stream: str, ingest: Ingest) -> None:
        """End the session holding ``stream``'s publisher slot where a newer publisher may replace it:
        one that never connected, or one connected that has sent no video for ``publisher_stale_s``;
        409 while the holder is connected and sending."""
        held = self._sessions.publisher(stream)
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
                await self._sessions.end(held)
                held = None
        if held is not None and held.pc.connectionState == "connected":
            raise web.HTTPConflict(
                text=f"stream {stream!r} already has a publisher sending video; it must leave (DELETE its "
                f"session URL), or send nothing for {self._publisher_stale:g} s (webrtc.publisher_stale_s)\n"
            )
        if held is not None:  # an offer that never connected holds no slot against a newer publisher
            log.info("WHIP session %s on %s replaced before it connected", held.id, stream)
            await self._sessions.end(held)

    async def _whep(self, request: web.Request) -> web.Response:
        stream = request.match_info["stream"]
        self._access.authorize(request)
        hub = self._hubs.get(stream)
        if hub is None:
            raise unknown_stream("WHEP stream", stream, self._hubs)
        offer = await read_offer(request, "whep", self._max_body, self._limits)
        self._sessions.check_room("whep", stream)
        shared = shared_h264_offer(offer) if self._shared_h264 else None  # chosen once per player
        session = self._sessions.open("whep", stream)
        session.track = hub.subscribe() if shared is None else hub.subscribe_h264()
        if hub.carries_audio:
            session.sound = hub.subscribe_audio()
        answer, video, _ = await self._sessions.answer(
            session, offer if shared is None else shared, "sendonly", audio=session.sound is not None
        )
        if session.ended:  # the stream was released while the offer was being answered
            raise unknown_stream("WHEP stream", stream, self._hubs)
        if shared is not None:  # its sender has no encoder of its own to make a keyframe
            keyframe_on_loss(video.sender, hub.shared.request_keyframe)
        return self._created(session, answer)

    async def _delete(self, request: web.Request) -> web.Response:
        session = self._session_of(request)
        await self._sessions.end(session)
        return web.Response(text="session ended\n")

    async def _patch(self, request: web.Request) -> web.Response:
        self._session_of(request)
        raise web.HTTPMethodNotAllowed(
            "PATCH",
            ["DELETE"],
            text="trickle ICE is not supported; send the offer once ICE gathering is complete\n",
        )

    # helpers

    def _session_of(self, request: web.Request) -> Session:
        self._access.authorize(request)
        kind, stream, sid = (request.match_info[k] for k in ("kind", "stream", "session"))
        return self._sessions.find(kind, stream, sid)

    def _created(self, session: Session, answer: str) -> web.Response:
        video = video_section(answer)
        formats = video_formats(video) if video is not None else []
        chosen = str(formats[0]) if formats else "no video"  # the first format is the one sent
        log.info("%s session %s on stream %s: %s", session.kind.upper(), session.id, session.stream, chosen)
        return web.Response(
            status=201,
            text=answer,
            content_type="application/sdp",
            headers=with_links(
                {"Location": f"/{session.kind}/{session.stream}/{session.id}"}, self._access.links
            ),
        )

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
        await self._sessions.end_all()
        releasing, self._releasing = self._releasing, None
        if releasing is not None:
            releasing.cancel()
            await asyncio.gather(releasing, return_exceptions=True)

    async def _on_shutdown(self, app: web.Application) -> None:
        await self._end_all()
