"""OnnxBackend on the shipped model and on small contract-testing models built here with onnx.helper."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from streamer import app
from streamer.assets import TEMPORAL_FILTER
from streamer.backend.base import Layout
from streamer.backend.onnx import OnnxBackend, resolve_providers
from streamer.config import ModelConfig
from streamer.core.windower import OutputPosition
from streamer.errors import BackendError, ConfigError, FrameError, ModelError
from tests.onnx_models import ema_model, upscaler_model

Dim = int | str


def _batch(b: int = 1, t: int = 5, h: int = 24, w: int = 40, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(b, t, 3, h, w), dtype=np.uint8)


def _slot_model(
    path: Path,
    *,
    t: Dim = 5,
    slot: int = 2,
    layout: Layout = Layout.NTCHW,
    meta: dict[str, str] | None = None,
    state_input: bool = False,
    tail: str | None = None,
) -> Path:
    """A model whose output is its input's frame at ``slot``: the runtime's mapping can be checked exactly.

    ``tail`` appends one op that breaks the output contract at run time: "halve" (2x2 max pool),
    "reshape" (to a fixed 8x8 size).
    """
    ncthw = layout is Layout.NCTHW
    shape: list[Dim] = ["B", 3, t, "H", "W"] if ncthw else ["B", t, 3, "H", "W"]
    inputs = [helper.make_tensor_value_info("frames", TensorProto.FLOAT, shape)]
    index = helper.make_tensor("slot", TensorProto.INT64, [], [slot])
    nodes = [helper.make_node("Gather", ["frames", "slot"], ["picked"], axis=2 if ncthw else 1)]
    initializers = [index]
    last = "picked"
    if state_input:
        inputs.append(helper.make_tensor_value_info("state", TensorProto.FLOAT, ["B", 3, "H", "W"]))
        nodes.append(helper.make_node("Add", ["picked", "state"], ["summed"]))
        last = "summed"
    if tail == "halve":
        nodes.append(helper.make_node("MaxPool", [last], ["tailed"], kernel_shape=[2, 2], strides=[2, 2]))
        last = "tailed"
    elif tail == "reshape":
        initializers.append(helper.make_tensor("fixed", TensorProto.INT64, [4], [-1, 3, 8, 8]))
        nodes.append(helper.make_node("Reshape", [last, "fixed"], ["tailed"]))
        last = "tailed"
    nodes.append(helper.make_node("Identity", [last], ["enhanced"]))
    outputs = [helper.make_tensor_value_info("enhanced", TensorProto.FLOAT, ["B", 3, "OH", "OW"])]
    graph = helper.make_graph(nodes, "slot", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if meta:
        helper.set_model_props(model, meta)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _meta(**overrides: str) -> dict[str, str]:
    meta = {
        "streamer.name": "slot",
        "streamer.t": "5",
        "streamer.layout": "NTCHW",
        "streamer.output_position": "center",
        "streamer.value_range": "0,1",
        "streamer.pad_multiple": "1",
    }
    meta.update({f"streamer.{k}": v for k, v in overrides.items()})
    return meta


@pytest.fixture(scope="module")
def shipped() -> OnnxBackend:
    return OnnxBackend(TEMPORAL_FILTER, providers=["CPUExecutionProvider"])


def test_shipped_model_info(shipped: OnnxBackend) -> None:
    info = shipped.info
    assert info.name == "temporal_filter_t5"
    assert (info.t, info.layout, info.output_position) == (5, Layout.NCTHW, OutputPosition.CENTER)
    assert (info.channels, info.value_range, info.pad_multiple) == (3, (0.0, 1.0), 1)
    assert info.provider == "CPUExecutionProvider"


def test_shipped_model_infers_uint8_target_frames(shipped: OnnxBackend) -> None:
    out = shipped.infer(_batch(h=36, w=52))
    assert out.shape == (1, 3, 36, 52)
    assert out.dtype == np.uint8


def test_batch_of_two_equals_two_single_calls(shipped: OnnxBackend) -> None:
    batch = _batch(b=2, seed=3)
    together = shipped.infer(batch)
    np.testing.assert_array_equal(together[0], shipped.infer(batch[:1])[0])
    np.testing.assert_array_equal(together[1], shipped.infer(batch[1:])[0])


def test_auto_providers_end_with_cpu_and_run_an_available_one() -> None:
    assert resolve_providers("auto")[-1] == "CPUExecutionProvider"
    backend = OnnxBackend(TEMPORAL_FILTER)
    assert backend.info.provider in ort.get_available_providers()


def test_chosen_provider_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="streamer.backend.onnx"):
        OnnxBackend(TEMPORAL_FILTER, providers=["CPUExecutionProvider"])
    assert "temporal_filter_t5 runs on CPUExecutionProvider" in caplog.text


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(_batch(t=4), id="wrong-T"),
        pytest.param(_batch().astype(np.float32), id="float32"),
        pytest.param(_batch()[0], id="rank-4"),
        pytest.param(_batch()[:, :, :1], id="one-channel"),
        pytest.param(_batch()[:0], id="empty-batch"),
        pytest.param(_batch().transpose(0, 2, 1, 3, 4)[:, :, :3], id="already-NCTHW"),
    ],
)
def test_bad_batch_is_a_frame_error_naming_shape_and_dtype(shipped: OnnxBackend, batch: np.ndarray) -> None:
    with pytest.raises(FrameError) as err:
        shipped.infer(batch)
    assert str(batch.shape) in str(err.value)
    assert str(batch.dtype) in str(err.value)
    assert "(B>=1, T=5, C=3, H, W) uint8" in str(err.value)


def test_slot_model_round_trips_pixels_exactly(tmp_path: Path) -> None:
    backend = OnnxBackend(_slot_model(tmp_path / "m.onnx", meta=_meta()), providers=["CPUExecutionProvider"])
    batch = _batch(b=2)
    np.testing.assert_array_equal(backend.infer(batch), batch[:, 2])


def test_value_range_0_255_round_trips_exactly(tmp_path: Path) -> None:
    path = _slot_model(tmp_path / "m.onnx", meta=_meta(value_range="0,255"))
    backend = OnnxBackend(path, providers=["CPUExecutionProvider"])
    assert backend.info.value_range == (0.0, 255.0)
    batch = _batch()
    np.testing.assert_array_equal(backend.infer(batch), batch[:, 2])


def test_ncthw_model_sees_slots_in_order(tmp_path: Path) -> None:
    path = _slot_model(tmp_path / "m.onnx", slot=4, layout=Layout.NCTHW, meta=_meta(layout="NCTHW"))
    backend = OnnxBackend(path, providers=["CPUExecutionProvider"])
    assert backend.info.layout is Layout.NCTHW
    batch = _batch()
    np.testing.assert_array_equal(backend.infer(batch), batch[:, 4])


def test_missing_metadata_falls_back_to_static_t(tmp_path: Path) -> None:
    backend = OnnxBackend(
        _slot_model(tmp_path / "plain.onnx", t=4, slot=1), providers=["CPUExecutionProvider"]
    )
    info = backend.info
    assert (info.name, info.t, info.layout, info.output_position) == (
        "plain",
        4,
        Layout.NTCHW,
        OutputPosition.CENTER,
    )
    batch = _batch(t=4)
    np.testing.assert_array_equal(backend.infer(batch), batch[:, 1])


def test_dynamic_t_is_read_from_metadata(tmp_path: Path) -> None:
    path = _slot_model(tmp_path / "m.onnx", t="T", slot=0, meta=_meta(t="4", output_position="last"))
    info = OnnxBackend(path, providers=["CPUExecutionProvider"]).info
    assert (info.t, info.output_position) == (4, OutputPosition.LAST)


def test_dynamic_t_without_metadata_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"streamer\.t.*export"):
        OnnxBackend(_slot_model(tmp_path / "m.onnx", t="T"))


def test_metadata_t_disagreeing_with_static_t_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"streamer\.t=7 .* T=5"):
        OnnxBackend(_slot_model(tmp_path / "m.onnx", meta=_meta(t="7")))


def test_ncthw_model_without_layout_metadata_is_read_from_its_shape(tmp_path: Path) -> None:
    backend = OnnxBackend(_slot_model(tmp_path / "m.onnx", layout=Layout.NCTHW, slot=3))
    assert (backend.info.layout, backend.info.t) == (Layout.NCTHW, 5)
    batch = _batch()
    np.testing.assert_array_equal(backend.infer(batch), batch[:, 3])


@pytest.mark.parametrize("layout", [Layout.NTCHW, Layout.NCTHW])
def test_t_equal_to_c_without_layout_metadata_says_what_to_declare(tmp_path: Path, layout: Layout) -> None:
    with pytest.raises(ModelError, match=r"NTCHW or NCTHW\? \(both axes 1 and 2 are 3\).*model\.layout"):
        OnnxBackend(_slot_model(tmp_path / "m.onnx", t=3, slot=1, layout=layout))


def test_a_wrong_layout_in_metadata_names_the_other(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"streamer\.layout=NCTHW"):
        OnnxBackend(_slot_model(tmp_path / "m.onnx", layout=Layout.NCTHW, meta=_meta(layout="NTCHW")))


def test_undeclared_state_input_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"\['frames', 'state'\] besides those metadata streamer\.state"):
        OnnxBackend(_slot_model(tmp_path / "m.onnx", meta=_meta(), state_input=True))


def test_recurrent_model_carries_its_state(tmp_path: Path) -> None:
    backend = OnnxBackend(ema_model(tmp_path / "ema.onnx"))
    assert [(s.input, s.output, s.channels, s.scale) for s in backend.info.state] == [("h", "h_next", 3, 1)]
    frames = np.full((2, 1, 3, 6, 10), 200, dtype=np.uint8)
    state = backend.initial_state(2, 6, 10)
    assert [s.shape for s in state] == [(2, 3, 6, 10)]
    first, state = backend.step(frames, state)
    second, state = backend.step(frames, state)
    assert (int(first.max()), int(second.max())) == (100, 150)
    assert int(backend.infer(frames).max()) == 100


def test_state_of_the_wrong_shape_names_the_fix(tmp_path: Path) -> None:
    backend = OnnxBackend(ema_model(tmp_path / "ema.onnx"))
    with pytest.raises(FrameError, match=r"initial_state\(1, 6, 10\)"):
        backend.step(np.zeros((1, 1, 3, 6, 10), np.uint8), backend.initial_state(1, 4, 4))


def test_bad_state_metadata_is_a_model_error(tmp_path: Path) -> None:
    path = ema_model(tmp_path / "ema.onnx")
    model = onnx.load(path)
    for prop in model.metadata_props:
        if prop.key == "streamer.state":
            prop.value = '[{"input": "h"}]'
    onnx.save(model, path)
    with pytest.raises(ModelError, match=r"streamer\.state"):
        OnnxBackend(path)


@pytest.mark.parametrize(
    ("key", "value"),
    [("layout", "NHWC"), ("output_position", "middle"), ("value_range", "1,0"), ("pad_multiple", "eight")],
)
def test_bad_metadata_value_is_a_model_error_naming_it(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(ModelError, match=rf"streamer\.{key}='{value}'"):
        OnnxBackend(_slot_model(tmp_path / "m.onnx", meta=_meta(**{key: value})))


def test_missing_file_is_a_model_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    with pytest.raises(ModelError, match=r"nope\.onnx"):
        OnnxBackend(missing)


def test_unparseable_file_is_a_model_error_with_onnxruntimes_reason(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf")
    with pytest.raises(ModelError, match=r"junk\.onnx.*(?i:protobuf)"):
        OnnxBackend(junk)


def test_unavailable_provider_is_a_config_error_listing_available() -> None:
    with pytest.raises(ConfigError, match=r"NoSuchExecutionProvider.*CPUExecutionProvider"):
        OnnxBackend(TEMPORAL_FILTER, providers=["NoSuchExecutionProvider", "CPUExecutionProvider"])


@pytest.mark.parametrize("providers", ["fastest", []])
def test_providers_must_be_auto_or_a_list_of_names(providers: str | list[str]) -> None:
    with pytest.raises(ConfigError, match="auto"):
        OnnxBackend(TEMPORAL_FILTER, providers=providers)


def test_zero_threads_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="threads"):
        OnnxBackend(TEMPORAL_FILTER, threads=0)


def test_pad_multiple_accepts_any_size_and_crops_back(tmp_path: Path) -> None:
    path = _slot_model(tmp_path / "m.onnx", meta=_meta(pad_multiple="8"))
    backend = OnnxBackend(path, providers=["CPUExecutionProvider"], threads=1)
    assert backend.info.pad_multiple == 8
    batch = _batch(h=37, w=53)
    out = backend.infer(batch)
    assert out.shape == (1, 3, 37, 53)
    np.testing.assert_array_equal(out, batch[:, 2])


@pytest.mark.parametrize(("h", "w"), [(1, 3), (2, 9), (9, 1)])
def test_pad_multiple_on_frames_too_small_to_reflect(tmp_path: Path, h: int, w: int) -> None:
    backend = OnnxBackend(_slot_model(tmp_path / "m.onnx", meta=_meta(pad_multiple="8")))
    batch = _batch(h=h, w=w)
    np.testing.assert_array_equal(backend.infer(batch), batch[:, 2])


def test_output_at_another_size_is_a_backend_error_explaining_the_contract(tmp_path: Path) -> None:
    backend = OnnxBackend(_slot_model(tmp_path / "m.onnx", tail="halve", meta=_meta(scale="1")))
    with pytest.raises(
        BackendError, match=r"returned \(1, 3, 12, 20\).*\(B, 3, H\*scale, W\*scale\) = \(1, 3, 24, 40\)"
    ):
        backend.infer(_batch())


def test_an_upscaler_without_metadata_has_its_scale_seen_in_a_probe(tmp_path: Path) -> None:
    backend = OnnxBackend(upscaler_model(tmp_path / "up.onnx", (2.0, 2.0)))
    assert (backend.info.scale, backend.inferred) == (2, frozenset({"scale"}))
    frames = np.random.default_rng(0).integers(0, 256, (1, 1, 3, 10, 14), dtype=np.uint8)
    out = backend.infer(frames)
    np.testing.assert_array_equal(out, frames[:, 0].repeat(2, axis=2).repeat(2, axis=3))
    declared = OnnxBackend(upscaler_model(tmp_path / "declared.onnx", (2.0, 2.0), {"streamer.scale": "2"}))
    assert (declared.info.scale, declared.inferred) == (2, frozenset())


def test_an_output_no_whole_number_scale_explains_is_refused_naming_what_to_declare(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"one whole-number scale: declare it \(metadata streamer.scale"):
        OnnxBackend(upscaler_model(tmp_path / "odd.onnx", (2.0, 3.0)))


def test_runtime_failure_is_a_backend_error_with_the_reason(tmp_path: Path) -> None:
    backend = OnnxBackend(_slot_model(tmp_path / "m.onnx", tail="reshape", meta=_meta(scale="1")))
    with pytest.raises(BackendError, match=r"onnxruntime failed running slot .*(?i:reshape)"):
        backend.infer(_batch(h=10, w=10))


_OUT_OF_MEMORY = """
import json, resource, numpy as np
from streamer.assets import STREAMING_QUARTER_MODEL
from streamer.backend.onnx import OnnxBackend
from streamer.errors import ModelUnavailableError
backend = OnnxBackend(STREAMING_QUARTER_MODEL, threads=1)
backend.encode(np.zeros((1, 64, 64, 3), np.uint8))
frame = np.zeros((1, 2160, 3840, 3), np.uint8)
used = int(open("/proc/self/statm").read().split()[0]) * 4096
resource.setrlimit(resource.RLIMIT_AS, (used + 150 * 2**20, resource.RLIM_INFINITY))
try:
    backend.encode(frame)
    starved = "no error"
except ModelUnavailableError as err:
    starved = str(err) if err.batch_bound else "not batch-bound"
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(json.dumps({"starved": starved, "after": len(backend.encode(frame))}))
"""


def test_a_call_the_allocator_cannot_serve_fails_alone_into_a_pass_through() -> None:
    """A real allocation failure (the process's address space capped under a 4K frame's needs): the
    BFC arena that fails here is the one the CUDA provider fails in when a GPU is out of memory."""
    result = subprocess.run(
        [sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (
        "CPUExecutionProvider ran out of memory for stream_t5_quarter_sep on encoding 1 frames of 3840x2160"
        in (report["starved"])
    )
    assert "the frame passes through" in report["starved"]
    assert report["after"] == 1  # memory back: the same backend serves again


def test_closed_backend_refuses_to_infer(tmp_path: Path) -> None:
    backend = OnnxBackend(_slot_model(tmp_path / "m.onnx", meta=_meta()))
    backend.close()
    with pytest.raises(BackendError, match="closed"):
        backend.infer(_batch())


def test_runtime_side_never_imports_torch() -> None:
    code = (
        "import sys, streamer.assets, streamer.backend.onnx, streamer.contract.layout; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize(
    ("settings", "cores", "expected"),
    [
        ({}, 2, (2, 1)),  # two calls of one thread each: the CPU default
        ({}, 8, (2, 4)),
        ({}, 1, (1, None)),
        ({"threads": 2}, 2, (1, 2)),  # threads set alone: one call, as many threads as asked
        ({"workers": 3}, 8, (3, 2)),
        ({"workers": 1}, 2, (1, None)),
    ],
)
def test_the_cpu_provider_runs_two_calls_at_once_with_the_cores_split_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, settings: dict[str, int], cores: int, expected: tuple[int, int | None]
) -> None:
    made: list[tuple[int, int | None]] = []

    def record(
        path: Path,
        *,
        providers: object,
        threads: int | None,
        spin: bool,
        workers: int,
        declared: object,
        device_frames: object,
        yuv420: object,
        gpu_wait: object,
        provider_options: object,
    ) -> str:
        made.append((workers, threads))
        return "backend"

    monkeypatch.setattr(app, "OnnxBackend", record)
    monkeypatch.setattr(app.os, "cpu_count", lambda: cores)
    app.build_backend(ModelConfig(providers=["CPUExecutionProvider"], **settings))  # type: ignore[arg-type]
    assert made == [expected]


@pytest.mark.parametrize(
    ("card", "expected", "warned"),
    [
        ({"name": "x", "activation_bytes_per_pixel": 230}, 230, False),
        ({"name": "x"}, None, False),
        ({"activation_bytes_per_pixel": -5}, None, True),
        ({"activation_bytes_per_pixel": "lots"}, None, True),
        (None, None, False),
    ],
)
def test_the_measured_bytes_per_pixel_come_from_the_card_beside_the_model(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    card: dict[str, object] | None,
    expected: int | None,
    warned: bool,
) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(TEMPORAL_FILTER.read_bytes())
    if card is not None:
        (tmp_path / "model.json").write_text(json.dumps(card))
    with caplog.at_level(logging.WARNING):
        backend = OnnxBackend(model)
    backend.close()
    assert backend.info.activation_bytes_per_pixel == expected
    assert ("activation_bytes_per_pixel must be" in caplog.text) is warned


def test_a_gpu_provider_that_did_not_start_is_said_once_with_the_provider_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # This build lists no CUDA, and onnxruntime treats the request as a GPU build treats a machine
    # without a driver: a session on the CPU provider, its own warning, nothing raised.
    from streamer.backend import onnx as onnx_backend

    path = ema_model(tmp_path / "ema.onnx")
    wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    onnx_backend._fallbacks_said.clear()
    with caplog.at_level(logging.WARNING, logger="streamer.backend.onnx"):
        for _ in range(2):
            session = onnx_backend._load(path, ort.SessionOptions(), wanted, {})
            assert session.get_providers() == ["CPUExecutionProvider"]
    said = [r.getMessage() for r in caplog.records if r.name == "streamer.backend.onnx"]
    assert len(said) == 1
    assert said[0].startswith("CUDAExecutionProvider listed by this onnxruntime build but did not start")
    assert "running on CPUExecutionProvider" in said[0]
    assert onnx_backend.provider_fallback(["CPUExecutionProvider"], ["CPUExecutionProvider"]) is None
    assert onnx_backend.provider_fallback(wanted, wanted) is None


@pytest.mark.parametrize("recurrent", [False, True], ids=["windows", "steps"])
def test_warm_up_on_the_host_runs_one_window_and_the_largest_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recurrent: bool
) -> None:
    """TensorRT fits its engine's profile to the shapes it has seen and builds it again for one outside
    them: warm-up on the host path runs both ends of the batch sizes live calls take."""
    model = ema_model(tmp_path / "ema.onnx") if recurrent else TEMPORAL_FILTER
    backend = OnnxBackend(model, device_frames=False)
    seen: list[tuple[int, ...]] = []
    real = backend.model_input
    monkeypatch.setattr(backend, "model_input", lambda batch: seen.append(batch.shape) or real(batch))
    backend.warm_up(24, 16, batch=6)
    t = backend.info.t
    assert seen == [(1, t, 3, 16, 24), (6, t, 3, 16, 24)]
    seen.clear()
    backend.warm_up(24, 16)
    assert seen == [(1, t, 3, 16, 24)]
