"""docs/operations.md documents every metric and every route the operations endpoint serves."""

from __future__ import annotations

from pathlib import Path

from streamer.config import Config
from streamer.serving.control import ControlServer
from streamer.serving.metrics import METRICS
from streamer.serving.service import Service

DOC = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()


def test_every_metric_is_in_the_operations_doc() -> None:
    missing = [name for name in METRICS if f"`{name}`" not in DOC]
    assert missing == []


def test_every_route_is_in_the_operations_doc() -> None:
    config = Config.model_validate({"http": {"port": 0}})
    routes = {
        f"{route.method} {route.resource.canonical}"  # type: ignore[union-attr]
        for route in ControlServer(Service(config), config.http).app.router.routes()
        if route.method != "HEAD"
    }
    assert routes == {
        "GET /healthz",
        "GET /readyz",
        "GET /metrics",
        "GET /streams",
        "POST /streams",
        "GET /streams/{id}",
        "DELETE /streams/{id}",
        "PATCH /streams/{id}",
    }
    assert all(f"`{route.split()[0]} {route.split()[1]}" in DOC or route in DOC for route in routes)
