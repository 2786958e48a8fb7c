"""Every model layout the runtime takes, through the file pipeline: a real video in, a real video out,
each output frame checked exactly as it left for the encoder (tests.onnx_models.kind_model)."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from streamer.app import build_pipeline
from streamer.config import load_config
from streamer.engine.pipeline import Outcome, PipelineReport
from streamer.errors import ConfigError
from streamer.frame import Frame
from streamer.media.resize import upscale
from tests.media import probe
from tests.onnx_models import kind_expected, kind_model

pytestmark = pytest.mark.slow

FRAMES = 10


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten moving 64x48 frames, H.264 4:4:4."""
    path = tmp_path_factory.mktemp("kinds") / "clip.mp4"
    rng = np.random.default_rng(0)
    base = rng.integers(0, 200, size=(48, 96, 3), dtype=np.uint8)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast", "qp": "0"})
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv444p"
        for i in range(FRAMES):
            frame = av.VideoFrame.from_ndarray(
                np.ascontiguousarray(base[:, 3 * i : 3 * i + 64]), format="rgb24"
            )
            frame.pts, frame.time_base = i, Fraction(1, 25)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def _run(
    clip: Path, out: Path, model: dict[str, Any], **settings: Any
) -> tuple[PipelineReport, list[tuple[Frame, Frame, Outcome]]]:
    config = load_config(
        None,
        {
            "source": {"kind": "file", "path": str(clip)},
            "sink": {"kind": "file", "path": str(out)},
            "model": model,
            "gate.enabled": False,
            **settings,
        },
    )
    sent: list[tuple[Frame, Frame, Outcome]] = []
    pipeline = build_pipeline(
        config, on_output=lambda src, frame, outcome: sent.append((src, frame, outcome))
    )
    return asyncio.run(pipeline.run()), sent


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param({"layout": "NTCHW"}, id="NTCHW"),
        pytest.param({"layout": "NCTHW"}, id="NCTHW"),
        pytest.param({"layout": "N(T*C)HW"}, id="channel-stacked"),
        pytest.param({"layout": "NCHW", "t": 1, "slot": 0}, id="per-frame"),
        pytest.param(
            {"layout": "N(T*C)HW", "t": 3, "slot": 1, "order": "BGR", "value_range": (0, 255)},
            id="BGR-0..255",
        ),
        pytest.param(
            {"layout": "NCHW", "t": 1, "slot": 0, "uint8_input": True, "uint8_output": True}, id="uint8"
        ),
        pytest.param({"layout": "NCHW", "t": 1, "slot": 0, "scale": 2}, id="2x"),
    ],
)
@pytest.mark.parametrize("declared", [False, True], ids=["metadata", "config"])
@pytest.mark.parametrize("device_frames", [False, True], ids=["host-windows", "device-frames"])
def test_each_kind_runs_end_to_end(
    clip: Path, tmp_path: Path, kind: dict[str, Any], declared: bool, device_frames: bool
) -> None:
    """Device frames: the window made in the graph (``streamer.contract.layout.to_model_nodes``) on the CPU
    provider, each frame uploaded once, must give the very same frames as the host-made window."""
    path = kind_model(tmp_path / "model.onnx", metadata=not declared, **kind)
    model: dict[str, Any] = {"path": str(path), "device_frames": device_frames}
    if declared:
        model |= {
            "layout": kind["layout"],
            "channel_order": kind.get("order", "RGB"),
            "value_range": list(kind.get("value_range", (0, 1))),
            "scale": kind.get("scale", 1),
        }
    out = tmp_path / "out.mp4"
    report, sent = _run(clip, out, model)
    assert report.frames_in == report.frames_out == FRAMES
    assert [outcome for _, _, outcome in sent] == [Outcome.ENHANCED] * FRAMES
    scale = kind.get("scale", 1)
    for source, frame, _ in sent:
        np.testing.assert_array_equal(
            frame.pixels, kind_expected(source.pixels, kind.get("order", "RGB"), scale)
        )
    written = probe(out)
    assert (written.frames, written.width, written.height) == (FRAMES, 64 * scale, 48 * scale)


def test_frames_a_super_resolution_stream_passes_through_are_scaled_up_to_match(
    clip: Path, tmp_path: Path
) -> None:
    """A stride of 2 leaves every other frame unenhanced: those are scaled up (bicubic) to the output size."""
    path = kind_model(tmp_path / "model.onnx", layout="NCHW", t=1, slot=0, scale=2)
    out = tmp_path / "out.mp4"
    report, sent = _run(clip, out, {"path": str(path)}, **{"window.stride": 2, "window.scene_cut": None})
    outcomes = [outcome for _, _, outcome in sent]
    assert outcomes.count(Outcome.STRIDE_PASSTHROUGH) == FRAMES // 2
    for source, frame, outcome in sent:
        assert frame.pixels.shape == (96, 128, 3)
        if outcome is Outcome.STRIDE_PASSTHROUGH:
            np.testing.assert_array_equal(frame.pixels, upscale(source.pixels, 2))
    written = probe(out)
    assert (written.frames, written.width, written.height) == (FRAMES, 128, 96)
    assert report.frames_out == FRAMES


def test_declaring_a_shipped_model_is_refused_naming_the_settings() -> None:
    with pytest.raises(ConfigError, match=r"model\.layout.*set model\.path"):
        load_config(None, {"model.layout": "NCHW"})


def test_a_super_resolution_model_runs_on_tiles_of_a_large_frame(tmp_path: Path) -> None:
    """Tiles are pasted at the output's scale; this model has no reach, so tiles equal the whole frame."""
    path = kind_model(tmp_path / "model.onnx", layout="NCHW", t=1, slot=0, scale=2)
    config = load_config(
        None,
        {
            "source": {"kind": "synthetic", "width": 160, "height": 96, "frames": 4},
            "sink": {"kind": "null"},
            "model": {"path": str(path), "tile": 64, "tile_overlap": 8},
        },
    )
    sent: list[tuple[Frame, Frame]] = []
    report = asyncio.run(
        build_pipeline(config, on_output=lambda src, frame, _: sent.append((src, frame))).run()
    )
    assert report.frames_out == 4
    for source, frame in sent:
        np.testing.assert_array_equal(frame.pixels, kind_expected(source.pixels, scale=2))
