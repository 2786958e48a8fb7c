"""Binding an aiohttp app to an address, shared by the WHIP/WHEP server and the operations endpoint."""

from __future__ import annotations

import hmac
import socket

from aiohttp import web

from streamer.errors import ConfigError

__all__ = ["check_bearer", "serve"]


async def serve(app: web.Application, host: str, port: int, setting: str) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on host:port (0: any free port); returns the runner to clean up and the bound port.

    Raises ConfigError naming the address and ``setting`` (the config section to change) when the
    address cannot be bound.
    """
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
    await web.SockSite(runner, sock).start()
    return runner, bound


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
