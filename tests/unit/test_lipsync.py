"""LipSync: audio timestamps on the video's timeline through sender reports, RTP wrap-around included."""

from __future__ import annotations

from streamer.webrtc.lipsync import LipSync, SenderClock


def ntp(seconds: float) -> int:
    return round(seconds * (1 << 32))


def test_nothing_is_placed_before_both_streams_reported() -> None:
    sync = LipSync()
    assert sync.audio_on_video(1000) is None
    sync.audio.report(ntp(100.0), 5000)
    assert sync.audio_on_video(1000) is None
    sync.video.report(ntp(100.0), 7000)
    assert sync.audio_on_video(5000) == 7000


def test_audio_captured_with_a_frame_lands_on_that_frames_timestamp() -> None:
    sync = LipSync()
    # video reported at wall 50.0 s with 900_000; audio at wall 50.5 s with 123_456
    sync.video.report(ntp(50.0), 900_000)
    sync.audio.report(ntp(50.5), 123_456)
    # the audio sample 0.5 s after its report was captured at wall 51.0 s: video 1.0 s after its report
    assert sync.audio_on_video(123_456 + 24_000) == 900_000 + 90_000
    # and one before its report, at wall 50.25 s
    assert sync.audio_on_video(123_456 - 12_000) == 900_000 + 22_500


def test_timestamps_that_wrapped_are_the_nearer_distance() -> None:
    clock = SenderClock(48_000)
    clock.report(ntp(10.0), (1 << 32) - 480)  # 10 ms before the wrap
    assert clock.wall(480) == 10.02  # 10 ms after it
    assert clock.wall((1 << 32) - 960) == 9.99


def test_the_video_timestamp_follows_on_from_the_reported_value_past_a_wrap() -> None:
    clock = SenderClock(90_000)
    clock.report(ntp(1.0), (1 << 32) - 900)
    assert clock.timestamp(1.02) == (1 << 32) + 900
