"""RTSP helpers: credentials never shown, only rtsp/rtsps accepted, retry delays bounded and spread,
the sink's output clock strictly increasing."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from streamer.core.retries import backoff_delays
from streamer.errors import ConfigError
from streamer.sinks.rtsp import TIME_BASE, OutputClock, RtspSink
from streamer.sources.rtsp import RtspSource, redact_url
from tests.factories import make_frame


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("rtsp://user:pass@cam.local/live", "rtsp://***@cam.local/live"),
        ("rtsps://admin:p%40ss:w0rd@10.0.0.5:322/a/b", "rtsps://***@10.0.0.5:322/a/b"),
        ("rtsp://onlyuser@cam:554/x", "rtsp://***@cam:554/x"),
        ("rtsp://u:p@[::1]:8554/x", "rtsp://***@[::1]:8554/x"),
        ("rtsp://cam:554/live?channel=1&token=abc", "rtsp://cam:554/live?channel=***&token=***"),
        ("rtsp://cam/live?user=a&password=b", "rtsp://cam/live?user=***&password=***"),
        ("rtsp://127.0.0.1:8554/cam", "rtsp://127.0.0.1:8554/cam"),
    ],
)
def test_redact_url_hides_user_info_and_every_query_value(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_url_keeps_an_at_sign_in_the_path_and_hides_one_in_the_password() -> None:
    assert redact_url("rtsp://a:b@c@host/p@th") == "rtsp://***@host/p@th"


def test_a_malformed_url_is_not_echoed() -> None:
    assert redact_url("rtsp://u:p@[::1/x") == "<malformed URL>"


@pytest.mark.parametrize(
    "url",
    ["http://cam/live", "cam.local/live", "rtsp:///nohost", "", "file:///tmp/x.mp4", "rtsp://u:pw@[::1/x"],
)
def test_source_and_sink_refuse_urls_that_are_not_rtsp(url: str) -> None:
    with pytest.raises(ConfigError, match="not an RTSP URL") as raised:
        RtspSource(url)
    assert "pw" not in str(raised.value)
    with pytest.raises(ConfigError, match="not an RTSP URL"):
        RtspSink(url)


def test_credentials_stay_out_of_config_errors() -> None:
    with pytest.raises(ConfigError) as raised:
        RtspSource("http://admin:hunter2@cam/live")
    assert "hunter2" not in str(raised.value)
    assert "http://***@cam/live" in str(raised.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"transport": "quic"},
        {"backoff_initial_s": 0.0},
        {"backoff_initial_s": 2.0, "backoff_max_s": 1.0},
        {"jitter": 1.0},
        {"max_attempts": 0},
        {"stall_timeout_s": 0.0},
    ],
)
def test_source_refuses_bad_settings(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        RtspSource("rtsp://cam/live", **kwargs)  # type: ignore[arg-type]


def test_backoff_doubles_to_its_cap_without_jitter() -> None:
    delays = backoff_delays(0.5, 4.0, 0.0, random.Random(0))
    assert [next(delays) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_backoff_jitter_stays_within_its_fraction_and_spreads_clients() -> None:
    first = [next(backoff_delays(1.0, 1.0, 0.2, random.Random(seed))) for seed in range(50)]
    assert all(0.8 <= d <= 1.2 for d in first)
    assert len({round(d, 6) for d in first}) > 40


def test_output_clock_follows_media_time_and_never_goes_back() -> None:
    clock = OutputClock(Fraction(30))
    tick = round(1 / 30 / TIME_BASE)
    pts = [
        clock.advance(make_frame(0, pts=100)),
        clock.advance(make_frame(1, pts=101)),
        clock.advance(make_frame(2, pts=103)),  # a frame lost upstream: two periods
        clock.advance(make_frame(3, pts=5, discontinuity=True)),  # the source reconnected, PTS restarted
        clock.advance(make_frame(4, pts=6)),
        clock.advance(make_frame(5, pts=6)),  # a repeated PTS
        clock.advance(make_frame(6, pts=None)),
        clock.advance(make_frame(7, pts=10_000)),  # a jump of minutes
    ]
    assert pts == [0, tick, 3 * tick, 4 * tick, 5 * tick, 6 * tick, 7 * tick, 8 * tick]
