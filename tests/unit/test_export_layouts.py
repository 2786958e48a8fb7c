"""Exporting every kind of model the runtime takes: each layout, BGR, other value ranges, uint8 input,
super-resolution; one error listing every missing attribute; a layout or slot declared wrongly refused.

Each model is a real torch module exported to a real ONNX file and run by onnxruntime.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn
from torch.nn import functional

from export.cli import main
from export.contract import Contract
from export.onnx_export import export_onnx
from export.probe import slot_shares
from streamer.backend.base import ChannelOrder, Layout
from streamer.contract.layout import to_model_layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError

HERE = "tests.unit.test_export_layouts"


class PickFrame(nn.Module):
    """Enhances the frame at ``slot`` of a window laid out as ``reads`` with a residual 3x3 conv.

    It declares nothing (the CLI's flags do), so a test can declare it rightly or wrongly; ``reads``
    and ``slot`` are named so the exporter does not take them for ``layout`` and a target.
    """

    def __init__(self, reads: str, slot: int) -> None:
        super().__init__()
        self.reads, self.slot = reads, slot
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.slot
        if self.reads == "NTCHW":
            frame = x[:, k]
        elif self.reads == "NCTHW":
            frame = x[:, :, k]
        elif self.reads == "N(T*C)HW":
            frame = x[:, 3 * k : 3 * k + 3]
        elif self.reads == "N(C*T)HW":  # channel-major stacking, T = 3: what the runtime never feeds
            frame = x[:, k::3]
        else:
            frame = x
        out: torch.Tensor = frame + 0.1 * self.conv(frame)
        return out


def make_picker(reads: str = "NTCHW", slot: int = 1) -> nn.Module:
    torch.manual_seed(0)
    return PickFrame(reads, slot)


class Bare(nn.Module):
    """A per-window model with no attributes at all."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 1]


def make_bare() -> nn.Module:
    return Bare()


class Uint8Net(nn.Module):
    """Takes uint8 pixels (B, 3, H, W) and returns uint8 pixels, or float ones in 0..255."""

    uint8_input = True

    def __init__(self, uint8_output: bool) -> None:
        super().__init__()
        self.uint8_output = uint8_output
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pixels = x.float()
        out: torch.Tensor = pixels + 10.0 * self.conv(pixels / 255.0)
        return out.round().clamp(0, 255).to(torch.uint8) if self.uint8_output else out


def make_uint8(uint8_output: bool = True) -> nn.Module:
    torch.manual_seed(0)
    return Uint8Net(uint8_output)


class Upscale(nn.Module):
    """A per-frame super-resolution net: nearest upscale plus a learned sub-pixel residual."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor
        self.conv = nn.Conv2d(3, 3 * factor * factor, 3, padding=1)
        self.shuffle = nn.PixelShuffle(factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = functional.interpolate(x, scale_factor=self.factor, mode="nearest")
        out: torch.Tensor = up + 0.1 * self.shuffle(self.conv(x))
        return out


def make_upscale(factor: int = 2) -> nn.Module:
    torch.manual_seed(0)
    return Upscale(factor)


def _meta(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(path).metadata_props}


def _export(tmp_path: Path, factory: str, *args: str) -> tuple[int, Path]:
    out = tmp_path / "m.onnx"
    return main(["export", "--factory", f"{HERE}:{factory}", *args, "--out", str(out), "--no-bench"]), out


@pytest.mark.parametrize(
    ("layout", "t", "position", "slot"),
    [("NTCHW", 5, "center", 2), ("NCTHW", 3, "last", 2), ("N(T*C)HW", 3, "center", 1), ("NCHW", 1, None, 0)],
)
def test_each_layout_exports_from_the_cli_and_its_metadata_leads_the_runtime_to_the_target_frame(
    tmp_path: Path, layout: str, t: int, position: str | None, slot: int
) -> None:
    flags = ["--model-arg", f"reads={layout}", "--model-arg", f"slot={slot}", "--layout", layout]
    if layout != "NCHW":  # a per-frame model needs its layout only
        flags += ["--t", str(t), "--position", str(position)]
    code, out = _export(tmp_path, "make_picker", *flags)
    assert code == 0
    meta = _meta(out)
    assert (meta["streamer.layout"], meta["streamer.t"]) == (layout, str(t))
    assert meta["streamer.output_position"] == (position or "center")
    assert "streamer.channel_order" not in meta  # defaults stay implicit
    assert "streamer.scale" not in meta
    assert json.loads(out.with_suffix(".json").read_text())["layout"] == layout

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert len(session.get_inputs()[0].shape) == Layout(layout).rank
    window = np.random.default_rng(3).uniform(0, 1, (2, t, 3, 24, 40)).astype(np.float32)
    x = np.ascontiguousarray(to_model_layout(window, Layout(layout)))
    (y,) = session.run(None, {"frames": x})
    with torch.no_grad():
        expected = make_picker(layout, slot)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, expected, atol=1e-5)
    # Fed as the metadata says, the output is the target slot's frame (plus the small residual).
    errors = [float(np.abs(y - window[:, k]).mean()) for k in range(t)]
    assert int(np.argmin(errors)) == slot


def test_bgr_model_writes_its_channel_order_and_a_contradicting_flag_is_refused(tmp_path: Path) -> None:
    code, out = _export(
        tmp_path, "make_picker", "--layout", "NCHW", "--model-arg", "reads=NCHW", "--channel-order", "BGR"
    )
    assert code == 0
    assert _meta(out)["streamer.channel_order"] == "BGR"
    assert json.loads(out.with_suffix(".json").read_text())["channel_order"] == "BGR"

    module = make_picker("NCHW")
    module.channel_order = "BGR"  # type: ignore[assignment]
    with pytest.raises(
        ConfigError, match=r"channel_order='RGB' was given but the module's channel_order is 'BGR'"
    ):
        export_onnx(module, tmp_path / "x.onnx", name="x", layout=Layout.NCHW, channel_order=ChannelOrder.RGB)


def test_value_range_flag_writes_the_range_and_parity_is_judged_in_its_span(tmp_path: Path) -> None:
    code, out = _export(
        tmp_path, "make_picker", "--layout", "NCHW", "--model-arg", "reads=NCHW", "--value-range=-1,1"
    )
    assert code == 0
    assert _meta(out)["streamer.value_range"] == "-1,1"
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["value_range"] == [-1.0, 1.0]
    assert card["parity_max_abs_error"] <= 1e-4


@pytest.mark.parametrize(
    ("uint8_output", "flags", "value_range"), [(True, [], None), (False, ["--value-range=0,255"], "0,255")]
)
def test_uint8_input_model_takes_pixels_and_a_float_output_keeps_its_value_range(
    tmp_path: Path, uint8_output: bool, flags: list[str], value_range: str | None
) -> None:
    arg = f"uint8_output={json.dumps(uint8_output)}"
    code, out = _export(tmp_path, "make_uint8", "--model-arg", arg, "--layout", "NCHW", *flags)
    assert code == 0
    assert _meta(out).get("streamer.value_range") == value_range  # uint8 in and out: nothing to map
    card = json.loads(out.with_suffix(".json").read_text())
    assert (card["uint8_input"], card["uint8_output"]) == (True, uint8_output)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(uint8)"
    assert session.get_outputs()[0].type == ("tensor(uint8)" if uint8_output else "tensor(float)")
    x = np.random.default_rng(4).integers(0, 256, (1, 3, 20, 28), dtype=np.uint8)
    (y,) = session.run(None, {"frames": x})
    with torch.no_grad():
        expected = make_uint8(uint8_output)(torch.from_numpy(x)).numpy().astype(np.float32)
    assert np.abs(y.astype(np.float32) - expected).max() <= 1.0  # a uint8 output may round a level apart


def test_a_uint8_input_is_checked_against_what_the_module_takes_and_returns(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"raised RuntimeError on a uint8 input of shape \(1, 3, 64, 96\)"):
        export_onnx(make_picker("NCHW"), tmp_path / "x.onnx", name="x", layout=Layout.NCHW, uint8_input=True)
    # Float pixels out with the default range 0..1 would be read as 255 times too bright.
    with pytest.raises(
        ConfigError, match=r"returns floats up to 2\d\d\.?\d*, far beyond its value range 0,1"
    ):
        export_onnx(make_uint8(uint8_output=False), tmp_path / "x.onnx", name="x", layout=Layout.NCHW)


def test_super_resolution_model_exports_with_its_scale_and_the_output_size_is_checked(tmp_path: Path) -> None:
    code, out = _export(tmp_path, "make_upscale", "--layout", "NCHW", "--scale", "2")
    assert code == 0
    assert _meta(out)["streamer.scale"] == "2"
    assert json.loads(out.with_suffix(".json").read_text())["scale_factor"] == 2
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(5).uniform(0, 1, (1, 3, 20, 28)).astype(np.float32)
    (y,) = session.run(None, {"frames": x})
    assert y.shape == (1, 3, 40, 56)

    for given, hint in ((None, "declare scale=2"), (4, "its output is 2x the input's size")):
        with pytest.raises(ModelError, match=hint):
            export_onnx(make_upscale(), tmp_path / "x.onnx", name="x", layout=Layout.NCHW, scale=given)
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.parametrize(
    ("reads", "declared", "other"),
    [("NCTHW", "NTCHW", "NCTHW"), ("NTCHW", "NCTHW", "NTCHW"), ("N(C*T)HW", "N(T*C)HW", "channel-major")],
)
def test_a_layout_given_wrongly_when_t_equals_c_is_refused_with_the_evidence(
    tmp_path: Path, reads: str, declared: str, other: str
) -> None:
    """At T = C = 3 the shapes agree and so would parity: only the probe tells the readings apart."""
    module = make_picker(reads, slot=1)
    with pytest.raises(ConfigError) as caught:
        export_onnx(
            module,
            tmp_path / "x.onnx",
            name="x",
            t=3,
            layout=Layout(declared),
            output_position=OutputPosition.CENTER,
        )
    message = str(caught.value)
    assert f"'x' is declared {declared} but reads as {other}" in message
    shares = [float(v) for v in message.split("shares by slot ")[2].split(",")[0].split()]
    assert shares[1] > 0.95  # the other reading: slot 1 drives the output
    declared_shares = [float(v) for v in message.split("shares by slot ")[1].split(",")[0].split()]
    assert max(declared_shares) < 0.5  # the declared reading: an even spread, no slot drives
    assert "\n" not in message
    assert not (tmp_path / "x.onnx").exists()


def test_the_t_equals_c_mislabel_is_refused_from_the_cli_and_the_true_layout_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--model-arg", "reads=NCTHW", "--t", "3", "--position", "center"]
    code, out = _export(tmp_path, "make_picker", *common, "--layout", "NTCHW")
    err = capsys.readouterr().err
    assert code == 2
    assert "is declared NTCHW but reads as NCTHW" in err
    assert err.count("\n") == 1
    assert not out.exists()
    code, out = _export(tmp_path, "make_picker", *common, "--layout", "NCTHW")
    assert code == 0
    assert _meta(out)["streamer.layout"] == "NCTHW"


def test_an_output_slot_declared_wrongly_is_refused_naming_the_slot_that_drives(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"declared to enhance slot 2 \(center\) of 5, but slot 4 drives"
    ) as caught:
        export_onnx(
            make_picker("NTCHW", slot=4),
            tmp_path / "x.onnx",
            name="x",
            t=5,
            layout=Layout.NTCHW,
            output_position=OutputPosition.CENTER,
        )
    assert "--position last" in str(caught.value)


def test_an_even_blend_of_the_window_contradicts_neither_reading(tmp_path: Path) -> None:
    class MeanOfWindow(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mean(dim=1)

    module = MeanOfWindow()
    contract = Contract("m", 3, Layout.NTCHW, OutputPosition.CENTER, (0.0, 1.0), 1, ())
    for swapped in (False, True):
        assert slot_shares(module, contract, swapped=swapped) == pytest.approx([1 / 3] * 3, abs=0.02)
    report = export_onnx(
        module, tmp_path / "m.onnx", name="m", t=3, layout=Layout.NTCHW, output_position=OutputPosition.CENTER
    )
    assert report.path.exists()


def test_every_missing_attribute_is_listed_in_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _export(tmp_path, "make_bare")
    lines = capsys.readouterr().err.splitlines()
    assert code == 2
    assert lines == [
        "streamer export: error: cannot export 'm': 3 problems, one per line:",
        "  the module has no attribute 'layout' and none was given; pass layout= (CLI: --layout) or set "
        "the module's layout",
        "  the module has no attribute 't' and none was given; pass t= (CLI: --t) or set the module's t",
        "  the module has no attribute 'output_position' and none was given; pass output_position= "
        "(CLI: --position) or set the module's output_position",
    ]
    assert not out.exists()


def test_invalid_and_contradicting_attributes_are_listed_together(tmp_path: Path) -> None:
    module = Bare()
    module.t = 0  # type: ignore[assignment]
    module.layout = "NHWC"  # type: ignore[assignment]
    module.value_range = (1.0, 0.0)  # type: ignore[assignment]
    module.scale_factor = 1.5  # type: ignore[assignment]
    module.pad_multiple = 8  # type: ignore[assignment]
    with pytest.raises(ConfigError) as caught:
        export_onnx(
            module, tmp_path / "x.onnx", name="x", output_position=OutputPosition.LAST, pad_multiple=4
        )
    lines = str(caught.value).splitlines()
    assert lines[0] == "cannot export 'x': 5 problems, one per line:"
    for needle in (
        "pad_multiple=4 was given but the module's pad_multiple is 8",
        "layout='NHWC' is not one of NTCHW | NCTHW | N(T*C)HW | NCHW",
        "t=0 must be a positive integer",
        "value_range=[1.0, 0.0] must be (lo, hi) with lo < hi",
        "scale=1.5 must be a positive integer; pass scale= (CLI: --scale) or set the module's scale_factor",
    ):
        assert sum(needle in line for line in lines[1:]) == 1, needle


@pytest.mark.parametrize("value", ["1", "0,a", "0,1,2"])
def test_a_malformed_value_range_flag_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, _ = _export(tmp_path, "make_picker", "--layout", "NCHW", f"--value-range={value}")
    err = capsys.readouterr().err
    assert code == 2
    assert f"--value-range takes LO,HI (e.g. 0,1 or -1,1 or 0,255), got {value!r}" in err
    assert err.count("\n") == 1
