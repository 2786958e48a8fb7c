"""The strict base every settings model derives from, and what several sections share.

Every model forbids unknown keys, so a typo fails loudly instead of silently running on a default; none
takes inf or nan; no setting holds a control character.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["STREAM_ID", "Backoff", "Strict"]


class Strict(BaseModel):
    """A settings section: unknown keys, inf, nan and control characters are refused."""

    # No inf or nan anywhere: an infinite timeout or backoff overflows where it is used, a nan compares false.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_control_characters(cls, data: Any) -> Any:
        """No setting holds a control character: a NUL in a path fails deep in the OS (and in a log line or
        a URL, others forge lines or headers), so each is refused here, naming the key."""
        if isinstance(data, dict):
            for key, value in data.items():
                found = _control_character(value)
                if found is not None:
                    raise PydanticCustomError(
                        "control_character",
                        "holds the control character {found}; paths, URLs and names take printable text only",
                        {"key": str(key), "found": repr(found)},
                    )
        return data


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _control_character(value: object) -> str | None:
    """The first control character in a string (or a list's strings), else None."""
    if isinstance(value, str | Path):
        found = _CONTROL.search(str(value))
        return None if found is None else found.group()
    if isinstance(value, list | tuple):
        return next((c for c in map(_control_character, value) if c is not None), None)
    return None


STREAM_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
"""What a stream's name (and a WHIP or WHEP stream's) may be: it travels in URLs, labels and logs."""


class Backoff(Strict):
    """How an RTSP source or sink retries its server after a failure."""

    reconnect: bool = True
    """Reconnect after a failure, a stall or the end; false: the first failure stops the run."""
    max_attempts: int | None = Field(None, ge=1, le=10**6)
    """Consecutive failed attempts before giving up; null retries for ever."""
    backoff_initial_s: float = Field(0.5, gt=0.0, le=3600.0)
    """First retry delay; doubles after each failure."""
    backoff_max_s: float = Field(10.0, gt=0.0, le=3600.0)
    """Cap on the retry delay."""
    jitter: float = Field(0.2, ge=0.0, lt=1.0)
    """Each delay varies by +/- this fraction, so many clients do not retry in lockstep."""

    def backoff(self) -> dict[str, Any]:
        """These settings as keyword arguments of RtspSource and RtspSink."""
        return self.model_dump(include=set(Backoff.model_fields))
