"""Where frames go: video files, nowhere (for measuring), and the port every sink implements."""

from streamer.sinks.base import Sink
from streamer.sinks.file import FileSink
from streamer.sinks.null import NullSink

__all__ = ["FileSink", "NullSink", "Sink"]
