"""Where a stream's frames come from: a file, a synthetic pattern, an RTSP camera or a WHIP publisher."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from streamer.config.base import STREAM_ID, Backoff, Strict
from streamer.media.codecs import Decode
from streamer.media.samples import resolve_sample

__all__ = ["FileSourceConfig", "RtspSourceConfig", "SyntheticSourceConfig", "WhipSourceConfig"]


class FileSourceConfig(Strict):
    kind: Literal["file"] = "file"
    path: Path
    """Any file PyAV reads (its first video stream is used), or ``sample:NAME`` for a sample clip."""
    max_frames: int | None = Field(None, ge=1, le=10**9)
    """Stop after this many frames (counted across passes with ``loop``); None reads the whole file."""
    noise_sigma: float = Field(0.0, ge=0.0, le=128.0)
    """Gaussian noise added on read (0..255 units): a known degradation for demos and benchmarks."""
    seed: int = Field(0, ge=0, le=2**32 - 1)
    realtime: bool = False
    """Release each frame at its PTS on the wall clock, as a live camera (drops its oldest, never queues)."""
    loop: bool = False
    """Start again at the end, timestamps continuing; each restart is a discontinuity. Drops the audio."""
    decode: Decode = "cpu"
    """Where the video is decoded: ``cpu``; ``nvdec``, an NVIDIA GPU's decoder (an error where it does
    not work); ``auto``, NVDEC where it works, the CPU otherwise, said once (``streamer.media.hwcodec``)."""

    @field_validator("path", mode="before")
    @classmethod
    def _sample(cls, value: Any) -> Any:
        return resolve_sample(value) if isinstance(value, str) else value


class SyntheticSourceConfig(Strict):
    kind: Literal["synthetic"] = "synthetic"
    pattern: str = "testsrc2"
    width: int = Field(640, ge=16, le=7680)
    height: int = Field(360, ge=16, le=4320)
    fps: int = Field(30, ge=1, le=240)
    frames: int | None = Field(300, ge=1, le=10**9)
    noise_sigma: float = Field(0.0, ge=0.0, le=128.0)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    realtime: bool = False


class RtspSourceConfig(Backoff):
    kind: Literal["rtsp"] = "rtsp"
    url: str
    """rtsp:// or rtsps:// URL; inline credentials are fine, they are never logged."""
    transport: Literal["tcp", "udp"] = "tcp"
    open_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    read_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    stall_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    """No frame for this long: drop the connection and reconnect."""
    decode: Decode = "cpu"
    """Where the video is decoded: ``cpu``; ``nvdec``, an NVIDIA GPU's decoder (an error where it does
    not work); ``auto``, NVDEC where it works, the CPU otherwise, said once (``streamer.media.hwcodec``)."""
    reader: Literal["auto", "ffmpeg"] = "auto"
    """``auto``: streamer's own RTP reader for H.264 or H.265 over TCP from an rtsp:// URL, which hands
    each frame on as its last packet arrives; FFmpeg's (one frame period later) for rtsps://, UDP, a GPU
    decoder, other codecs and a camera's audio kept for an output. ``ffmpeg``: FFmpeg's always."""


class WhipSourceConfig(Strict):
    kind: Literal["whip"] = "whip"
    stream: str = Field("0", pattern=STREAM_ID)
    """Publishers POST to /whip/{stream}."""
    open_timeout_s: float | None = Field(None, gt=0.0, le=86400.0)
    """How long to wait for the first publisher; None waits for ever."""
    end_on_unpublish: bool = False
    fps: int = Field(30, ge=1, le=240)
    relay_original: bool = True
