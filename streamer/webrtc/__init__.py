"""WebRTC in and out: WHIP ingest as a Source, WHEP playback as a Sink, served by one aiohttp server."""

from streamer.webrtc.playback import FrameHub, PlayerTrack
from streamer.webrtc.server import Ingest, WebRtcServer
from streamer.webrtc.sink import WhepSink
from streamer.webrtc.source import ORIGINAL_SUFFIX, WhipSource

__all__ = ["ORIGINAL_SUFFIX", "FrameHub", "Ingest", "PlayerTrack", "WebRtcServer", "WhepSink", "WhipSource"]
