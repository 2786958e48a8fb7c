"""Log output: one human-readable line per event by default, or JSON lines for log collectors.

Secrets stay out of both: every message and traceback passes through ``redact_text``, which hides the
credentials of any URL in it (including those quoted by FFmpeg or onnxruntime), and tokens are never
logged. A text line escapes control characters, so a newline or an ANSI escape in a file name or a
server's reply cannot forge a line or colour a terminal; JSON is escaped by ``json.dumps``.
"""

from __future__ import annotations

import copy
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal

from streamer.redact import escape_control, redact_text

__all__ = ["THIRD_PARTY_LOGGERS", "JsonFormatter", "TextFormatter", "configure_logging"]

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, redacted and escaped to one line; a traceback follows it, its
    lines redacted and escaped one by one."""

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        # The record is shared with other handlers, and Formatter.format caches an unescaped traceback
        # on it (exc_text): build the line here instead of trusting or changing what the record holds.
        fields = copy.copy(record)
        fields.message = record.getMessage()
        fields.asctime = self.formatTime(record, self.datefmt)
        lines = [escape_control(redact_text(self.formatMessage(fields)))]
        if record.exc_info:
            lines.extend(_block(self.formatException(record.exc_info)))
        if record.stack_info:
            lines.extend(_block(self.formatStack(record.stack_info)))
        return "\n".join(lines)


def _block(text: str) -> list[str]:
    """The lines of a traceback or stack, each redacted and escaped; the newlines between them stay."""
    return [escape_control(line) for line in redact_text(text).rstrip("\n").split("\n")]


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, and any exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


THIRD_PARTY_LOGGERS = ("aioice", "aiortc", "av", "libav")
"""Libraries whose INFO lines are per packet or per candidate: WARNING unless ``log_level: debug``."""


def configure_logging(level: str, fmt: Literal["text", "json"] = "text") -> None:
    """Route the root logger to stderr at ``level`` in ``fmt``; called once, by the CLI."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # aioice logs every ICE candidate pair at INFO (most of a WHEP burst's log): their detail is for
    # debugging.
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
