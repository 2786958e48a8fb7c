"""Do no harm: the share of a model's change a stream gets by its quantizer and noise, the quantizer a
decoder states, and frames that carry part of a change in their planes and their RGB alike."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import onnx
import pytest

from export.calibrate_blend import Measured, blend_of
from export.calibrate_blend import main as calibrate_main
from streamer.app import build_blend
from streamer.backend.onnx import OnnxBackend
from streamer.config import ModelConfig
from streamer.contract import Key
from streamer.core.blend import FULL, Blend, QuantizerEstimate
from streamer.errors import ConfigError, ModelError
from streamer.frame import Colour, Frame, Yuv420
from streamer.measure.delivered import identity_model
from streamer.measure.roundtrip import crf_roundtrip, x264_roundtrip
from streamer.media.quantizer import DECODER_OPTIONS, quantizer
from streamer.sources import FileSource
from tests.unit.test_yuv import picture, swscale_planes

BLEND_28_33 = Blend((28.0, 33.0), (0.5, 1.0))


def test_the_weight_ramps_on_the_quantizer_and_the_noise_and_takes_the_larger() -> None:
    assert BLEND_28_33.weight(20.0, 0.1) == 0.0  # a good stream, no noise: none of the change
    assert BLEND_28_33.weight(28.0, 0.5) == 0.0
    assert BLEND_28_33.weight(30.5, 0.1) == pytest.approx(0.5)
    assert BLEND_28_33.weight(33.0, 0.1) == 1.0
    assert BLEND_28_33.weight(45.0, None) == 1.0
    assert BLEND_28_33.weight(20.0, 0.75) == pytest.approx(0.5)  # noise alone is worth repairing
    assert BLEND_28_33.weight(30.5, 0.9) == pytest.approx(0.8)
    assert BLEND_28_33.weight(20.0, 3.0) == 1.0


def test_a_stream_whose_decoder_states_no_quantizer_gets_the_whole_change() -> None:
    assert BLEND_28_33.weight(None, 0.0) == 1.0
    assert FULL.weight(0.0, 0.0) == 1.0
    assert FULL.weight(None, None) == 1.0


def test_a_blend_is_parsed_from_its_text_and_a_bad_one_refused_naming_the_form() -> None:
    assert Blend.parse("28:33,0.5:1", "model.blend") == BLEND_28_33
    assert Blend.parse(BLEND_28_33.describe(), "x") == BLEND_28_33
    for bad in ("28:33", "28,33", "a:b,c:d", "28:33:40,0.5:1", "33:28,0.5:1"):
        with pytest.raises(ConfigError, match=r"model\.blend"):
            Blend.parse(bad, "model.blend")


def test_the_config_takes_auto_off_or_ramps() -> None:
    assert build_blend(ModelConfig()) is None
    assert build_blend(ModelConfig(blend="off")) is FULL
    assert build_blend(ModelConfig(blend="28:33,0.5:1")) == BLEND_28_33
    with pytest.raises(ValueError, match=r"QP_NONE:QP_FULL,SIGMA_NONE:SIGMA_FULL"):
        ModelConfig(blend="strong")


def test_the_quantizer_estimate_is_the_median_of_recent_frames_that_state_one() -> None:
    estimate = QuantizerEstimate(window=3)
    assert estimate.quantizer is None
    estimate.observe(None)
    assert estimate.quantizer is None
    for qp in (30.0, 40.0, 20.0, None, 26.0):
        estimate.observe(qp)
    assert estimate.quantizer == 26.0  # median of 40, 20, 26: the first has left the window
    with pytest.raises(ConfigError, match="at least one frame"):
        QuantizerEstimate(window=0)


def test_a_frame_given_part_of_a_change_carries_that_share_in_its_planes_and_rgb() -> None:
    colour = Colour(6, 1)
    planes = swscale_planes(np.full((48, 80, 3), 100, np.uint8), colour)
    frame = Frame(planes, 0, 0, Fraction(1, 30), 0.0)
    brighter = np.clip(frame.pixels.astype(np.int16) + 40, 0, 255).astype(np.uint8)
    half = frame.enhanced(brighter, 0.5)
    made = half.planes
    assert made is not None
    assert np.abs(made.y.astype(np.int16) - planes.y - round(20 * 219 / 255)).max() <= 1
    assert np.abs(half.pixels.astype(np.int16) - frame.pixels - 20).max() <= 1
    assert half.picture is brighter  # the model's own output, as made
    assert frame.enhanced(brighter, 0.0) is frame  # none of it: the frame as it came
    whole = frame.enhanced(brighter, 1.0)
    assert whole.pixels is brighter
    rgb_source = Frame(picture(), 0, 0, Fraction(1, 30), 0.0)
    quarter = rgb_source.enhanced(picture(1), 0.25)
    expected = np.rint(rgb_source.pixels + 0.25 * (picture(1).astype(np.float32) - rgb_source.pixels))
    assert np.array_equal(quarter.pixels, expected.astype(np.uint8))
    assert quarter.planes is None


def test_a_decoder_states_each_frames_mean_h264_quantizer(tmp_path: Path) -> None:
    """A stream coded at a high CRF reads a high quantizer, one coded losslessly 0, frame by frame; a
    decoder not asked for it states none."""
    clip = np.stack([picture(i) for i in range(4)])
    fps = Fraction(25)
    coarse, fine = tmp_path / "coarse.mp4", tmp_path / "fine.mp4"
    crf_roundtrip(clip, fps, 40, keep=coarse)
    x264_roundtrip(clip, fps, {"preset": "ultrafast", "qp": "0"}, keep=fine)

    def read(path: Path, options: dict[str, str]) -> list[float | None]:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.codec_context.options = options
            return [quantizer(frame) for frame in container.decode(stream)]

    coarse_qp = read(coarse, DECODER_OPTIONS)
    assert len(coarse_qp) == 4
    assert all(q is not None and 35.0 <= q <= 51.0 for q in coarse_qp)
    assert read(fine, DECODER_OPTIONS) == [0.0] * 4
    assert read(coarse, {}) == [None] * 4


def test_a_file_source_hands_each_frame_its_quantizer(tmp_path: Path) -> None:
    stream = tmp_path / "crf35.mp4"
    crf_roundtrip(np.stack([picture(i) for i in range(3)]), Fraction(25), 35, keep=stream)

    async def frames() -> list[Frame]:
        source = FileSource(stream)
        await source.open()
        try:
            return [await source.recv() for _ in range(3)]
        finally:
            await source.aclose()

    assert all(f.quantizer is not None and 25.0 <= f.quantizer <= 51.0 for f in asyncio.run(frames()))


def test_a_model_states_its_blend_in_its_metadata_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    path = identity_model(tmp_path / "identity.onnx")
    assert OnnxBackend(path, threads=1).info.blend is FULL
    model = onnx.load(str(path))
    model.metadata_props.add(key=Key.BLEND, value="28:33,0.5:1")
    onnx.save(model, str(path))
    assert OnnxBackend(path, threads=1).info.blend == BLEND_28_33
    model.metadata_props[-1].value = "strong"
    onnx.save(model, str(path))
    with pytest.raises(ModelError, match=r"streamer\.blend"):
        OnnxBackend(path, threads=1)


def _stream(key: str, quantizer: float, sigma: float, gain: float, noisy: bool = False) -> Measured:
    return Measured(key, noisy, quantizer, sigma, 30.0, 30.0 + gain)


def test_the_calibration_ramps_end_at_the_last_clear_harm_and_above_the_clips_own_texture() -> None:
    """No change up to the highest quantizer of a quiet stream harmed by more than the tolerance, all of
    it from the next quiet stream up; the noise ramp from the quiet streams' highest estimate to twice
    it. A model that harmed nothing clearly keeps its whole change."""
    measured = [
        _stream("clean", 0.0, 2.0, -2.0),
        _stream("crf18", 20.0, 1.8, -1.0),
        _stream("crf27", 30.0, 1.5, -0.2),  # within the tolerance: the ramp starts below it
        _stream("crf33", 37.0, 1.2, +0.1),
        _stream("noisy", 33.0, 1.7, -0.9, noisy=True),  # a noisy stream does not set the quantizer ramp
    ]
    assert blend_of(measured, tolerance=0.5) == Blend((20.0, 30.0), (2.0, 4.0))
    assert blend_of(measured, tolerance=0.1) == Blend((30.0, 37.0), (2.0, 4.0))
    assert blend_of([_stream("crf30", 33.0, 1.0, -0.3)], tolerance=0.5) is FULL
    assert blend_of([_stream("clean", 0.0, 1.0, -3.0)], tolerance=0.5) == Blend((0.0, 51.0), (1.0, 2.0))


def test_the_calibration_writes_what_it_derived_from_earlier_figures_into_the_model_and_its_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = identity_model(tmp_path / "m.onnx")
    card = tmp_path / "m.json"
    card.write_text(json.dumps({"name": "m", "size_bytes": 1}))
    figures = tmp_path / "figures.json"
    measured = [_stream("clean", 0.0, 2.0, -2.0), _stream("crf33", 37.0, 1.2, +0.1)]
    figures.write_text(json.dumps([dataclasses.asdict(m) | {"gain": m.gain} for m in measured]))

    assert calibrate_main(["--model", str(model), "--measured", str(figures), "--write"]) == 0

    assert "blend (QP_NONE:QP_FULL,SIGMA_NONE:SIGMA_FULL): 0:37,2:4" in capsys.readouterr().out
    assert OnnxBackend(model, threads=1).info.blend == Blend((0.0, 37.0), (2.0, 4.0))
    written = json.loads(card.read_text())
    assert written["blend"]["ramps"] == "0:37,2:4"
    assert written["size_bytes"] == model.stat().st_size
    figures.write_text("[{}]")
    with pytest.raises(SystemExit, match="not figures written by --json"):
        calibrate_main(["--model", str(model), "--measured", str(figures)])


def test_planes_a_model_made_on_a_device_carry_their_share_of_the_change_too() -> None:
    """``model.yuv420``: the model's output comes as planes in the stream's colour; given half the
    change, each plane moves half way from the decoder's; given none, the frame is the decoder's."""
    colour = Colour(6, 1)
    came = swscale_planes(np.full((48, 80, 3), 100, np.uint8), colour)
    made = swscale_planes(np.full((48, 80, 3), 140, np.uint8), colour)
    frame = Frame(came, 0, 0, Fraction(1, 30), 0.0)
    half = frame.enhanced(made, 0.5).planes
    assert half is not None
    expected = np.rint((came.y.astype(np.float32) + made.y) / 2)
    assert np.array_equal(half.y, expected.astype(np.uint8))
    assert frame.enhanced(made, 0.0) is frame
    assert frame.enhanced(made, 1.0).planes is made
    other = Yuv420(made.y, made.u, made.v, Colour(1, 1))  # another colour: nothing to blend with
    assert frame.enhanced(other, 0.5).planes is other
