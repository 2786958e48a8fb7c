"""Exporting the trainable models and users' own: parity, recurrent state metadata, clear failures, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from examples.mymodels import make_recurrent_denoiser
from export.card import benchmark_cpu
from export.cli import main
from export.cli_args import ARCH_NAMES as _ARCHS
from export.models import ARCHITECTURES, Conv3dEnhancer, ConvGRUEnhancer, ConvLSTMEnhancer
from export.objective import zero_states
from export.onnx_export import export_onnx
from export.parity import PARITY_TOLERANCE, SEQUENCE_STEPS
from streamer.backend.base import Layout
from streamer.backend.onnx import OnnxBackend
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError

ROOT = Path(__file__).resolve().parents[2]
TINY_CONV3D = {"embed": 4, "features": 8, "channels": 8, "blocks": 1}
TINY_GRU = {"features": 8, "channels": 8, "hidden": 6, "blocks": 1}
TINY_LSTM = {"features": 8, "channels": 8, "hidden": 6, "blocks": 1}


class TinyUserModel(nn.Module):
    """A user's model with none of the registry's attributes: the CLI flags describe it."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.out = nn.Conv2d(width, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, 3, H, W)
        last = x[:, -1]
        return last + self.out(torch.relu(self.conv(last)))


def make_tiny(width: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return TinyUserModel(width)


class _Decomposes(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.linalg.svd(x).S
        return x - 1e-3 * s[..., :1, None]


class UsesSvd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 3, 1)
        self.whitening = _Decomposes()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.whitening(self.stem(x[:, :, 0]))


def _meta(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(path).metadata_props}


@pytest.mark.parametrize("t", [5, 1])
def test_conv3d_exports_with_parity_and_its_own_metadata(tmp_path: Path, t: int) -> None:
    torch.manual_seed(0)
    model = Conv3dEnhancer(t=t, **TINY_CONV3D)
    report = export_onnx(model, tmp_path / "c.onnx", name=f"c{t}")
    assert report.parity_max_abs_error <= PARITY_TOLERANCE
    assert report.parity_real_max_abs_error is not None
    assert report.parity_real_max_abs_error <= PARITY_TOLERANCE
    assert _meta(report.path) == {
        "streamer.name": f"c{t}",
        "streamer.t": str(t),
        "streamer.layout": "NTCHW",
        "streamer.output_position": "center",
        "streamer.value_range": "0,1",
        "streamer.pad_multiple": "4",
    }
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).uniform(0, 1, (3, t, 3, 20, 36)).astype(np.float32)
    (y,) = session.run(None, {"frames": x})
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, expected, atol=1e-5)


def test_convgru_exports_its_state_as_named_inputs_and_outputs_with_metadata(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = ConvGRUEnhancer(**TINY_GRU).eval()
    report = export_onnx(model, tmp_path / "g.onnx", name="g")
    assert report.parity_max_abs_error <= PARITY_TOLERANCE
    assert report.parity_real_max_abs_error is not None
    meta = _meta(report.path)
    assert json.loads(meta["streamer.state"]) == [
        {"input": "state", "output": "state_next", "channels": 6, "scale": 4}
    ]
    assert (meta["streamer.t"], meta["streamer.layout"], meta["streamer.output_position"]) == (
        "1",
        "NTCHW",
        "last",
    )
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["frames", "state"]
    assert [o.name for o in session.get_outputs()] == ["enhanced", "state_next"]
    state_input = session.get_inputs()[1]
    assert isinstance(state_input.shape[0], str)
    assert state_input.shape[1] == 6
    # The runtime's loop: zeros first, then each output state into the next call; odd padded sizes.
    frames = np.random.default_rng(1).uniform(0, 1, (4, 2, 1, 3, 20, 28)).astype(np.float32)
    state = np.zeros((2, 6, 5, 7), np.float32)
    torch_state = torch.from_numpy(state)
    for x in frames:
        y, state = session.run(None, {"frames": x, "state": state})
        with torch.no_grad():
            expected, torch_state = model(torch.from_numpy(x), torch_state)
        np.testing.assert_allclose(y, expected.numpy(), atol=1e-5)
        np.testing.assert_allclose(state, torch_state.numpy(), atol=1e-5)


def test_convlstm_exports_three_states_and_matches_pytorch_over_a_sequence_of_steps(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = ConvLSTMEnhancer(**TINY_LSTM).eval()
    report = export_onnx(model, tmp_path / "l.onnx", name="l")
    assert report.parity_sequence_steps == SEQUENCE_STEPS
    assert report.parity_sequence_max_abs_error is not None
    assert report.parity_sequence_max_abs_error <= PARITY_TOLERANCE
    assert json.loads(_meta(report.path)["streamer.state"]) == [
        {"input": "hidden", "output": "hidden_next", "channels": 6, "scale": 4},
        {"input": "cell", "output": "cell_next", "channels": 6, "scale": 4},
        {"input": "previous", "output": "previous_next", "channels": 4, "scale": 1},
    ]
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["frames", "hidden", "cell", "previous"]
    # The runtime's loop over a whole clip of frames that change smoothly, at an odd padded size: each
    # side carries its own states from zeros, so an error that grew through the states would show.
    rng = np.random.default_rng(2)
    base = rng.uniform(0, 1, (2, 1, 3, 20, 28)).astype(np.float32)
    frames = [
        np.clip(base + 0.05 * rng.standard_normal(base.shape), 0, 1).astype(np.float32) for _ in range(24)
    ]
    ours = [s.numpy() for s in zero_states(model, torch.from_numpy(base))]
    theirs = zero_states(model, torch.from_numpy(base))
    for x in frames:
        y, *ours = session.run(None, {"frames": x, "hidden": ours[0], "cell": ours[1], "previous": ours[2]})
        with torch.no_grad():
            expected, *theirs = model(torch.from_numpy(x), *theirs)
        np.testing.assert_allclose(y, expected.numpy(), atol=1e-5)
        for got, want in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_a_convlstm_export_is_rebuilt_from_its_onnx_file_to_warm_start_a_fine_tune(tmp_path: Path) -> None:
    """The tensors its forward reshapes (embeddings, fusion, ``up``, head and blend as one convolution)
    come back from the graph's nodes, its arguments from the model card beside it."""
    from export.distill import init_weights, warm_start
    from export.recover import convlstm_from_onnx, rebuild
    from streamer.assets import ASSETS

    torch.manual_seed(0)
    model = ConvLSTMEnhancer(**TINY_LSTM, strength=True).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # trained: every part of the recurrence moves the output
    report = export_onnx(model, tmp_path / "l.onnx", name="l")
    with pytest.raises(ConfigError, match="does not say its ConvLSTMEnhancer arguments"):
        convlstm_from_onnx(report.path)
    (tmp_path / "l.json").write_text(json.dumps({"parameters": model.config()}))  # as streamer export writes
    rebuilt = convlstm_from_onnx(report.path)
    assert rebuilt.config() == model.config()
    for key, value in model.state_dict().items():
        assert torch.allclose(rebuilt.state_dict()[key], value, atol=1e-6), key
    student = ConvLSTMEnhancer(**TINY_LSTM, strength=True)
    assert set(warm_start(student, init_weights(report.path, student))) == set(model.state_dict())

    shipped = rebuild(ASSETS / "convlstm_strength.onnx")
    assert isinstance(shipped, ConvLSTMEnhancer)
    assert shipped.takes_strength
    (tmp_path / "c.json").write_text(json.dumps({"parameters": {**model.config(), "hidden": 7}}))
    (tmp_path / "c.onnx").write_bytes(report.path.read_bytes())
    with pytest.raises(ModelError, match="not an exported ConvLSTMEnhancer"):
        rebuild(tmp_path / "c.onnx")  # a card that does not match the graph


def test_unsupported_op_error_names_the_op_and_the_module_using_it(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as caught:
        export_onnx(
            UsesSvd(),
            tmp_path / "s.onnx",
            name="svd",
            t=1,
            layout=Layout.NCTHW,
            output_position=OutputPosition.CENTER,
        )
    message = str(caught.value)
    assert "torch could not export 'svd'" in message
    assert "linalg_svd" in message
    assert "module 'whitening' (_Decomposes)" in message
    assert not (tmp_path / "s.onnx").exists()


def test_wrong_output_shape_says_what_the_runtime_expected(tmp_path: Path) -> None:
    class Downscales(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, :, 0, ::2, ::2]

    with pytest.raises(
        ModelError, match=r"returns shape \(1, 3, 32, 48\) .*needs \(B, 3, H, W\) = \(1, 3, 64, 96\)"
    ):
        export_onnx(
            Downscales(),
            tmp_path / "d.onnx",
            name="d",
            t=3,
            layout=Layout.NCTHW,
            output_position=OutputPosition.CENTER,
        )


def test_recurrent_model_returning_a_wrong_state_says_which_shape_was_expected(tmp_path: Path) -> None:
    class BadState(ConvGRUEnhancer):
        def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out, nxt = super().forward(x, h)
            return out, nxt[:, :, :1]

    with pytest.raises(
        ModelError, match=r"then 'state_next' \(B, 6, H/4, W/4\) = \[\(1, 3, 64, 96\), \(1, 6, 16, 24\)\]"
    ):
        export_onnx(BadState(**TINY_GRU), tmp_path / "b.onnx", name="b")


def test_arguments_that_contradict_the_module_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot export 'c': t=3 was given but the module's t is 5"):
        export_onnx(Conv3dEnhancer(**TINY_CONV3D), tmp_path / "c.onnx", name="c", t=3)
    with pytest.raises(ConfigError, match=r"no attribute 't' and none was given"):
        export_onnx(TinyUserModel(), tmp_path / "u.onnx", name="u")
    with pytest.raises(ConfigError, match=r"opset 13; the runtime needs opset 17"):
        export_onnx(Conv3dEnhancer(**TINY_CONV3D), tmp_path / "c.onnx", name="c", opset=13)


def test_fp16_export_keeps_float32_inputs_and_stays_close(tmp_path: Path) -> None:
    pytest.importorskip("onnxconverter_common")
    torch.manual_seed(0)
    report = export_onnx(Conv3dEnhancer(t=3, **TINY_CONV3D), tmp_path / "c.onnx", name="c", fp16=True)
    assert report.fp16_path == tmp_path / "c.fp16.onnx"
    assert report.fp16_max_abs_error is not None
    assert report.fp16_max_abs_error < 2e-2
    session = ort.InferenceSession(str(report.fp16_path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(float)"
    assert session.get_outputs()[0].type == "tensor(float)"
    weights = onnx.load(report.fp16_path).graph.initializer
    assert any(w.data_type == onnx.TensorProto.FLOAT16 for w in weights)


def test_factory_model_with_weights_exports_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = tmp_path / "w.pt"
    trained = make_tiny(width=5)
    with torch.no_grad():
        trained.out.bias.fill_(0.25)
    torch.save(trained.state_dict(), weights)
    out = tmp_path / "user.onnx"
    code = main(
        [
            "export",
            "--factory",
            "tests.unit.test_export_models:make_tiny",
            "--model-arg",
            "width=5",
            "--weights",
            str(weights),
            "--t",
            "3",
            "--position",
            "last",
            "--layout",
            "NTCHW",
            "--out",
            str(out),
            "--no-bench",
        ]
    )
    assert code == 0
    assert "wrote" in capsys.readouterr().out
    meta = _meta(out)
    assert (meta["streamer.t"], meta["streamer.output_position"], meta["streamer.layout"]) == (
        "3",
        "last",
        "NTCHW",
    )
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["architecture"] == "tests.unit.test_export_models.TinyUserModel"
    assert card["parameter_count"] == sum(p.numel() for p in trained.parameters())
    assert card["parameters"] is None  # a user's model without config() has no constructor record
    assert card["reach_px"] == 2  # two 3x3 convolutions: what the tile gate's halo must cover
    assert card["parity_max_abs_error"] <= PARITY_TOLERANCE
    # The weights were loaded: a zero input comes out as the trained bias, not the factory's.
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"frames": np.zeros((1, 3, 3, 8, 8), np.float32)})
    with torch.no_grad():
        expected = trained(torch.zeros(1, 3, 3, 8, 8)).numpy()
    np.testing.assert_allclose(y, expected, atol=1e-6)


def test_a_users_recurrent_module_exports_with_state_flags_and_runs_in_the_runtime_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/export.md's recurrent example: a module that declares nothing, its state named by --state."""
    monkeypatch.chdir(ROOT)
    torch.manual_seed(0)
    module = make_recurrent_denoiser().eval()
    torch.save(module.state_dict(), tmp_path / "w.pt")  # as trained weights would be
    out = tmp_path / "recurrent.onnx"
    flags = ["--t", "1", "--position", "last", "--layout", "NTCHW", "--pad-multiple", "2"]
    factory = [
        "export",
        "--factory",
        "examples.mymodels:make_recurrent_denoiser",
        "--weights",
        str(tmp_path / "w.pt"),
    ]
    assert main([*factory, *flags, "--state", "memory:8:2", "--out", str(out), "--no-bench"]) == 0
    assert json.loads(_meta(out)["streamer.state"]) == [
        {"input": "memory", "output": "memory_next", "channels": 8, "scale": 2}
    ]
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["parity_sequence"]["steps"] == SEQUENCE_STEPS
    assert card["parity_sequence"]["max_abs_error"] <= PARITY_TOLERANCE
    backend = OnnxBackend(out)
    # Two sizes, one odd (the runtime pads it to the multiple of 2): the state follows the frame's size.
    for h, w in ((17, 25), (24, 40)):
        state = backend.initial_state(1, h, w)
        assert [s.shape for s in state] == [(1, 8, -(-h // 2), -(-w // 2))]
        assert not state[0].any()
        memory = torch.from_numpy(state[0])
        frames = np.random.default_rng(h).integers(0, 256, (12, 1, 1, 3, h, w), dtype=np.uint8)
        for batch in frames:
            got, state = backend.step(batch, state)
            padded = np.pad(batch, ((0, 0), (0, 0), (0, 0), (0, h % 2), (0, w % 2)), mode="reflect")
            with torch.no_grad():
                expected, memory = module(
                    torch.from_numpy(padded.astype(np.float32) / np.float32(255)), memory
                )
            pixels = np.rint(np.clip(expected.numpy()[:, :, :h, :w] * 255, 0, 255))
            assert np.abs(got.astype(np.int16) - pixels).max() <= 1
            np.testing.assert_allclose(state[0], memory.numpy(), atol=1e-5)


def test_a_recurrent_module_exported_without_its_states_is_told_how_to_declare_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    argv = [
        "export",
        "--factory",
        "examples.mymodels:make_recurrent_denoiser",
        "--t",
        "1",
        "--layout",
        "NTCHW",
    ]
    assert main([*argv, "--out", str(tmp_path / "r.onnx"), "--no-bench"]) == 2
    assert "declared with --state NAME:CHANNELS:SCALE (or state_specs)" in capsys.readouterr().err
    assert main([*argv, "--state", "memory:8", "--out", str(tmp_path / "r.onnx"), "--no-bench"]) == 2
    assert "--state takes NAME:CHANNELS:SCALE" in capsys.readouterr().err
    # A registry model declares its own; a flag that says otherwise is refused.
    assert (
        main(["export", "--arch", "convgru", "--state", "state:6:4", "--out", str(tmp_path / "g.onnx")]) == 2
    )
    assert "was given but the module's state_specs is" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--factory", "no_such_module:make"], "cannot import module 'no_such_module'"),
        (["--factory", "tests.unit.test_export_models:nothing"], "has no attribute 'nothing'"),
        (["--factory", "justaname"], "--factory takes MODULE:CALLABLE"),
        (
            ["--factory", "tests.unit.test_export_models:make_tiny", "--model-arg", "depth=2"],
            "raised TypeError: make_tiny() got an unexpected keyword argument 'depth'",
        ),
        (["--arch", "conv3d", "--opset", "11"], "opset 11; the runtime needs opset 17"),
        (["--checkpoint", "missing.pt"], "checkpoint 'missing.pt' does not exist"),
    ],
)
def test_cli_export_errors_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main(["export", *argv, "--out", str(tmp_path / "x.onnx"), "--no-bench"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.count("\n") == 1
    assert not (tmp_path / "x.onnx").exists()


def test_cli_lists_the_registry_architectures() -> None:
    assert sorted(_ARCHS) == sorted(ARCHITECTURES)


def test_cpu_benchmark_measures_each_size_with_machine_info(tmp_path: Path) -> None:
    report = export_onnx(ConvGRUEnhancer(**TINY_GRU), tmp_path / "g.onnx", name="g", real_frames=False)
    bench = benchmark_cpu(report.path, sizes=((64, 36), (30, 20)), seconds=0.01)
    assert bench["64x36"]["fps"] > 0
    assert bench["30x20"]["runs"] >= 5
    assert bench["fps"] == bench["64x36"]["fps"]
    assert bench["machine"]["cpu_count"] >= 1


def test_uint8_io_folds_normalisation_into_the_file_within_a_level(tmp_path: Path) -> None:
    """--uint8-io: the written file takes the uint8 window and gives the uint8 frame, says so to the
    runtime by its tensors' types, and matches the float graph within one level."""
    model = Conv3dEnhancer(t=3, **TINY_CONV3D)
    plain = export_onnx(model, tmp_path / "float.onnx", name="c")
    folded = export_onnx(model, tmp_path / "uint8.onnx", name="c", uint8_io=True)
    assert plain.uint8_io_max_levels is None
    assert folded.uint8_io_max_levels is not None
    assert folded.uint8_io_max_levels <= 1
    graph = onnx.load(str(folded.path)).graph
    assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    from streamer.backend.onnx import OnnxBackend

    ours, theirs = OnnxBackend(folded.path), OnnxBackend(plain.path)
    assert (ours.info.uint8_input, ours.info.uint8_output, ours.info.t) == (True, True, 3)
    window = np.random.default_rng(3).integers(0, 256, (1, 3, 3, 40, 56), dtype=np.uint8)
    assert np.abs(ours.infer(window).astype(int) - theirs.infer(window).astype(int)).max() <= 1


def test_uint8_io_from_the_cli_says_so_and_records_it_in_the_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "c.onnx"
    argv = ["export", "--arch", "conv3d", "--model-arg", "embed=4", "--model-arg", "features=8"]
    argv += [
        "--model-arg",
        "channels=8",
        "--model-arg",
        "blocks=1",
        "--uint8-io",
        "--no-bench",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert "uint8 in and out, within" in capsys.readouterr().out
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["uint8_io"]["max_levels_from_float"] <= 1


def test_uint8_io_refuses_a_model_that_takes_uint8_already(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="takes or gives uint8 already"):
        export_onnx(
            PixelsIn(), tmp_path / "u.onnx", name="u", layout=Layout.NCHW, uint8_input=True, uint8_io=True
        )


class PixelsIn(nn.Module):
    """A per-frame model that takes uint8 pixels and returns the frame in 0..1."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() / 255.0
