"""The operations endpoint (aiohttp): probes, metrics, and streams added and removed at run time.

- ``GET /healthz``: 200 while the process serves (liveness).
- ``GET /readyz``: 200 when every stream is live (or ended cleanly), else 503; the body lists each
  stream's state either way (readiness).
- ``GET /metrics``: Prometheus text format.
- ``GET /streams``: JSON status of every stream; ``GET /streams/{id}``: one.
- ``POST /streams``: add a stream (JSON, one item of the config's ``streams:``) -> 201; 400 for a bad
  stream, 409 for a taken id. ``DELETE /streams/{id}``: drain and remove it -> 200 with its summary.
- ``PATCH /streams/{id}``: change a running stream's ``strength`` (JSON ``{"strength": 12}`` or
  ``"auto"``) without a restart -> 200 with its status; 400 for anything else.

With ``http.token`` set, every route needs ``Authorization: Bearer <token>`` (the probes too when
``http.public_probes`` is false); ``http.read_token`` opens the GET routes only, for monitoring. Without a
token, reads are open and adding and removing are allowed from loopback clients only, and only while
``http.trust_loopback`` holds. A stream added here may use files only under ``http.media_roots`` and
``http.model_roots`` (:mod:`streamer.serving.confine`); at most ``http.max_streams`` run at once. Bodies are
capped at 64 KiB and must arrive within ``http.body_timeout_s``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import TypeAdapter, ValidationError

from streamer.app import build_http_limits
from streamer.config import HttpConfig, Strength, stream_config
from streamer.engine.pipeline import PipelineReport
from streamer.errors import (
    AccessError,
    BudgetError,
    ConfigError,
    LimitError,
    OutputTakenError,
    StreamerError,
    StreamExistsError,
)
from streamer.redact import escape_control, redact_text
from streamer.serving.confine import ApiPolicy
from streamer.serving.httpserve import check_bearer, read_body, serve
from streamer.serving.service import Service
from streamer.serving.stream_runner import StreamRunner
from streamer.webrtc.ice import is_loopback

__all__ = ["ControlServer"]

log = logging.getLogger(__name__)

_MAX_BODY = 64 * 1024
_STRENGTH: TypeAdapter[Strength] = TypeAdapter(Strength)
"""``model.strength``'s values, as PATCH /streams/{id} takes them."""
_OPEN, _READ, _CONTROL = "open", "read", "control"
"""Route access: anyone; a read or control token where one is set; the control token (or trusted loopback)."""

_Handler = Callable[[web.Request], Awaitable[web.Response]]


class ControlServer:
    def __init__(self, service: Service, config: HttpConfig) -> None:
        if config.port is None:
            raise ConfigError("http.port is null: the operations endpoint is off; set a port to serve it")
        self.service = service
        self.config = config
        self._port = config.port
        self._runner: web.AppRunner | None = None
        self.policy = ApiPolicy.from_config(config, service.config.rtsp_hosts())
        app = web.Application(client_max_size=_MAX_BODY)
        probe = _READ if not config.public_probes else _OPEN
        for method, path, handler, access in (
            ("GET", "/healthz", self._healthz, probe),
            ("GET", "/readyz", self._readyz, probe),
            ("GET", "/metrics", self._metrics, _READ),
            ("GET", "/streams", self._list, _READ),
            ("POST", "/streams", self._add, _CONTROL),
            ("GET", "/streams/{id}", self._one, _READ),
            ("DELETE", "/streams/{id}", self._remove, _CONTROL),
            ("PATCH", "/streams/{id}", self._change, _CONTROL),
        ):
            app.router.add_route(method, path, self._guarded(handler, access))
        self.app = app

    @property
    def url(self) -> str:
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self._port}"

    async def start(self) -> None:
        if self._runner is None:
            self._runner, self._port = await serve(
                self.app, self.config.host, self._port, "http", build_http_limits(self.config)
            )
            log.info("operations endpoint on %s (/healthz /readyz /metrics /streams)", self.url)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def _guarded(self, handler: _Handler, access: str) -> _Handler:
        """``handler`` behind the route's access rule, checked before anything else runs."""

        async def guarded(request: web.Request) -> web.Response:
            self._authorize(request, access)
            return await handler(request)

        return guarded

    def _authorize(self, request: web.Request, access: str) -> None:
        token, read_token = self.config.token, self.config.read_token
        if access == _OPEN:
            return
        if access == _READ:
            tokens = [t for t in (token, read_token) if t is not None]
            if tokens:
                check_bearer(request, *tokens)
            return
        if token is not None:
            check_bearer(request, token)
            return
        if not self.config.trusts_loopback() or not is_loopback(request.remote or ""):
            raise _error(
                web.HTTPForbidden,
                "adding and removing streams needs http.token here (only loopback clients of a loopback "
                "bind are trusted without one); set one and send 'Authorization: Bearer <token>'",
            )

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "streams": len(self.service.runners)})

    async def _readyz(self, request: web.Request) -> web.Response:
        states = self.service.states()
        ready = bool(states) and all(s.ready for s in states.values())
        body = {"ready": ready, "streams": {sid: s.value for sid, s in states.items()}}
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.service.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _list(self, request: web.Request) -> web.Response:
        return web.json_response({"streams": self.service.statuses()})

    def _stream(self, request: web.Request) -> StreamRunner:
        """The running stream the path names; 404 naming the streams there are."""
        sid = request.match_info["id"]
        runner = self.service.runners.get(sid)
        if runner is None:
            raise _error(web.HTTPNotFound, f"no stream {sid!r}; running: {sorted(self.service.runners)}")
        return runner

    async def _one(self, request: web.Request) -> web.Response:
        return web.json_response(self._stream(request).status(time.monotonic()))

    async def _change(self, request: web.Request) -> web.Response:
        """Settings a running stream takes without a restart: ``strength`` (a number or "auto")."""
        runner = self._stream(request)
        data = await self._json_body(request, "the change")
        unknown = sorted(set(data) - {"strength"})
        if unknown or not data:
            raise _error(
                web.HTTPBadRequest,
                f"a running stream changes only 'strength' (a noise sigma 0..255 or \"auto\"); got keys "
                f"{unknown or sorted(data)}",
            )
        try:
            strength = _STRENGTH.validate_python(data["strength"])
        except ValidationError as err:
            first = err.errors()[0]
            raise _error(
                web.HTTPBadRequest, f'strength: {first["msg"]}; give a number 0..255 or "auto"'
            ) from None
        runner.pipeline.strength = strength
        log.info("stream %s: strength set to %s through the control API", runner.id, strength)
        return web.json_response(runner.status(time.monotonic()))

    async def _json_body(self, request: web.Request, what: str) -> dict[str, Any]:
        """The request's JSON object, bounded in size and time; one-line 4xx errors otherwise."""
        if request.content_type != "application/json":
            raise _error(web.HTTPUnsupportedMediaType, f"send {what} as Content-Type: application/json")
        too_large = web.HTTPRequestEntityTooLarge(
            _MAX_BODY,
            request.content_length or _MAX_BODY + 1,
            text=f"the body is larger than {_MAX_BODY} bytes; one stream's settings are a few hundred\n",
        )
        if request.content_length is not None and request.content_length > _MAX_BODY:
            raise too_large
        try:
            data: Any = json.loads(await read_body(request, build_http_limits(self.config), "http"))
        except web.HTTPRequestEntityTooLarge:
            raise too_large from None
        except ConnectionError:
            log.info("a client hung up while sending a stream to add")
            raise _error(web.HTTPBadRequest, "the connection closed before the body ended") from None
        except (ValueError, UnicodeDecodeError) as err:
            raise _error(web.HTTPBadRequest, f"the body is not JSON: {err}") from None
        if not isinstance(data, dict):
            raise _error(web.HTTPBadRequest, f"the body must be a JSON object: {what}")
        return data

    async def _add(self, request: web.Request) -> web.Response:
        data = await self._json_body(request, "the stream, one item of the config's streams,")
        try:
            stream = stream_config(data, self.service.config)
            self.service.check_free(stream)
            self.policy.check(stream, data)
            runner = await self.service.add(self.policy.bounded(stream))
        except (StreamExistsError, OutputTakenError) as err:
            raise _error(web.HTTPConflict, str(err)) from None
        except AccessError as err:
            raise _error(web.HTTPForbidden, str(err)) from None
        except BudgetError as err:
            raise _error(web.HTTPServiceUnavailable, str(err)) from None
        except LimitError as err:
            raise _error(web.HTTPTooManyRequests, str(err)) from None
        except StreamerError as err:
            raise _error(web.HTTPBadRequest, str(err)) from None
        log.warning("stream %s: added through the control API", runner.id)
        return web.json_response(
            {"id": runner.id, "location": f"/streams/{runner.id}"},
            status=201,
            headers={"Location": f"/streams/{runner.id}"},
        )

    async def _remove(self, request: web.Request) -> web.Response:
        sid = request.match_info["id"]
        try:
            result = await self.service.remove(sid)
        except ConfigError as err:
            raise _error(web.HTTPNotFound, str(err)) from None
        body: dict[str, Any] = {
            "id": sid,
            "error": None if result.error is None else redact_text(str(result.error)),
        }
        if result.report is not None:
            body["report"] = _summary(result.report)
        return web.json_response(body)


def _error(kind: type[web.HTTPException], reason: str) -> web.HTTPException:
    """One line: credentials masked and control characters escaped, whatever the request put in it."""
    return kind(text=escape_control(redact_text(reason)) + "\n")


def _summary(report: PipelineReport) -> dict[str, Any]:
    return {
        "frames_in": report.frames_in,
        "frames_out": report.frames_out,
        "outcomes": report.outcomes,
        "model_calls": report.model_calls,
        "wall_s": round(report.wall_s, 3),
    }
