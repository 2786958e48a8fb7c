"""What a WHIP or WHEP offer must be, and reading one from a request.

An offer is untrusted text from the network: it is read within the server's body limits, must be UTF-8
SDP with a video m-line going the right way and a DTLS fingerprint, and (for a publisher) a video format
FFmpeg decodes. Anything else is refused here with a 4xx whose one-line text says what to send instead,
before a peer connection is made for it.
"""

from __future__ import annotations

from typing import Literal

from aiohttp import ClientPayloadError, web

from streamer.media.sdp import video_section
from streamer.serving.httpserve import HttpLimits, read_body
from streamer.webrtc.codecs import refusal, video_formats

__all__ = ["Kind", "offer_problem", "one_line", "read_offer"]

Kind = Literal["whip", "whep"]
"""Which side of the server an offer or session is on: a publisher (WHIP) or a player (WHEP)."""

_DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")


def offer_problem(sdp: str, kind: Kind) -> str | None:
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


def one_line(text: str) -> str:
    """``text`` with its whitespace runs as single spaces, fit for a one-line refusal."""
    return " ".join(text.split()) or "no detail"


async def read_offer(request: web.Request, kind: Kind, max_body: int, limits: HttpLimits) -> str:
    """The SDP offer ``request`` carries; 415, 413 or 400 with the reason when it is not a usable one."""
    if request.content_type != "application/sdp":
        raise web.HTTPUnsupportedMediaType(
            text=f"expected Content-Type: application/sdp, got {request.content_type!r}\n"
        )
    too_large = web.HTTPRequestEntityTooLarge(
        max_body,
        request.content_length or max_body + 1,
        text=f"the offer is larger than {max_body} bytes; an SDP offer is a few KiB\n",
    )
    if request.content_length is not None and request.content_length > max_body:
        raise too_large
    try:
        body = await read_body(request, limits, "webrtc")
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
    problem = offer_problem(sdp, kind)
    if problem is not None:
        raise web.HTTPBadRequest(text=problem + "\n")
    return sdp
