"""The tracks of ``streamer bench quality``: the ways the clean clip is damaged, each with the NLMeans
strength that suits it. ``gaussian``: Gaussian noise and a low H.264 bitrate; ``camera``: compression, a
sensor's noise through the camera's encoder, and clean input."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CAMERA_DEGRADATIONS", "DEGRADATIONS", "TRACKS", "Degradation"]


@dataclass(frozen=True, slots=True)
class Degradation:
    """One way the clean clip is damaged, and the NLMeans strength that suits it."""

    key: str
    title: str
    sigma: float | None
    """Gaussian noise in 0..255 units (with ``shot``: the read noise), or None for the H.264 round trip
    at the low bitrate."""
    nlm_h: float
    shot: float = 0.0
    """Shot noise: the variance grows by this much per level of the clean pixel (a sensor's photon
    noise), on top of ``sigma``'s."""
    crf: int | None = None
    """Then the clip goes through libx264 at this constant quality, as a camera's encoder sends it."""
    multi: bool = True
    """OpenCV's multi-frame NLMeans runs (about 1 fps: the camera track leaves it out)."""
    filters: bool = False
    """FFmpeg's own denoisers run (:data:`streamer.bench.quality.FFMPEG_FILTERS`)."""


DEGRADATIONS = (
    Degradation("noise15", "Gaussian noise sigma 15", 15.0, 10.0),
    Degradation("noise25", "Gaussian noise sigma 25", 25.0, 16.0),
    Degradation("h264", "H.264 low bitrate", None, 4.0),
)
CAMERA_DEGRADATIONS = (
    Degradation("crf30", "x264 CRF 30, compressed only", 0.0, 3.0, crf=30, multi=False, filters=True),
    Degradation("crf35", "x264 CRF 35, compressed only", 0.0, 4.0, crf=35, multi=False, filters=True),
    Degradation("crf40", "x264 CRF 40, compressed only", 0.0, 5.0, crf=40, multi=False, filters=True),
    Degradation(
        "camera",
        "sensor noise (read sigma 6, shot 0.5/level), then x264 CRF 28: a camera",
        6.0,
        8.0,
        shot=0.5,
        crf=28,
        multi=False,
        filters=True,
    ),
    Degradation(
        "noise15crf30",
        "Gaussian noise sigma 15, then x264 CRF 30",
        15.0,
        10.0,
        crf=30,
        multi=False,
        filters=True,
    ),
    Degradation("clean", "clean input (do no harm)", 0.0, 3.0, multi=False, filters=True),
)
"""The ``camera`` track (issue 14): what real feeds are, compression and a sensor's noise through the
camera's encoder, and clean input. NLMeans strengths are set by eye from the Gaussian sweep, not swept."""
TRACKS = {"gaussian": DEGRADATIONS, "camera": CAMERA_DEGRADATIONS}
