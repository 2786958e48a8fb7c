"""Where frames come from: files, generated patterns, and the port every source implements."""

from streamer.sources.base import Source, ThreadedSource
from streamer.sources.file import FileSource
from streamer.sources.synthetic import SyntheticSource

__all__ = ["FileSource", "Source", "SyntheticSource", "ThreadedSource"]
