"""The built-in viewer page (publish the browser camera, play a stream and its original) and the live
figures it polls.

The page is one static file shipped with the package and served under a Content-Security-Policy that
lets it talk to this server only; the figures are whatever each playing stream declared, read under the
same token as playing it.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable, Mapping

from aiohttp import web

from streamer.webrtc.access import Access, unknown_stream

__all__ = ["Figures", "Viewer"]

Figures = Callable[[], Mapping[str, object]]
"""What a playing stream shows on the viewer's live line, asked each time the page polls."""

_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; media-src 'self' blob:"
    ),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Viewer:
    """The handlers of ``GET /``, ``GET /view/{stream}`` and ``GET /view/{stream}/figures``."""

    def __init__(self, access: Access) -> None:
        self._access = access
        self._page = importlib.resources.files(__package__).joinpath("viewer.html").read_text("utf-8")
        self._figures: dict[str, Figures] = {}

    def declare_figures(self, name: str, figures: Figures) -> None:
        """What ``GET /view/{name}/figures`` answers while ``name`` plays."""
        self._figures[name] = figures

    def release_figures(self, name: str) -> None:
        """``name`` stopped playing: its figures are a 404 from now on."""
        self._figures.pop(name, None)

    async def page(self, request: web.Request) -> web.Response:
        """The viewer page; it asks for the token itself, so serving it needs none."""
        return web.Response(text=self._page, content_type="text/html", headers=_PAGE_HEADERS)

    async def figures(self, request: web.Request) -> web.Response:
        """The stream's live figures, for the viewer; the same token as playing it."""
        stream = request.match_info["stream"]
        self._access.authorize(request)
        figures = self._figures.get(stream)
        if figures is None:
            raise unknown_stream("stream with figures", stream, self._figures)
        return web.json_response(dict(figures()), headers={"Cache-Control": "no-store"})
