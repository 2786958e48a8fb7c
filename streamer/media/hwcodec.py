"""Where video is decoded and encoded: on the CPU (libavcodec, libx264) or on an NVIDIA GPU's own
video engines (NVDEC, NVENC), through the FFmpeg inside PyAV's wheel.

A GPU that runs the model for dozens of 1080p streams leaves their decode and encode to the host: at
30 fps each, H.264 decode and libx264 encode take whole cores per handful of streams
(``streamer bench codecs`` measures how many). NVDEC and NVENC are separate engines on the GPU, so they
cost neither CUDA cores nor host cores. Not every GPU has both: the data-centre H100 and H200 decode
(NVDEC) but have no NVENC at all, so there ``auto`` encodes with libx264 and says so.

Whether an engine works is found out once per process by using it (a tiny H.264 clip decoded on NVDEC,
an NVENC encoder opened), not by reading device names: drivers, containers (the NVIDIA container
runtime exposes the video engines only with its ``video`` capability) and session limits decide it.
``auto`` takes the engine where it works and the CPU otherwise, with one log line saying why; naming
the engine outright (``nvdec``, ``h264_nvenc``) makes its absence an error.
"""

from __future__ import annotations

import contextlib
import fractions
import functools
import io
import logging
import threading
from collections.abc import Iterator, Mapping

import av
import av.logging
import numpy as np
from av.codec.hwaccel import HWAccel
from av.container import InputContainer
from av.video.codeccontext import VideoCodecContext
from av.video.stream import VideoStream

from streamer.errors import ConfigError
from streamer.media.codecs import COMPRESSED_CODECS, NVENC, X264, Decode, VideoCodec

__all__ = [
    "COMPRESSED_CODECS",
    "NVENC",
    "X264",
    "Decode",
    "VideoCodec",
    "decoder_hwaccel",
    "encoder_options",
    "nvdec_unavailable",
    "nvenc_unavailable",
    "resolve_encoder",
]

log = logging.getLogger(__name__)

_NVENC_PRESETS = {
    "ultrafast": "p1",
    "superfast": "p1",
    "veryfast": "p2",
    "faster": "p3",
    "fast": "p4",
    "medium": "p5",
    "slow": "p6",
    "slower": "p7",
    "veryslow": "p7",
    "placebo": "p7",
}
"""libx264's presets as NVENC's p1 (fastest) to p7 (best), by the same speed-for-quality rank."""

_said: set[str] = set()
_said_lock = threading.Lock()


def _say_once(key: str, message: str, *args: object) -> None:
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    log.info(message, *args)


def _reason(err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:300]


@contextlib.contextmanager
def _ffmpeg_errors() -> Iterator[None]:
    """FFmpeg's own error lines ("Cannot load libcuda.so.1") in the exceptions raised meanwhile: PyAV
    adds the last one when its logging is on, which it is here only for a probe, once a process."""
    level = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture():
            yield
    finally:
        av.logging.set_level(level)


@functools.cache
def _probe_clip() -> bytes:
    """Four frames of 128x128 H.264 (Annex B), made here by libx264: what the NVDEC probe decodes."""
    out = io.BytesIO()
    with av.open(out, "w", format="h264") as container:
        stream = container.add_stream(X264, rate=30, options={"preset": "ultrafast"})
        assert isinstance(stream, VideoStream)
        stream.width = stream.height = 128
        stream.pix_fmt = "yuv420p"
        for k in range(4):
            frame = av.VideoFrame.from_ndarray(np.full((128, 128, 3), 40 * k, np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return out.getvalue()


@functools.cache
def nvdec_unavailable() -> str | None:
    """Why NVDEC cannot decode here (FFmpeg's reason), or None where it decoded the probe clip."""
    try:
        accel = HWAccel("cuda", allow_software_fallback=False)
        with _ffmpeg_errors(), av.open(io.BytesIO(_probe_clip()), "r", format="h264", hwaccel=accel) as given:
            assert isinstance(given, InputContainer)
            decoded = len(list(given.decode(video=0)))
    except (av.error.FFmpegError, ValueError, OSError, RuntimeError) as err:
        return (
            f"NVDEC (CUDA) could not decode: {_reason(err)} (no NVIDIA driver or GPU, or a container "
            "started without the video capability)"
        )
    return None if decoded else "NVDEC (CUDA) decoded no frame of the probe clip"


@functools.cache
def nvenc_unavailable() -> str | None:
    """Why NVENC cannot encode here (FFmpeg's reason), or None where an h264_nvenc encoder opened."""
    try:
        context = av.CodecContext.create(NVENC, "w")
        assert isinstance(context, VideoCodecContext)
    except (av.error.FFmpegError, ValueError) as err:
        return f"this FFmpeg has no {NVENC}: {_reason(err)}"
    context.width, context.height, context.pix_fmt = 256, 144, "yuv420p"
    context.time_base = fractions.Fraction(1, 30)
    try:
        with _ffmpeg_errors():
            context.open()
    except (av.error.FFmpegError, ValueError, OSError) as err:
        return (
            f"{NVENC} could not open: {_reason(err)} (no NVIDIA driver, a GPU without NVENC such as the "
            "H100 and H200, or no free encoder session)"
        )
    return None


def decoder_hwaccel(choice: Decode, where: str) -> HWAccel | None:
    """What ``av.open`` gets for ``choice``: None decodes on the CPU. ``where`` names the source for
    messages."""
    if choice == "cpu":
        return None
    why = nvdec_unavailable()
    if why is None:
        _say_once("nvdec", "video decodes on NVDEC")
        return HWAccel("cuda", allow_software_fallback=True)
    if choice == "nvdec":
        raise ConfigError(f"{where}: decode: nvdec asked for, but {why}; set decode: cpu or auto")
    _say_once("nvdec", "video decodes on the CPU: %s", why)
    return None


def resolve_encoder(choice: str, where: str) -> str:
    """The encoder an output's ``codec`` names: ``auto`` as h264_nvenc or libx264, h264_nvenc checked."""
    if choice not in ("auto", NVENC):
        return choice
    why = nvenc_unavailable()
    if why is None:
        _say_once("nvenc", "video encodes on NVENC (%s)", NVENC)
        return NVENC
    if choice == NVENC:
        raise ConfigError(f"{where}: codec {NVENC} asked for, but {why}; set codec: libx264 or auto")
    _say_once("nvenc", "video encodes with libx264: %s", why)
    return X264


def encoder_options(codec: str, x264: Mapping[str, str]) -> dict[str, str]:
    """An output's libx264 options as ``codec`` takes them: as they are for libx264 (and any other
    encoder), NVENC's nearest for h264_nvenc. The preset goes by rank (``ultrafast`` -> ``p1``); the
    tune ``zerolatency`` becomes NVENC's ultra-low-latency mode (no lookahead, no frame delay); a CRF
    becomes NVENC's constant quality (``cq``, the same 0-51 scale); x264's own threads are dropped."""
    if codec != NVENC:
        return dict(x264)
    options: dict[str, str] = {}
    for key, value in x264.items():
        if key == "preset":
            options["preset"] = _NVENC_PRESETS.get(value, value)
        elif key == "tune":
            if value == "zerolatency":
                options |= {"tune": "ull", "zerolatency": "1", "delay": "0", "rc-lookahead": "0"}
            else:
                options["tune"] = "hq"
        elif key == "crf":
            options |= {"rc": "vbr", "cq": value}
        elif key != "threads":
            options[key] = value
    return options
