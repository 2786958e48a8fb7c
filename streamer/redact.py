"""What may be shown of a URL or an error, and how a message is kept to one honest log line.

Camera URLs carry credentials in many places: user info (``rtsp://user:pass@cam``), query values
(``?user=admin&pw=x``), ``;`` path parameters (``/live;password=x``) and ``key=value`` path segments
(``/user=admin_password=x_channel=1``). No list of secret-looking names can be complete, so redaction
works by construction: a shown URL keeps its scheme, host, port and path and loses every value.
Errors from FFmpeg, onnxruntime and our own code may quote a URL anywhere, so text is scanned for
URL-like substrings too. Log lines then escape control characters, so a file name or a server reply
cannot forge a log line or colour a terminal.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["escape_control", "redact_text", "redact_url"]

_MASK = "***"

_PATH_VALUE = re.compile(r"=[^/;&]*")
"""A ``key=value`` in a path runs to the next separator: a value may hold ``_`` (``password=a_b``)."""

_QUERY_ITEM = re.compile(r"[^&;]+")

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]*")
"""Scheme, ``://``, then anything up to whitespace or a quote."""

_TRAILING = ".,:;!?)>"
"""Prose punctuation after a URL (``... rtsp://cam:554: refused``), which would spoil its port."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""C0 and C1 controls, DEL, and the Unicode line and paragraph separators some viewers break on."""

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def redact_url(url: str) -> str:
    """``url`` with user info, query values, path parameter values and fragment replaced by ``***``.

    ``rtsp://u:p@cam:554/live;user=bob?token=x`` -> ``rtsp://***@cam:554/live;user=***?token=***``.
    Anything that shows a URL (logs, errors, stats, API responses) goes through this.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError:
        return "<malformed URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{_MASK}@{netloc.rpartition('@')[2]}"
    path = _PATH_VALUE.sub(f"={_MASK}", parts.path)
    query = _QUERY_ITEM.sub(_mask_query_item, parts.query)
    fragment = _MASK if parts.fragment else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, query, fragment))


def _mask_query_item(match: re.Match[str]) -> str:
    """``key=***``; a bare item (``?abc123``) may itself be a token, so it goes whole."""
    key, eq, _ = match.group().partition("=")
    return f"{key}={_MASK}" if eq else _MASK


def redact_text(text: str) -> str:
    """``text`` with every URL-like substring (``scheme://`` up to whitespace or a quote) redacted.

    For messages we do not compose: FFmpeg's, onnxruntime's, an exception's. Already redacted URLs
    come out unchanged, so applying this twice is harmless.
    """
    return _URL.sub(_redact_match, text)


def _redact_match(match: re.Match[str]) -> str:
    found = match.group()
    url = found.rstrip(_TRAILING)
    return redact_url(url) + found[len(url) :]


def escape_control(text: str) -> str:
    """``text`` with control characters written as escapes (``\\n``, ``\\x1b``), so it stays one line."""
    return _CONTROL.sub(_escape_char, text)


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT_ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
