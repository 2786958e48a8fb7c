"""Redaction by construction: a shown URL keeps scheme, host, port and path and loses every value;
errors quoting URLs are redacted wherever they appear; a text log line cannot be forged or coloured."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamer.redact import escape_control, redact_text, redact_url
from streamer.serving.logs import JsonFormatter, TextFormatter


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("rtsp://u:p@host", "rtsp://***@host"),
        ("rtsp://cam/live;user=bob;password=x", "rtsp://cam/live;user=***;password=***"),
        (
            "rtsp://cam/live?pw=1&credentials=2&user=3&channel=4",
            "rtsp://cam/live?pw=***&credentials=***&user=***&channel=***",
        ),
        ("rtsp://cam/live?a=1;b=2&c=", "rtsp://cam/live?a=***;b=***&c=***"),
        ("rtsp://cam/live?s3cr3tT0ken", "rtsp://cam/live?***"),
        ("rtsp://cam/user=admin_password=x_channel=1", "rtsp://cam/user=***"),
        (
            "rtsp://cam/user=admin&password=x&channel=1/stream",
            "rtsp://cam/user=***&password=***&channel=***/stream",
        ),
        ("rtsp://cam/a/password=a_b;c/d", "rtsp://cam/a/password=***;c/d"),
        ("https://host/cb#access_token=abc", "https://host/cb#***"),
        ("rtsps://u:p@cam:322/live;k=v?t=1#f", "rtsps://***@cam:322/live;k=***?t=***#***"),
        ("rtsp://cam:554/Streaming/Channels/101", "rtsp://cam:554/Streaming/Channels/101"),
        ("file:///tmp/x.mp4", "file:///tmp/x.mp4"),
    ],
)
def test_redact_url_keeps_scheme_host_port_and_path_only(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize("url", ["rtsp://u:p@[::1/x", "rtsp://u:p@cam:notaport/x", "rtsp://cam:99999/x"])
def test_a_malformed_url_is_not_echoed(url: str) -> None:
    assert redact_url(url) == "<malformed URL>"


@pytest.mark.parametrize(
    "url", ["rtsp://u:p@cam:554/live;user=a?token=1&channel=2#f", "rtsp://cam/user=admin_password=x"]
)
def test_redacting_twice_changes_nothing(url: str) -> None:
    once = redact_url(url)
    assert redact_url(once) == once
    assert redact_text(once) == once


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "rtsp://admin:hunter2@10.0.0.5:554/live?token=x: Connection refused",
            "rtsp://***@10.0.0.5:554/live?token=***: Connection refused",
        ),
        ("opening 'rtsp://u:p@cam/x' failed", "opening 'rtsp://***@cam/x' failed"),
        ('{"url": "rtsp://u:p@cam/x"}', '{"url": "rtsp://***@cam/x"}'),
        ("cannot reach rtsp://u:p@cam:554.", "cannot reach rtsp://***@cam:554."),
        (
            "(see http://u:p@a/b?c=1), and rtsp://x/y;pw=2",
            "(see http://***@a/b?c=***), and rtsp://x/y;pw=***",
        ),
        ("bad url rtsp://u:p@[::1/x here", "bad url <malformed URL> here"),
        ("Invalid data found when processing input", "Invalid data found when processing input"),
    ],
)
def test_redact_text_redacts_every_url_in_an_error(text: str, shown: str) -> None:
    assert redact_text(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\nb", "a\\nb"),
        ("a\r\nb", "a\\r\\nb"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("tab\there", "tab\\there"),
        ("nul\x00del\x7fnel\x85", "nul\\x00del\\x7fnel\\x85"),
        ("line\u2028sep", "line\\u2028sep"),
        ("plain ünïcode – text", "plain ünïcode – text"),
    ],
)
def test_escape_control_writes_control_characters_as_escapes(text: str, shown: str) -> None:
    assert escape_control(text) == shown


@given(st.text())
def test_escaped_text_is_always_one_printable_line(text: str) -> None:
    escaped = escape_control(text)
    assert len(escaped.splitlines()) <= 1
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in escaped)


def _record(msg: str, *args: object, exc_info: bool = False) -> logging.LogRecord:
    return logging.LogRecord(
        "streamer.test", logging.WARNING, __file__, 1, msg, args, sys.exc_info() if exc_info else None
    )


def test_a_text_log_line_with_a_newline_and_an_ansi_escape_stays_one_line() -> None:
    record = _record("opened %s", "/tmp/x.mp4\n2024-01-01 00:00:00 INFO streamer: forged\x1b[2J")
    line = TextFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert "\x1b" not in line
    assert line.endswith(
        "WARNING streamer.test: opened /tmp/x.mp4\\n2024-01-01 00:00:00 INFO streamer: forged\\x1b[2J"
    )


@pytest.mark.parametrize("formatter", [TextFormatter(), JsonFormatter()])
def test_a_url_in_a_log_message_comes_out_redacted(formatter: logging.Formatter) -> None:
    for record in (
        _record("source rtsp://u:p@h/x?token=1 failed"),
        _record("source %s failed", "rtsp://u:p@h/x?token=1"),
    ):
        out = formatter.format(record)
        assert "rtsp://***@h/x?token=***" in out
        assert "u:p" not in out
        assert "token=1" not in out


def test_a_json_log_line_is_one_line_and_redacted() -> None:
    out = JsonFormatter().format(_record("a\nb rtsp://u:p@h/x;pw=2"))
    assert len(out.splitlines()) == 1
    assert json.loads(out)["message"] == "a\nb rtsp://***@h/x;pw=***"


def test_a_traceback_keeps_its_lines_but_escapes_and_redacts_within_them() -> None:
    try:
        raise ValueError("rtsp://u:p@cam/x?token=1 said \x1b[31mno\r")
    except ValueError:
        record = _record("stream failed", exc_info=True)
    plain = logging.Formatter().format(record)  # caches the raw traceback on the record, as a handler would
    assert "\x1b" in plain
    text = TextFormatter().format(record)
    lines = text.split("\n")
    assert lines[0].endswith("stream failed")
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: rtsp://***@cam/x?token=*** said \\x1b[31mno\\r"
    assert "u:p" not in text
    assert "\x1b" not in text
    assert "\r" not in text
    assert "u:p" not in JsonFormatter().format(record)


def test_chatty_libraries_log_warnings_only_unless_debugging() -> None:
    import logging

    from streamer.serving.logs import THIRD_PARTY_LOGGERS, configure_logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        configure_logging("info")
        assert not logging.getLogger("aioice.ice").isEnabledFor(logging.INFO)
        assert all(logging.getLogger(n).getEffectiveLevel() == logging.WARNING for n in THIRD_PARTY_LOGGERS)
        assert logging.getLogger("streamer.serving.service").isEnabledFor(logging.INFO)
        configure_logging("debug")
        assert logging.getLogger("aioice.ice").isEnabledFor(logging.DEBUG)
    finally:
        for name in THIRD_PARTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
        root.handlers[:] = handlers
        root.setLevel(level)
