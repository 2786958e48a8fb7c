"""The model layouts, colour orders, value ranges, tensor types and output scales the runtime takes,
each on a small real ONNX model whose output is exact (tests.onnx_models.kind_model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from streamer.assets import STREAMING_LITE_MODEL
from streamer.backend.base import ChannelOrder, Declared, Layout
from streamer.backend.onnx import OnnxBackend
from streamer.cli.main import main
from streamer.errors import ConfigError, ModelError
from tests.onnx_models import kind_expected, kind_model

KINDS = [
    pytest.param({"layout": "NTCHW", "slot": 1}, id="NTCHW"),
    pytest.param({"layout": "NCTHW", "slot": 3}, id="NCTHW"),
    pytest.param({"layout": "N(T*C)HW", "slot": 4}, id="channel-stacked"),
    pytest.param({"layout": "NCHW", "t": 1, "slot": 0}, id="per-frame"),
    pytest.param({"layout": "N(T*C)HW", "t": 3, "slot": 0, "order": "BGR"}, id="stacked-T3-BGR"),
    pytest.param({"layout": "NTCHW", "slot": 2, "value_range": (-1.0, 1.0)}, id="range-1..1"),
    pytest.param({"layout": "NCHW", "t": 1, "slot": 0, "value_range": (0.0, 255.0)}, id="range-0..255"),
    pytest.param(
        {"layout": "NCHW", "t": 1, "slot": 0, "uint8_input": True, "uint8_output": True}, id="uint8"
    ),
    pytest.param({"layout": "NCTHW", "slot": 2, "uint8_input": True, "value_range": (-1, 1)}, id="uint8-in"),
    pytest.param({"layout": "NCHW", "t": 1, "slot": 0, "scale": 2}, id="2x"),
    pytest.param({"layout": "N(T*C)HW", "slot": 2, "scale": 4, "order": "BGR"}, id="4x-stacked-BGR"),
]


def _batch(t: int, h: int = 12, w: int = 20, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(2, t, 3, h, w), dtype=np.uint8)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_enhances_the_frame_at_its_slot(tmp_path: Path, kind: dict[str, Any]) -> None:
    backend = OnnxBackend(kind_model(tmp_path / "m.onnx", **kind))
    t, slot = kind.get("t", 5), kind["slot"]
    info = backend.info
    assert (info.t, info.layout.value, info.scale) == (t, kind["layout"], kind.get("scale", 1))
    assert info.channel_order.value == kind.get("order", "RGB")
    assert (info.uint8_input, info.uint8_output) == (
        kind.get("uint8_input", False),
        kind.get("uint8_output", False),
    )
    batch = _batch(t)
    out = backend.infer(batch)
    for b in range(2):
        frame = batch[b, slot].transpose(1, 2, 0)
        expected = kind_expected(frame, kind.get("order", "RGB"), kind.get("scale", 1))
        np.testing.assert_array_equal(out[b].transpose(1, 2, 0), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_without_metadata_runs_as_the_config_declares(tmp_path: Path, kind: dict[str, Any]) -> None:
    path = kind_model(tmp_path / "bare.onnx", metadata=False, **kind)
    declared = Declared(
        layout=Layout(kind["layout"]),
        channel_order=ChannelOrder(kind.get("order", "RGB")),
        value_range=kind.get("value_range", (0.0, 1.0)),
        scale=kind.get("scale", 1),
    )
    backend = OnnxBackend(path, declared=declared)
    batch = _batch(kind.get("t", 5), seed=1)
    frame = batch[0, kind["slot"]].transpose(1, 2, 0)
    expected = kind_expected(frame, kind.get("order", "RGB"), kind.get("scale", 1))
    np.testing.assert_array_equal(backend.infer(batch[:1])[0].transpose(1, 2, 0), expected)


@pytest.mark.parametrize(
    ("kind", "layout"),
    [({"layout": "N(T*C)HW"}, Layout.STACKED), ({"layout": "NCHW", "t": 1, "slot": 0}, Layout.NCHW)],
)
def test_rank_four_inputs_are_read_from_their_channel_count(
    tmp_path: Path, kind: dict[str, Any], layout: Layout
) -> None:
    backend = OnnxBackend(kind_model(tmp_path / "bare.onnx", metadata=False, **kind))
    assert backend.info.layout is layout


def test_the_scale_is_read_from_static_shapes_too(tmp_path: Path) -> None:
    """Without streamer.scale, static input and output sizes show it."""
    path = kind_model(tmp_path / "m.onnx", layout="NCHW", t=1, slot=0, scale=2, metadata=False)
    model = onnx.load(path)
    for dims, size in (
        (model.graph.input[0].type.tensor_type.shape.dim, 16),
        (model.graph.output[0].type.tensor_type.shape.dim, 32),
    ):
        dims[2].dim_value = dims[3].dim_value = size
    onnx.save(model, path)
    backend = OnnxBackend(path)
    assert backend.info.scale == 2
    out = backend.infer(_batch(1, 16, 16))
    assert out.shape == (2, 3, 32, 32)


def test_a_stacked_input_that_is_not_three_per_frame_says_what_to_declare(tmp_path: Path) -> None:
    path = kind_model(tmp_path / "m.onnx", layout="N(T*C)HW", metadata=False)
    model = onnx.load(path)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 16
    onnx.save(model, path)
    with pytest.raises(ModelError, match=r"channel axis is not a static multiple of 3.*model\.layout"):
        OnnxBackend(path)


def test_a_declared_layout_of_the_wrong_rank_is_refused_before_any_frame(tmp_path: Path) -> None:
    path = kind_model(tmp_path / "m.onnx", layout="NTCHW")
    with pytest.raises(ModelError, match=r"rank 5\), but layout N\(T\*C\)HW is rank 4"):
        OnnxBackend(path, declared=Declared(layout=Layout.STACKED))


def test_a_per_frame_model_of_several_frames_is_refused(tmp_path: Path) -> None:
    path = kind_model(tmp_path / "m.onnx", layout="N(T*C)HW", t=2, slot=0, metadata=False)
    with pytest.raises(ModelError, match=r"has 6 channels; a per-frame \(NCHW\) model takes 3"):
        OnnxBackend(path, declared=Declared(layout=Layout.NCHW))


def test_a_streaming_model_refuses_declarations(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"streaming model.*remove model\.layout"):
        OnnxBackend(STREAMING_LITE_MODEL, declared=Declared(channel_order=ChannelOrder.BGR))


def test_model_inspect_prints_the_contract_and_where_each_part_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = kind_model(tmp_path / "bare.onnx", layout="N(T*C)HW", t=3, slot=1, metadata=False)
    argv = [
        "model",
        "inspect",
        str(path),
        "--channel-order",
        "BGR",
        "--value-range=-1,1",
        "--seconds",
        "0",
    ]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["layout"], report["t"], report["channel_order"], report["value_range"]) == (
        "N(T*C)HW",
        3,
        "BGR",
        [-1.0, 1.0],
    )
    assert report["sources"] == {
        "layout": "default/shape",
        "channel_order": "flag",
        "value_range": "flag",
        "scale": "inferred from a probe",  # dynamic sizes and no metadata: one call says 1
    }
    assert report["fps"] is None
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "N(T*C)HW (B, T*C, H, W), frames stacked on channels [default/shape]" in text
    assert "BGR [flag]" in text


def test_model_inspect_times_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = kind_model(tmp_path / "m.onnx", layout="NCHW", t=1, slot=0, scale=2)
    assert main(["model", "inspect", str(path), "--size", "64x48", "--seconds", "0.2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fps"] > 0
    assert (report["scale"], report["sources"]["scale"]) == (2, "metadata")


def test_model_inspect_of_a_model_it_cannot_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = kind_model(tmp_path / "bare.onnx", layout="N(T*C)HW", metadata=False)
    assert main(["model", "inspect", str(path), "--layout", "NCHW", "--seconds", "0"]) == 2
    assert (
        "a per-frame (NCHW) model takes 3. For 5 frames stacked, declare layout N(T*C)HW"
        in capsys.readouterr().err
    )
