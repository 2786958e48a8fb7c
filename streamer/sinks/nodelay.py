"""Turns Nagle's algorithm off on the TCP connections FFmpeg's RTSP muxer opened to a server.

FFmpeg's RTSP muxer (RECORD over TCP) opens its connection without TCP_NODELAY and offers no option to
set it. A keyframe leaves as several RTP packets in separate writes; Nagle's algorithm holds each one
after the first until the server acknowledges it, and a Linux receiver delays that acknowledgement by up
to 40 ms. So the frame before each keyframe reaches players late, once a keyframe interval, while
every other frame keeps its cadence (``streamer bench keepalive`` through the GStreamer relay shows it).
The muxer's socket is found among the process's descriptors by its peer and switched, as FFmpeg's own
``tcp_nodelay`` option would have done. Linux only (it reads ``/proc/self/fd``); elsewhere a no-op.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["disable_nagle", "rtsp_peer"]

_FDS = Path("/proc/self/fd")
_RTSP_PORTS = {"rtsp": 554, "rtsps": 322}


def rtsp_peer(url: str) -> tuple[str, int] | None:
    """The host and port an ``rtsp://`` or ``rtsps://`` URL connects to; None for anything else."""
    parts = urlsplit(url)
    default = _RTSP_PORTS.get(parts.scheme.lower())
    if default is None or not parts.hostname:
        return None
    try:
        port = parts.port or default
    except ValueError:
        return None
    return parts.hostname, port


def disable_nagle(host: str, port: int) -> int:
    """Sets TCP_NODELAY on every TCP socket of this process connected to ``host``:``port``; returns how
    many. Harmless on a socket that has it already, or on another client's connection to that server."""
    if not _FDS.is_dir():
        return 0
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except OSError:
        return 0
    switched = 0
    for name in os.listdir(_FDS):
        with contextlib.suppress(OSError, ValueError):
            if not stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                continue
            # A duplicate of the descriptor: closing it leaves the muxer's own open, and the option is the
            # socket's, shared by both.
            with socket.socket(fileno=os.dup(int(name))) as sock:
                if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                peer = sock.getpeername()
                if peer[1] == port and peer[0] in addresses:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    switched += 1
    return switched
