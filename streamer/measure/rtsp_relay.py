"""A small RTSP relay on GStreamer's RTSP server (Debian's packages), for the latency benchmark and tests.

GStreamer's Python bindings (``gi``) live in Debian's system interpreter, not in the venv, so the relay
runs as a process of its own::

    /usr/bin/python3 streamer/measure/rtsp_relay.py PORT [NAME ...]

and this module imports nothing but the standard library at module level: the venv imports it for
:data:`SYSTEM_PYTHON`, :func:`command` and :func:`unavailable`, and only :func:`serve`, run by the
system interpreter, imports ``gi``.

For each NAME (default: ``cam out``) it serves two mounts on 127.0.0.1:PORT, relaying H.264 (H.265 for
a NAME ending in ``_h265``):

- ``/NAME/publish``: RECORD. A client ANNOUNCEs H.264 and RECORDs (PyAV's ``rtsp`` muxer does);
- ``/NAME``: PLAY. Any number of players get what is published on ``/NAME/publish``, each from the next
  keyframe; a player that comes before any publisher waits in DESCRIBE for the first keyframe. When the
  publisher leaves (TEARDOWN), what it sent drains to the players, then they get end of stream (an RTCP
  BYE, which FFmpeg reads as EOF). A publisher that vanishes without TEARDOWN leaves its players waiting.

With :data:`AUTH_ENV` set to ``METHOD:USER:PASSWORD`` (``basic`` or ``digest``), players must give
those credentials by that method (a 401 challenge first, as cameras do), and so must publishers.

It prints ``ready`` once listening, then one line per event to wait on: ``play NAME`` (a player's media is set
up), ``publish NAME`` and ``unpublish NAME``. Three settings keep it reliable: unshared media (shared media
fails to reopen right after a close), a thread pool of 16 (a relay deadlocks the main loop without it; it also
lets one client wait in DESCRIBE without stalling the others), and players kept when a push returns FLUSHING.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["AUTH_ENV", "INSTALL_HINT", "SYSTEM_PYTHON", "command", "serve", "unavailable"]

AUTH_ENV = "STREAMER_RELAY_AUTH"
"""``METHOD:USER:PASSWORD``: the credentials the relay's players must give (tests of a client's
authentication)."""

SYSTEM_PYTHON = "/usr/bin/python3"
"""Debian's interpreter, which has ``gi`` and GstRtspServer once the packages below are installed."""
INSTALL_HINT = (
    "apt-get install --no-install-recommends gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base "
    "gstreamer1.0-plugins-good gstreamer1.0-plugins-bad python3-gi"
)
_PROBE = "import gi; gi.require_version('GstRtspServer', '1.0'); from gi.repository import GstRtspServer"

H264_AU = "video/x-h264,stream-format=byte-stream,alignment=au"
RECORD_LAUNCH = (
    "( rtph264depay name=depay0 ! h264parse config-interval=-1 ! " + H264_AU + " ! "
    "appsink name=sink sync=false emit-signals=true max-buffers=64 )"
)
H265_SUFFIX = "_h265"
"""A NAME ending so relays H.265 rather than H.264."""
# h264parse upstream already puts SPS/PPS before every IDR; rtph264pay's config-interval would add them
# before each slice of it too, and FFmpeg's parser then splits one sliced (zerolatency) frame into two.
PLAY_LAUNCH = (
    "( appsrc name=src is-live=true format=time do-timestamp=true max-bytes=8000000 leaky-type=downstream "
    'caps="' + H264_AU + '" ! h264parse ! rtph264pay name=pay0 pt=96 )'
)


def launches(name: str) -> tuple[str, str]:
    """The RECORD and PLAY launch lines of ``name``: H.264, or H.265 for a name ending in H265_SUFFIX."""
    record, play = RECORD_LAUNCH, PLAY_LAUNCH
    if name.endswith(H265_SUFFIX):
        record, play = record.replace("h264", "h265"), play.replace("h264", "h265")
    return record, play


def command(port: int, names: tuple[str, ...] = ()) -> list[str]:
    """The command line that runs the relay on 127.0.0.1:``port``."""
    return [SYSTEM_PYTHON, str(Path(__file__).resolve()), str(port), *names]


def unavailable() -> str | None:
    """None when the system interpreter imports GstRtspServer, else why not (for a skip message)."""
    try:
        done = subprocess.run([SYSTEM_PYTHON, "-c", _PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{SYSTEM_PYTHON} cannot run: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{SYSTEM_PYTHON} cannot import GstRtspServer ({last})"
    return None


def say(line: str) -> None:
    print(line, flush=True)


class Player:
    """One playing client's appsrc; it starts at a keyframe so its decoder never sees a broken GOP."""

    def __init__(self, appsrc: Any) -> None:
        self.appsrc = appsrc
        self.keyed = False


class Relay:
    """What is published on each name, pushed to that name's players (from GStreamer's threads).

    ``gst`` is the ``Gst`` module, handed in because only :func:`serve` may import it.
    """

    def __init__(self, gst: Any) -> None:
        self.gst = gst
        self.lock = threading.Lock()
        self.players: dict[str, list[Player]] = {}

    def add(self, name: str, player: Player) -> None:
        with self.lock:
            self.players.setdefault(name, []).append(player)

    def remove(self, name: str, player: Player) -> None:
        with self.lock:
            if player in self.players.get(name, []):
                self.players[name].remove(player)

    def push(self, name: str, sample: Any) -> None:
        buffer = sample.get_buffer()
        key = not buffer.has_flags(self.gst.BufferFlags.DELTA_UNIT)
        with self.lock:
            players = list(self.players.get(name, []))
        for player in players:
            if not player.keyed and not key:
                continue
            player.keyed = True
            out = buffer.copy()  # the player's appsrc stamps it with its own running time
            out.pts = out.dts = self.gst.CLOCK_TIME_NONE
            player.appsrc.emit("push-buffer", out)  # FLUSHING before PLAY: keep the player anyway

    def end(self, name: str) -> None:
        with self.lock:
            players = list(self.players.get(name, []))
        for player in players:
            player.appsrc.emit("end-of-stream")


def record_factory(rtsp: Any, relay: Relay, name: str) -> Any:
    """The RECORD mount of ``name``; ``rtsp`` is the ``GstRtspServer`` module."""
    factory = rtsp.RTSPMediaFactory()
    factory.set_launch(launches(name)[0])
    factory.set_transport_mode(rtsp.RTSPTransportMode.RECORD)
    factory.set_shared(False)
    factory.set_latency(0)
    # At TEARDOWN, EOS drains what the publisher sent just before it, so the last frames reach players.
    factory.set_eos_shutdown(True)

    def on_sample(sink: Any) -> Any:
        sample = sink.emit("pull-sample")
        if sample is not None:
            relay.push(name, sample)
        return relay.gst.FlowReturn.OK

    def configure(_factory: Any, media: Any) -> None:
        sink = media.get_element().get_by_name("sink")
        sink.connect("new-sample", on_sample)
        sink.connect("eos", lambda _sink: relay.end(name))
        media.connect("unprepared", lambda _media: say(f"unpublish {name}"))
        say(f"publish {name}")

    factory.connect("media-configure", configure)
    return factory


def play_factory(rtsp: Any, relay: Relay, name: str) -> Any:
    """The PLAY mount of ``name``; ``rtsp`` is the ``GstRtspServer`` module."""
    factory = rtsp.RTSPMediaFactory()
    factory.set_launch(launches(name)[1])
    factory.set_shared(False)
    factory.set_latency(0)

    def configure(_factory: Any, media: Any) -> None:
        player = Player(media.get_element().get_by_name("src"))
        relay.add(name, player)
        media.connect("unprepared", lambda _media: relay.remove(name, player))
        say(f"play {name}")

    factory.connect("media-configure", configure)
    return factory


def require_credentials(
    gst: Any, rtsp: Any, server: Any, factories: list[tuple[Any, Any]], spec: str
) -> None:
    """Every client must authenticate as ``spec`` says (``METHOD:USER:PASSWORD``); ``gst`` and
    ``rtsp`` are the ``Gst`` and ``GstRtspServer`` modules."""
    from gi.repository import GstRtsp  # type: ignore[import-not-found]

    method, user, password = spec.split(":", 2)
    auth = rtsp.RTSPAuth()
    token = rtsp.RTSPToken()
    token.set_string("media.factory.role", "user")
    if method == "digest":
        auth.add_digest(user, password, token)
        auth.set_supported_methods(GstRtsp.RTSPAuthMethod.DIGEST)
    else:
        auth.add_basic(rtsp.RTSPAuth.make_basic(user, password), token)
        auth.set_supported_methods(GstRtsp.RTSPAuthMethod.BASIC)
    role = gst.Structure.new_from_string(
        "user, media.factory.access=(boolean)true, media.factory.construct=(boolean)true"
    )
    for publish, play in factories:
        publish.add_role_from_structure(role)
        play.add_role_from_structure(role)
    server.set_auth(auth)


def serve(argv: list[str]) -> int:
    """The relay's main: listens until killed. Only Debian's system interpreter can run it."""
    if len(argv) < 2 or not argv[1].isdigit():
        print(f"usage: {argv[0]} PORT [NAME ...]", file=sys.stderr)
        return 2
    import gi  # type: ignore[import-not-found]

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    gi.require_version("GstRtsp", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    names = argv[2:] or ["cam", "out"]
    Gst.init(None)
    relay = Relay(Gst)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(argv[1])
    server.get_thread_pool().set_max_threads(16)
    mounts = server.get_mount_points()
    factories = []
    for name in names:
        publish, play = record_factory(GstRtspServer, relay, name), play_factory(GstRtspServer, relay, name)
        mounts.add_factory(f"/{name}/publish", publish)
        mounts.add_factory(f"/{name}", play)
        factories.append((publish, play))
    if os.environ.get(AUTH_ENV):
        require_credentials(Gst, GstRtspServer, server, factories, os.environ[AUTH_ENV])
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{argv[1]}", file=sys.stderr)
        return 1
    say("ready")
    GLib.MainLoop().run()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv))
