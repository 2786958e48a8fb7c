"""The server's WebRTC sessions: a peer connection per WHIP publisher or WHEP player, with caps and an end.

Every session is a peer connection, its sockets and (for a player) an encoder, so each is counted: at
most ``max_sessions`` are open, ``max_players`` of them players of one stream (its original counted
with it), and a stream has one publisher slot. A session ends on DELETE, when its connection fails or
closes, when it has not connected within the connect timeout, or when the server stops; ending stops its
tracks, closes its peer, frees its place and tells the ingest its publisher left.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from aiohttp import web
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpTransceiver, RTCSessionDescription

from streamer.webrtc.ice import IceServer, restrict_host_addresses, rtc_configuration
from streamer.webrtc.lipsync import LipSync
from streamer.webrtc.offers import Kind, one_line
from streamer.webrtc.playback import ORIGINAL_SUFFIX, PlayerAudioTrack, PlayerTrack
from streamer.webrtc.shared_h264 import PacketTrack

__all__ = ["Ingest", "Session", "Sessions"]

log = logging.getLogger(__name__)

_RETRY_AFTER_S = 5
"""Retry-After of a session refused at a cap: players come and go within seconds."""


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
class Session:
    """One publisher's or player's peer connection, and what ending it must stop."""

    id: str
    kind: Kind
    stream: str
    pc: RTCPeerConnection
    track: PlayerTrack | PacketTrack | None = None
    sound: PlayerAudioTrack | None = None
    """A WHEP player's audio track, where the stream carries the source's audio."""
    timer: asyncio.TimerHandle | None = None
    opened: float = field(default_factory=time.monotonic)
    attached: bool = False
    """A WHIP session whose track the ingest took, and so must be told when it ends."""
    ended: bool = False


class Sessions:
    """The open sessions of one server, by id, and each stream's publisher.

    ``ingests`` is the server's table of declared ingests (read only: a publisher that leaves detaches
    from the one still declared for its stream); ``on_end`` is called once each ended session's peer is
    closed, so the server can give its memory back.
    """

    def __init__(
        self,
        *,
        ingests: Mapping[str, Ingest],
        ice_servers: Sequence[IceServer],
        ice_addresses: Sequence[str] | None,
        connect_timeout_s: float,
        max_sessions: int,
        max_players: int,
        on_end: Callable[[], None],
    ) -> None:
        self._ingests = ingests
        self._ice_servers = ice_servers
        self._ice = ice_addresses
        self._connect_timeout = connect_timeout_s
        self._max_sessions = max_sessions
        self._max_players = max_players
        self._on_end = on_end
        self._sessions: dict[str, Session] = {}
        self._publishers: dict[str, Session] = {}
        self._ending: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    def publisher(self, stream: str) -> Session | None:
        """The WHIP session holding ``stream``'s publisher slot, connected or not yet."""
        return self._publishers.get(stream)

    def find(self, kind: str, stream: str, sid: str) -> Session:
        """The ``kind`` session ``sid`` on ``stream``; a 404 when there is none such."""
        session = self._sessions.get(sid)
        if session is None or session.kind != kind or session.stream != stream:
            raise web.HTTPNotFound(text=f"no {kind.upper()} session {sid!r} on stream {stream!r}\n")
        return session

    def check_room(self, kind: Kind, stream: str) -> None:
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

    def open(self, kind: Kind, stream: str) -> Session:
        """A new session with its peer connection, ended unless it connects within the connect timeout;
        a WHIP session takes its stream's publisher slot."""
        pc = RTCPeerConnection(rtc_configuration(ice_servers=self._ice_servers))
        session = Session(secrets.token_urlsafe(16), kind, stream, pc)
        self._sessions[session.id] = session
        if kind == "whip":
            self._publishers[stream] = session
        session.timer = asyncio.get_running_loop().call_later(self._connect_timeout, self._expire, session)

        @session.pc.on("connectionstatechange")
        def changed() -> None:
            state = session.pc.connectionState
            if state == "connected" and session.timer is not None:
                session.timer.cancel()
            elif state in ("failed", "closed"):
                self._end_soon(session)

        return session

    async def answer(
        self, session: Session, offer: str, direction: Literal["recvonly", "sendonly"], audio: bool
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
            await self.end(session)
            reason = one_line(str(exc) or type(exc).__name__)
            raise web.HTTPBadRequest(text=f"cannot answer the offer: {reason}\n") from None
        return pc.localDescription.sdp, video, sound

    async def end(self, session: Session) -> None:
        """Stop the session's tracks, close its peer and free its place; once, however often called."""
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
        self._on_end()

    async def end_players(self, stream: str) -> None:
        """End every WHEP session playing ``stream``."""
        await asyncio.gather(
            *(self.end(s) for s in tuple(self._sessions.values()) if s.kind == "whep" and s.stream == stream)
        )

    async def end_all(self) -> None:
        """End every session, and wait for those already ending."""
        await asyncio.gather(*(self.end(s) for s in tuple(self._sessions.values())), *self._ending)

    def _expire(self, session: Session) -> None:
        if session.pc.connectionState != "connected":
            log.info("%s session %s on %s did not connect in time", session.kind, session.id, session.stream)
            self._end_soon(session)

    def _end_soon(self, session: Session) -> None:
        """End a session from a callback; the task is kept until done so it is neither lost nor leaked."""
        task = asyncio.get_running_loop().create_task(self.end(session))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)
