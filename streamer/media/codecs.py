"""The names of the codecs and encoder settings a config may choose: plain names, so that the config
schema and the codec modules share them without either importing the other's libraries (``bench
codecs`` runs with numpy, onnxruntime and PyAV alone)."""

from __future__ import annotations

from typing import Literal

__all__ = ["COMPRESSED_CODECS", "DEFAULT_CRF", "NVENC", "X264", "Decode", "VideoCodec"]

Decode = Literal["cpu", "nvdec", "auto"]
"""``cpu``: libavcodec's decoder; ``nvdec``: the GPU's decoder (frames come back to host memory, a
stream NVDEC cannot take falls back to the CPU's); ``auto``: NVDEC where it works."""

VideoCodec = Literal["libx264", "h264_nvenc", "auto"]
"""The H.264 encoder of an output: ``auto`` is h264_nvenc where NVENC works, libx264 otherwise."""

NVENC = "h264_nvenc"
X264 = "libx264"

COMPRESSED_CODECS = (
    "auto",
    X264,
    NVENC,
    "libopenh264",
    "libx265",
    "hevc_nvenc",
    "libvpx",
    "libvpx-vp9",
    "libaom-av1",
    "libsvtav1",
    "mpeg4",
)
"""Encoders that compress: what an output added through the control API may name by default."""

DEFAULT_CRF = 12
"""libx264's constant quality for recordings: the re-encode's cost to a camera's compressed stream is
then small beside what a model gains on it (``streamer bench quality``, delivered)."""
