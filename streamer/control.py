"""The operations endpoint (aiohttp): probes, metrics, and streams added and removed at run time.

- ``GET /healthz``: 200 while the process serves (liveness).
- ``GET /readyz``: 200 when every stream is live (or ended cleanly), else 503; the body lists each
  stream's state either way (readiness).
- ``GET /metrics``: Prometheus text format.
- ``GET /streams``: JSON status of every stream; ``GET /streams/{id}``: one.
- ``POST /streams``: add a stream (JSON, one item of the config's ``streams:``) -> 201; 400 for a bad
  stream, 409 for a taken id. ``DELETE /streams/{id}``: drain and remove it -> 200 with its summary.

Adding and removing need ``Authorization: Bearer <http.token>`` when a token is set; without one they
are allowed from loopback clients only. Bodies are capped at 64 KiB.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from streamer.config import HttpConfig, stream_config
from streamer.errors import ConfigError, StreamerError, StreamExistsError
from streamer.httpserve import check_bearer, serve
from streamer.pipeline import PipelineReport
from streamer.service import Service
from streamer.webrtc.ice import is_loopback

__all__ = ["ControlServer"]

log = logging.getLogger(__name__)

_MAX_BODY = 64 * 1024


class ControlServer:
    def __init__(self, service: Service, config: HttpConfig) -> None:
        if config.port is None:
            raise ConfigError("http.port is null: the operations endpoint is off; set a port to serve it")
        self.service = service
        self.config = config
        self._port = config.port
        self._runner: web.AppRunner | None = None
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/streams", self._list)
        app.router.add_post("/streams", self._add)
        app.router.add_get("/streams/{id}", self._one)
        app.router.add_delete("/streams/{id}", self._remove)
        self.app = app

    @property
    def url(self) -> str:
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self._port}"

    async def start(self) -> None:
        if self._runner is None:
            self._runner, self._port = await serve(self.app, self.config.host, self._port, "http")
            log.info("operations endpoint on %s (/healthz /readyz /metrics /streams)", self.url)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

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

    async def _one(self, request: web.Request) -> web.Response:
        sid = request.match_info["id"]
        runner = self.service.runners.get(sid)
        if runner is not None:
            return web.json_response(runner.status(time.monotonic()))
        raise _error(web.HTTPNotFound, f"no stream {sid!r}; running: {sorted(self.service.runners)}")

    async def _add(self, request: web.Request) -> web.Response:
        self._authorize(request)
        if request.content_type != "application/json":
            raise _error(web.HTTPUnsupportedMediaType, "send the stream as Content-Type: application/json")
        too_large = web.HTTPRequestEntityTooLarge(
            _MAX_BODY,
            request.content_length or _MAX_BODY + 1,
            text=f"the body is larger than {_MAX_BODY} bytes; one stream's settings are a few hundred\n",
        )
        if request.content_length is not None and request.content_length > _MAX_BODY:
            raise too_large
        try:
            data: Any = json.loads(await request.read())
        except web.HTTPRequestEntityTooLarge:
            raise too_large from None
        except (ValueError, UnicodeDecodeError) as err:
            raise _error(web.HTTPBadRequest, f"the body is not JSON: {err}") from None
        if not isinstance(data, dict):
            raise _error(
                web.HTTPBadRequest, "the body must be a JSON object: one item of the config's streams"
            )
        try:
            runner = await self.service.add(stream_config(data, self.service.config))
        except StreamExistsError as err:
            raise _error(web.HTTPConflict, str(err)) from None
        except StreamerError as err:
            raise _error(web.HTTPBadRequest, str(err)) from None
        log.warning("stream %s: added through the control API", runner.id)
        return web.json_response(
            {"id": runner.id, "location": f"/streams/{runner.id}"},
            status=201,
            headers={"Location": f"/streams/{runner.id}"},
        )

    async def _remove(self, request: web.Request) -> web.Response:
        self._authorize(request)
        sid = request.match_info["id"]
        try:
            result = await self.service.remove(sid)
        except ConfigError as err:
            raise _error(web.HTTPNotFound, str(err)) from None
        body: dict[str, Any] = {"id": sid, "error": None if result.error is None else str(result.error)}
        if result.report is not None:
            body["report"] = _summary(result.report)
        return web.json_response(body)

    def _authorize(self, request: web.Request) -> None:
        if self.config.token is not None:
            check_bearer(request, self.config.token)
            return
        peer = request.remote or ""
        if not is_loopback(peer):
            raise _error(
                web.HTTPForbidden,
                "adding and removing streams from another machine needs http.token; set one and send "
                "'Authorization: Bearer <token>'",
            )


def _error(kind: type[web.HTTPException], reason: str) -> web.HTTPException:
    return kind(text=reason.replace("\n", " ") + "\n")


def _summary(report: PipelineReport) -> dict[str, Any]:
    return {
        "frames_in": report.frames_in,
        "frames_out": report.frames_out,
        "outcomes": report.outcomes,
        "model_calls": report.model_calls,
        "wall_s": round(report.wall_s, 3),
    }
