"""Where a stream's enhanced frames go: a file, nowhere (null), an RTSP server or WHEP players."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from streamer.config.base import STREAM_ID, Backoff, Strict
from streamer.media.codecs import DEFAULT_CRF, VideoCodec

__all__ = ["FileSinkConfig", "NullSinkConfig", "RtspSinkConfig", "WhepSinkConfig"]


class FileSinkConfig(Strict):
    kind: Literal["file"] = "file"
    path: Path
    overwrite: bool = True
    """Replace an existing file. A stream added through the control API must set it to true itself."""
    codec: str = "libx264"
    """Any encoder PyAV has; ``auto``: h264_nvenc where NVENC works, libx264 otherwise, said once;
    h264_nvenc takes preset and crf as its nearest (``streamer.media.hwcodec``)."""
    preset: str = "veryfast"
    crf: int = Field(DEFAULT_CRF, ge=0, le=51)
    """libx264's constant quality: lower keeps more of the picture in a larger file. The default's cost
    to a camera's compressed stream is small beside what a model gains on it; 4 (near-lossless) keeps
    nearly all of it at several times the size, for recordings meant to keep what the model made; 0 is
    lossless (docs/benchmarks.md, "What a user receives")."""
    bitrate: int | None = Field(None, ge=1, le=10**9)
    gop: int | None = Field(None, ge=1, le=10**4)
    audio: Literal["keep", "drop"] = "keep"
    """``keep``: the source's first audio stream (a file's, an RTSP camera's or a WHIP publisher's) is
    written beside the video, its packets as they are (transcoded to AAC, or Opus for webm, where the
    container cannot hold the codec). A setting of the sink, since the sink is what writes it; synthetic
    sources have no audio to give. ``drop``: video only."""
    fragment_s: float | None = Field(1.0, gt=0.0, le=60.0)
    """mp4 and mov are written as fragments of at most this many seconds, each handed to the OS as it is
    made, so a process killed mid-recording (SIGKILL, power) leaves a file that plays to within about
    this and the encoder's lookahead of where it stopped. null: one index written at close, as a plain
    mp4 (a crash loses the whole file). ``.ts`` and ``.mkv`` are written as they go either way."""
    max_mb: int | None = Field(None, ge=1, le=10**8)
    """The file stops growing past this many megabytes: the output fails in one line, its file complete
    and playable, and the stream's other outputs go on. null: no limit (an output added through the
    control API gets ``http.max_output_mb`` at most)."""
    min_free_mb: int = Field(256, ge=0, le=10**9)
    """The output stops the same way when its disk's free space falls under this (checked about once
    a second), leaving room for the rest of the host."""
    encode: Literal["own", "live"] = "own"
    """``own``: the file is encoded with its own settings above. ``live``: it records the packets of the
    stream's first RTSP output (its bitrate, GOP and preset; codec, preset, crf, bitrate and gop here are
    not used), one encode for both, which saves a second encode's CPU. Needs an RTSP output in
    ``sinks``. Outputs with equal settings share an encode either way."""


class NullSinkConfig(Strict):
    kind: Literal["null"] = "null"


class RtspSinkConfig(Backoff):
    kind: Literal["rtsp"] = "rtsp"
    url: str
    """rtsp:// or rtsps:// URL to publish to (ANNOUNCE/RECORD)."""
    bitrate: int = Field(2_000_000, ge=1, le=10**9)
    gop: int = Field(30, ge=1, le=10**4)
    preset: str = "ultrafast"
    tune: str = "zerolatency"
    transport: Literal["tcp", "udp"] = "tcp"
    timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    threads: int | None = Field(None, ge=1, le=64)
    """libx264's threads; None: its own choice (about 1.5 per core), which competes with the model's."""
    codec: VideoCodec = "libx264"
    """``libx264``; ``h264_nvenc``, an NVIDIA GPU's encoder, which costs no host cores (an error where
    it does not work: the H100 and H200 have none); ``auto``, NVENC where it works, libx264 otherwise,
    said once. preset and tune are libx264's names; NVENC gets their nearest (``streamer.media.hwcodec``)."""
    audio: Literal["keep", "drop"] = "keep"
    """``keep``: the source's first audio stream (a file's, an RTSP camera's or a WHIP publisher's) is
    published as a second track, in sync with the video (AAC, G.711 and Opus as they are, other codecs
    as AAC). ``drop``: video only."""


class WhepSinkConfig(Strict):
    kind: Literal["whep"] = "whep"
    stream: str = Field("0", pattern=STREAM_ID)
    """Players POST to /whep/{stream}."""
    audio: Literal["keep", "drop"] = "keep"
    """``keep``: the source's first audio stream (a file's, an RTSP camera's or a WHIP publisher's) goes
    to players as Opus, in sync with the video, for players whose offer has an audio m-line. ``drop``:
    video only."""
    original: bool = True
    """Also play the unenhanced frames at /whep/{stream}.original (the viewer's left pane), each sent
    with its enhanced twin; false saves the second encode per player. A WHIP source relays its own."""
