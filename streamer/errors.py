"""The one exception tree of streamer.

Every error the package raises on purpose derives from :class:`StreamerError`, and each subclass also
inherits the builtin a caller would naturally catch, so ``except ValueError`` and
``except StreamerError`` both work::

    StreamerError
    ├── ConfigError (ValueError)          bad YAML, unknown key, wrong type, contradictory settings
    │   └── StreamExistsError             a stream added under an id that is already running
    ├── ModelError (ValueError)           model file unreadable or breaking the runtime's contract
    │   └── ModelMismatchError            config disagrees with the model (T, output position)
    ├── FrameError (ValueError)           a frame or batch of the wrong shape or dtype
    ├── FrameEvictedError (LookupError)   a frame asked of the ring buffer is no longer in it
    ├── SourceError (OSError)             a source cannot be opened or read
    │   └── SourceNotFoundError (FileNotFoundError)
    ├── SinkError (OSError)               a sink cannot be opened or written
    ├── BackendError (RuntimeError)       the inference runtime failed on valid input
    │   └── ModelUnavailableError (ConnectionError)  a model server cannot answer now: frames pass through
    └── EndOfStream                       a source has no more frames (not a failure)
"""

from __future__ import annotations

__all__ = [
    "AccessError",
    "BackendError",
    "BudgetError",
    "ConfigError",
    "EndOfStream",
    "FrameError",
    "FrameEvictedError",
    "LimitError",
    "ModelError",
    "ModelMismatchError",
    "ModelUnavailableError",
    "OutOfMemoryError",
    "OutputTakenError",
    "SinkError",
    "SourceError",
    "SourceNotFoundError",
    "StreamExistsError",
    "StreamerError",
]


class StreamerError(Exception):
    """Raised for any failure streamer reports on purpose; the root of the tree."""


class ConfigError(StreamerError, ValueError):
    """Raised when a configuration value is missing, unknown, mistyped or contradictory."""


class AccessError(StreamerError, PermissionError):
    """Raised when a control-API request asks for a file, host or resource it is not allowed."""


class OutOfMemoryError(StreamerError, MemoryError):
    """Raised in place of a MemoryError inside a stream: that stream fails in one line, the others go on."""


class LimitError(StreamerError, OverflowError):
    """Raised when a request would take the process past a configured cap (streams, sessions)."""


class BudgetError(LimitError):
    """Raised when a stream's estimated memory does not fit in what the memory budget has left."""


class StreamExistsError(ConfigError):
    """Raised when a stream is added under an id that is already running."""


class OutputTakenError(ConfigError):
    """Raised when a stream's output is a file, RTSP URL or WHEP stream another running stream writes."""


class ModelError(StreamerError, ValueError):
    """Raised when a model file cannot be loaded or does not follow the runtime's contract."""


class ModelMismatchError(ModelError):
    """Raised when the configuration disagrees with what the model was exported with."""


class FrameError(StreamerError, ValueError):
    """Raised when a frame or batch has a shape or dtype the stage cannot accept."""


class FrameEvictedError(StreamerError, LookupError):
    """Raised when a frame is requested from a ring buffer that has already overwritten it."""


class SourceError(StreamerError, OSError):
    """Raised when a source cannot be opened or stops with an error."""


class SourceNotFoundError(SourceError, FileNotFoundError):
    """Raised when a file source names a path that does not exist."""


class SinkError(StreamerError, OSError):
    """Raised when a sink cannot be opened or written."""


class BackendError(StreamerError, RuntimeError):
    """Raised when the inference runtime fails on input that passed validation."""


class ModelUnavailableError(BackendError, ConnectionError):
    """Raised when a model cannot answer for now (a Triton server down, too slow or refusing calls; a
    device out of memory): the pipeline passes the window's frame through and counts it, rather than
    ending the stream."""

    batch_bound = False
    """True where a smaller batch may get through (an allocation that failed), so a batch of windows
    that failed is tried window by window; a server that is down would fail each of them too."""


class EndOfStream(StreamerError):
    """Raised by ``Source.recv`` when the source has no more frames; iteration turns it into a stop."""
