"""An RTSP server of FFmpeg's own (``rtsp_flags=listen``), for tests of what the project publishes.

It takes one publisher (ANNOUNCE/RECORD) and copies every track it receives, packet for packet, into a
Matroska file: a reader independent of the project's RTSP client. Run as a process of its own::

    python tests/integration/rtsp_recorder.py URL OUT.mkv [TIMEOUT_S]

It prints ``tracks video:h264 audio:aac`` once the publisher's session is described, and exits when
the publisher tears the session down (or after TIMEOUT_S without one, 60 by default).
"""

from __future__ import annotations

import sys

import av


def record(url: str, out: str, timeout_s: int) -> int:
    options = {"rtsp_flags": "listen", "listen_timeout": str(timeout_s), "rtsp_transport": "tcp"}
    with av.open(url, options=options, timeout=float(timeout_s)) as source, av.open(out, "w") as sink:
        tracks = list(source.streams.video) + list(source.streams.audio)
        print("tracks " + " ".join(f"{s.type}:{s.codec_context.name}" for s in tracks), flush=True)
        copies = {s.index: sink.add_stream_from_template(s) for s in tracks}
        unstamped: list[av.Packet] = []
        for packet in source.demux(*tracks):
            if not packet.size:
                continue  # the demuxer's empty last packet
            if packet.dts is None:
                unstamped.append(packet)
                continue
            for back, early in enumerate(reversed(unstamped), 1):
                stamp(early, packet, back)
                early.stream = copies[early.stream_index]
                sink.mux(early)
            unstamped.clear()
            packet.stream = copies[packet.stream_index]
            sink.mux(packet)
    return 0


def stamp(early: av.Packet, after: av.Packet, back: int) -> None:
    """FFmpeg's RTP demuxer leaves a track's first packet unstamped (the publisher's first keyframe):
    time it ``back`` frame periods before the next packet of its track, so the file keeps it."""
    rate = early.stream.guessed_rate or 30
    assert after.dts is not None
    assert after.time_base is not None
    ticks = after.dts * after.time_base - back / rate
    early.time_base = after.time_base
    early.pts = early.dts = round(ticks / after.time_base)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(f"usage: {sys.argv[0]} URL OUT.mkv [TIMEOUT_S]", file=sys.stderr)
        sys.exit(2)
    sys.exit(record(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 60))
