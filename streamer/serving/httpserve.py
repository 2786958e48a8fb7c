"""Binding an aiohttp app to an address, shared by the WHIP/WHEP server and the operations endpoint,
with every connection timed and capped (:class:`HttpLimits`).

aiohttp reads a request's headers for as long as the client likes (a client that sends half a request
line and stops holds its socket until the idle timeout), takes connections without a cap, and logs a
traceback for each malformed request. Here each connection has until ``header_timeout_s`` to finish its
first request's headers (then 408), a body gets ``body_timeout_s`` (:func:`read_body`, 408), an idle
keep-alive connection is closed after ``idle_timeout_s``, a request line or a header over its size gets
414 or 431, and a connection past ``max_connections`` gets 503: each in one log line, and log lines for
refusals are rate-limited so a flood cannot fill the disk.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import logging
import re
import socket
import time
from dataclasses import dataclass
from http import HTTPStatus

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong

from streamer.errors import ConfigError
from streamer.redact import escape_control

__all__ = ["HttpLimits", "check_bearer", "read_body", "serve"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one HTTP connection may take of the process: time, sizes, and the number of connections."""

    header_timeout_s: float = 10.0
    """From the connection's open until its first request's headers have arrived; then 408, closed."""
    body_timeout_s: float = 10.0
    """For a request body to arrive once its headers have (:func:`read_body`); then 408."""
    idle_timeout_s: float = 30.0
    """A keep-alive connection with no request (or a request's headers unfinished) this long is closed."""
    max_request_line: int = 8190
    """Bytes of the request line (method, path, version); longer: 414."""
    max_header_bytes: int = 8190
    """Bytes of one header line; longer: 431."""
    max_headers: int = 64
    """Header lines in a request; more: 431."""
    max_connections: int = 256
    """Connections open at once; one more is answered 503 and closed."""
    max_connections_per_client: int = 32
    """Connections open at once from one client address; one more is answered 503 and closed, so one
    client cannot take every connection from the others (a kubelet's probe among them)."""

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} is {getattr(self, name)}; give a time in seconds above 0")
        names = ("max_request_line", "max_header_bytes", "max_headers", "max_connections")
        for name in (*names, "max_connections_per_client"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} is {getattr(self, name)}; give at least 1")


class _Refusals:
    """One log line per refused request, at most ``burst`` in each ``period_s``; the rest are counted and
    the count is said on the next line that is written."""

    def __init__(self, setting: str, burst: int = 20, period_s: float = 10.0) -> None:
        self._setting = setting
        self._burst, self._period = burst, period_s
        self._window_start = -period_s
        self._written = 0
        self._quiet = 0

    def say(self, status: int, peer: str, reason: str) -> None:
        now = time.monotonic()
        if now - self._window_start >= self._period:
            self._window_start, self._written = now, 0
        if self._written >= self._burst:
            self._quiet += 1
            return
        self._written += 1
        more = f" ({self._quiet} more refusals not logged)" if self._quiet else ""
        self._quiet = 0
        log.warning(
            "%s server: %d %s to %s: %s%s",
            self._setting,
            status,
            HTTPStatus(status).phrase,
            peer,
            escape_control(reason)[:200],
            more,
        )


_REFUSALS: dict[str, _Refusals] = {}


def _refusals(setting: str) -> _Refusals:
    """The log of refusals of the server configured under ``setting``, one per process."""
    return _REFUSALS.setdefault(setting, _Refusals(setting))


def _raw_response(status: int, text: str) -> bytes:
    body = text.encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nConnection: close\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
    )
    if status == HTTPStatus.SERVICE_UNAVAILABLE:
        head += "Retry-After: 5\r\n"
    return head.encode() + b"\r\n" + body


def _parse_refusal(
    exc: BaseException | None, status: int, limits: HttpLimits, setting: str
) -> tuple[int, str]:
    """The status and one-line reason for a request aiohttp's parser refused."""
    text = exc.message if isinstance(exc, HttpProcessingError) else str(exc or HTTPStatus(status).phrase)
    if isinstance(exc, LineTooLong):
        # The C parser reports the request line's target as a bytearray, a header as bytes; the Python
        # parser gives the line's start, a method for the request line.
        line = exc.args[0] if exc.args else b""
        if isinstance(line, bytearray) or _REQUEST_LINE.match(
            bytes(line) if isinstance(line, bytes) else b""
        ):
            return 414, f"request line over {limits.max_request_line} bytes ({setting}.max_request_line)"
        return 431, f"a header line over {limits.max_header_bytes} bytes ({setting}.max_header_bytes)"
    if isinstance(exc, BadHttpMessage) and "too many headers" in text.lower():
        return 431, f"more than {limits.max_headers} header lines ({setting}.max_headers)"
    if isinstance(exc, HttpProcessingError):
        return exc.code or status, f"malformed request: {text}"
    return status, text


_LINGER_S = 1.0
"""After answering a request whose body was not read (401, 408), how long the rest is read and dropped
before the connection closes, so the client sees the answer rather than a reset."""

_REQUEST_LINE = re.compile(rb"[A-Z]+ \S")


class _GuardedHandler(web.RequestHandler):
    """aiohttp's connection handler with the connection cap, the header deadline and one-line refusals."""

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        limits: HttpLimits,
        setting: str,
        refusals: _Refusals,
        clients: collections.Counter[str],
    ) -> None:
        super().__init__(
            manager,
            loop=loop,
            access_log=None,  # type: ignore[arg-type]  # None switches aiohttp's access log off
            keepalive_timeout=limits.idle_timeout_s,
            max_line_size=limits.max_request_line,
            max_field_size=limits.max_header_bytes,
            max_headers=limits.max_headers,
            lingering_time=_LINGER_S,
        )
        self._limits = limits
        self._setting = setting
        self._refusals = refusals
        self._clients = clients
        """Connections open per client address, shared by the site's connections."""
        self._client: str | None = None
        self._over_cap: str | None = None
        """Why this connection is past a cap: it is answered 503 and closed."""
        self._header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._client = _peer(transport)
        self._clients[self._client] += 1
        manager, limits = self._manager, self._limits
        over = None
        if manager is not None and len(manager.connections) > limits.max_connections:
            over = f"{limits.max_connections} connections open ({self._setting}.max_connections)"
        elif self._clients[self._client] > limits.max_connections_per_client:
            over = (
                f"{limits.max_connections_per_client} connections open from this client "
                f"({self._setting}.max_connections_per_client)"
            )
        if over is not None:
            # Answered once its request is in (read, so closing sends the answer rather than a reset),
            # or after a moment without one.
            self._over_cap = f"{over}; try again later"
            self._header_deadline = self._loop.call_later(_LINGER_S, self._refuse, 503, self._over_cap)
            return
        # The header deadline stands in for aiohttp's idle timer until the first request is in, so a
        # client that stops mid-headers hears 408 rather than a silent close; aiohttp arms its own again
        # after each response.
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
            self._keepalive_handle = None
        self._header_deadline = self._loop.call_later(self._limits.header_timeout_s, self._headers_late)

    def data_received(self, data: bytes) -> None:
        if self._over_cap is not None:
            self._stop_deadline()
            self._refuse(503, self._over_cap)
            return
        super().data_received(data)
        if self._header_deadline is not None and self._request_count:  # a request's headers are in
            self._stop_deadline()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_deadline()
        if self._client is not None:
            self._clients[self._client] -= 1
            if not self._clients[self._client]:
                del self._clients[self._client]
            self._client = None
        super().connection_lost(exc)

    def _stop_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        self._refuse(
            408,
            f"request headers not complete within {self._limits.header_timeout_s:g} s "
            f"({self._setting}.header_timeout_s)",
        )

    def _refuse(self, status: int, reason: str) -> None:
        """Answer ``status`` with ``reason`` on the raw connection, close it, and say so once."""
        self._header_deadline = None
        transport = self.transport
        if transport is None:  # already closed
            return
        peer = _peer(transport)
        self._refusals.say(status, peer, reason)
        if not transport.is_closing():
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(_raw_response(status, reason + "\n"))
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        status, reason = _parse_refusal(exc, status, self._limits, self._setting)
        self._refusals.say(status, request.remote or "?", reason)
        response = web.Response(status=status, text=reason + "\n")
        response.force_close()
        return response


def _peer(transport: asyncio.BaseTransport | None) -> str:
    peer = None if transport is None else transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"


class _GuardedSite(web.SockSite):
    """A listening socket whose connections are :class:`_GuardedHandler`'s."""

    def __init__(self, runner: web.AppRunner, sock: socket.socket, limits: HttpLimits, setting: str) -> None:
        super().__init__(runner, sock)
        self._limits = limits
        self._setting = setting

    async def start(self) -> None:
        await super(web.SockSite, self).start()  # registers the site with its runner
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        refusals = _refusals(self._setting)
        clients: collections.Counter[str] = collections.Counter()

        def connection() -> _GuardedHandler:
            return _GuardedHandler(
                server,
                loop=loop,
                limits=self._limits,
                setting=self._setting,
                refusals=refusals,
                clients=clients,
            )

        self._server = await loop.create_server(connection, sock=self._sock, backlog=self._backlog)


async def serve(
    app: web.Application, host: str, port: int, setting: str, limits: HttpLimits | None = None
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on host:port (0: any free port) within ``limits``; returns the runner to clean up and
    the bound port.

    Raises ConfigError naming the address and ``setting`` (the config section to change) when the
    address cannot be bound.
    """
    limits = limits or HttpLimits()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); choose another {setting}.port or "
            f"{setting}.host"
        ) from None
    bound = int(sock.getsockname()[1])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await _GuardedSite(runner, sock, limits, setting).start()
    return runner, bound


async def read_body(request: web.Request, limits: HttpLimits, setting: str) -> bytes:
    """The request's body, which must arrive within ``limits.body_timeout_s`` (else 408, naming
    ``setting``'s key); a body over the app's ``client_max_size`` raises aiohttp's 413 as ``read`` does."""
    try:
        return await asyncio.wait_for(request.read(), limits.body_timeout_s)
    except TimeoutError:
        reason = f"the body did not arrive within {limits.body_timeout_s:g} s ({setting}.body_timeout_s)"
        _refusals(setting).say(408, request.remote or "?", reason)
        raise web.HTTPRequestTimeout(text=reason + "\n", headers={"Connection": "close"}) from None
    except web.HTTPRequestEntityTooLarge as too_large:
        _refusals(setting).say(413, request.remote or "?", too_large.text or "body too large")
        raise


def check_bearer(request: web.Request, token: str, *others: str) -> None:
    """Raises 401 with a one-line reason unless the request carries ``Authorization: Bearer <t>`` for
    ``token`` or one of ``others``."""
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    given = credentials.strip().encode()
    matches = [hmac.compare_digest(given, t.encode()) for t in (token, *others)]  # each compared in full
    if scheme.lower() == "bearer" and any(matches):
        return
    error = ', error="invalid_token"' if scheme else ""
    raise web.HTTPUnauthorized(
        headers={"WWW-Authenticate": f'Bearer realm="streamer"{error}'},
        text="missing or wrong bearer token; send 'Authorization: Bearer <token>'\n",
    )
