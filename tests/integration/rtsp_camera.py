"""A camera with sound for tests: GStreamer's RTSP server playing an mp4 (H.264 + AAC or G.711) at its
own pace, to each client from the start. Debian's interpreter has ``gi``, the venv does not::

    /usr/bin/python3 tests/integration/rtsp_camera.py PORT FILE.mp4|FILE.mov

Serves ``rtsp://127.0.0.1:PORT/cam`` and prints ``ready`` once listening.
"""

from __future__ import annotations

import sys

PAYLOADERS = {"aac": "aacparse ! rtpmp4gpay", "mulaw": "rtppcmupay"}


def main(argv: list[str]) -> int:
    if len(argv) != 4 or not argv[1].isdigit() or argv[3] not in PAYLOADERS:
        print(f"usage: {argv[0]} PORT FILE aac|mulaw", file=sys.stderr)
        return 2
    import gi  # type: ignore[import-not-found]

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer  # type: ignore[import-not-found]

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(argv[1])
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(
        f'( filesrc location="{argv[2]}" ! qtdemux name=d '
        "d.video_0 ! queue ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=-1 "
        f"d.audio_0 ! queue ! {PAYLOADERS[argv[3]]} name=pay1 pt=97 )"
    )
    factory.set_shared(False)
    server.get_mount_points().add_factory("/cam", factory)
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{argv[1]}", file=sys.stderr)
        return 1
    print("ready", flush=True)
    GLib.MainLoop().run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
