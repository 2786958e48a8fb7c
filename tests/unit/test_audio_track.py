"""The audio queue between a demuxer and a sink: what it gives, what it drops, and the counts."""

from __future__ import annotations

import io
from fractions import Fraction

import av
from av.audio.stream import AudioStream

from streamer.media.audio import AudioTrack

TIME_BASE = Fraction(1, 1000)


def packet(ms: int) -> av.Packet:
    p = av.Packet(b"\x00" * 4)
    p.pts = p.dts = ms
    p.time_base = TIME_BASE
    return p


def track(capacity: int = 4) -> AudioTrack:
    stream = av.open(io.BytesIO(), "w", format="nut").add_stream("aac", rate=48000)
    assert isinstance(stream, AudioStream)
    t = AudioTrack(stream, "cam", capacity=capacity)
    t.take(lambda: None)  # past the bound, the tests call drop_over or pop_over themselves
    return t


def test_pop_until_gives_what_starts_by_then_oldest_first() -> None:
    t = track()
    for ms in (0, 20, 40):
        t.put(packet(ms))
    assert [p.pts for p in t.pop_until(Fraction(20, 1000))] == [0, 20]
    stats = t.stats()
    assert (stats.put, stats.got, stats.dropped, stats.depth) == (3, 2, 0, 1)


def test_a_reconnecting_sink_drops_what_it_cannot_send_and_it_is_counted() -> None:
    t = track(capacity=2)
    for ms in (0, 20, 40, 60):
        t.put(packet(ms))
    t.drop_over()
    assert t.stats().dropped == 2
    t.drop_until(Fraction(40, 1000))
    stats = t.stats()
    assert (stats.dropped, stats.got, stats.depth) == (3, 0, 1)
    assert [p.pts for p in t.pop_until(Fraction(1))] == [60]


def test_release_keeps_only_what_starts_before_the_video_ends() -> None:
    t = track()
    for ms in (0, 20, 40):
        t.put(packet(ms))
    assert [p.pts for p in t.release(Fraction(30, 1000))] == [0, 20]
    t.put(packet(60))
    stats = t.stats()
    assert (stats.got, stats.dropped, stats.depth) == (2, 2, 0)


def test_the_tracks_codec_outlives_the_connection_it_came_from() -> None:
    """A reconnecting RTSP source closes the container its stream belongs to; sinks still read it."""
    container = av.open(io.BytesIO(), "w", format="nut")
    stream = container.add_stream("pcm_mulaw", rate=8000, layout="mono")
    assert isinstance(stream, AudioStream)
    t = AudioTrack(stream, "cam")
    container.close()
    assert (t.stream.codec_context.codec.canonical_name, t.stream.sample_rate) == ("pcm_mulaw", 8000)
    assert t.same_codec(t.stream)
