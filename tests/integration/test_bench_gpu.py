"""``streamer bench gpu`` where there is no GPU: the same rows on the CPU provider, GPU providers said
missing, and ``python -m streamer.bench gpu`` with numpy and onnxruntime as its only dependencies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from streamer.assets import DEFAULT_MODEL
from streamer.backend.onnx import OnnxBackend
from streamer.bench.gpu import recurrent_parity
from streamer.errors import ConfigError
from streamer.measure.synthetic import pattern_window
from streamer.measure.variants import fold_uint8_io, half_precision
from tests.bench_cli import run_bench

TINY = ["--sizes", "64x48,96x64", "--batches", "1,2", "--seconds", "0.01"]


def test_each_row_has_every_path_and_the_cpu_moves_nothing_over_pcie(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gpu.json"
    markdown = tmp_path / "gpu.md"
    argv = [*TINY, "--providers", "CPUExecutionProvider", "--json", str(out), "--markdown", str(markdown)]
    assert run_bench("gpu", argv) == 0
    report = json.loads(out.read_text())
    assert report["loaded"] == ["CPUExecutionProvider"]
    assert report["t"] == 5
    rows = {(s["io"], s["size"], s["batch"], s["path"]): s for s in report["speeds"]}
    assert set(rows) == {
        (io, size, b, path)
        for io in ("float", "uint8")
        for size in ("64x48", "96x64")
        for b in (1, 2)
        # frames at b2: two streams' windows in one call; frames_fresh: through fresh buffers;
        # frames_yuv: each frame down as 4:2:0 planes
        for path in ("device", "host", "frames", "frames_fresh", "frames_yuv")
    }
    assert all(s["fps"] > 0 and s["runs"] >= 3 and s["error"] is None for s in rows.values())
    assert all(s["pcie_bytes"] == 0 for s in rows.values())
    assert report["parity"] == []
    assert report["streams_1080p30"] == {}
    assert any("fp16 on the CPU provider" in s for s in report["skipped"])
    assert "| CPU | fp32 | uint8 | 96x64 | 2 | host |" in markdown.read_text()
    assert "loaded the model: CPUExecutionProvider" in capsys.readouterr().out
    assert report["pinned"] == "no GPU provider ran: host buffers kept, not page-locked"


def test_a_recurrent_model_that_takes_a_strength_runs_every_path_with_its_state(tmp_path: Path) -> None:
    """convlstm_strength: its state bound on the device path, sent both ways on the host path, kept on
    the device by the frames path's steps (as RGB, and as 4:2:0 planes both ways), one stream after
    another at batch 2."""
    out = tmp_path / "gpu.json"
    model = str(DEFAULT_MODEL.parent / "convlstm_strength.onnx")
    argv = [
        *TINY,
        "--io",
        "uint8",
        "--providers",
        "CPUExecutionProvider",
        "--model",
        model,
        "--json",
        str(out),
    ]
    assert run_bench("gpu", argv) == 0
    report = json.loads(out.read_text())
    assert report["t"] == 1
    rows = {(s["size"], s["batch"], s["path"]): s for s in report["speeds"]}
    assert set(rows) == {
        (size, b, path)
        for size in ("64x48", "96x64")
        for b in (1, 2)
        for path in ("device", "host", "frames", "frames_fresh", "frames_yuv")
    }
    assert all(s["fps"] > 0 and s["error"] is None for s in rows.values())


def test_the_recurrent_parity_row_compares_the_kept_state_path_after_a_seconds_steps() -> None:
    """On the CPU provider both sides agree: the row itself is what a GPU's fp16 state is judged by."""
    model = DEFAULT_MODEL.parent / "convlstm_strength.onnx"
    kept = OnnxBackend(model, providers=["CPUExecutionProvider"], device_frames=True)
    host = OnnxBackend(model, providers=["CPUExecutionProvider"], device_frames=False)
    row = recurrent_parity(kept, host, "CPUExecutionProvider", ("fp32", "uint8"))
    assert (row.size, row.steps) == ("640x360", 30)
    assert row.max_levels <= 1
    assert row.over_one == 0.0
    moved = kept.transfers()
    assert moved is not None
    assert moved.uploads == 30  # each step's frame: the state stayed


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime has CUDA"
)
def test_a_gpu_provider_this_build_lacks_is_skipped_with_the_package_to_install(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    argv = [*TINY, "--batches", "1", "--providers", "CUDAExecutionProvider", "--json", str(out)]
    assert run_bench("gpu", argv) == 0
    report = json.loads(out.read_text())
    assert report["loaded"] == []
    assert report["speeds"] == []
    assert report["skipped"] == [
        "CUDAExecutionProvider: not in this onnxruntime build (pip install onnxruntime-gpu)"
    ]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--batches", "0"], "--batches"),
        (["--batches", "4,x"], "--batches"),
        (["--precisions", "int4"], "--precisions"),
        (["--seconds", "nan"], "--seconds"),
        (["--budget-s", "inf"], "--budget-s"),
        (["--sizes", "1920"], "--sizes"),
        (["--io", "int8"], "--io"),
        (["--cuda-options", "prefer_nhwc"], "--cuda-options"),
    ],
)
def test_bad_flags_are_one_line(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        run_bench("gpu", argv)


def test_the_uint8_variant_folds_normalisation_into_the_graph_exactly(tmp_path: Path) -> None:
    reference = OnnxBackend(DEFAULT_MODEL, providers=["CPUExecutionProvider"])
    folded = OnnxBackend(
        fold_uint8_io(DEFAULT_MODEL, tmp_path, reference.info.value_range),
        providers=["CPUExecutionProvider"],
    )
    assert (folded.info.uint8_input, folded.info.uint8_output) == (True, True)
    window = pattern_window(2, reference.info.t, 96, 64, seed=3)
    assert folded.model_input(window).dtype == np.uint8
    np.testing.assert_array_equal(folded.infer(window), reference.infer(window))


def test_the_fp16_file_computes_its_weights_arithmetic_once_and_keeps_its_contract(tmp_path: Path) -> None:
    """onnxruntime has no float16 CPU kernel for the Einsums that compose conv3d's entry, so unfolded
    a GPU would run them on every call."""
    import onnx

    half = half_precision(DEFAULT_MODEL, tmp_path)
    model = onnx.load(str(half))
    assert {"Einsum", "ReduceSum"}.isdisjoint(node.op_type for node in model.graph.node)
    assert list(model.metadata_props) == list(onnx.load(str(DEFAULT_MODEL)).metadata_props)
    reference = OnnxBackend(DEFAULT_MODEL, providers=["CPUExecutionProvider"])
    window = pattern_window(1, reference.info.t, 96, 64, seed=3)
    made = OnnxBackend(half, providers=["CPUExecutionProvider"]).infer(window).astype(np.int16)
    assert int(np.abs(made - reference.infer(window)).max()) <= 1


def test_the_module_runs_with_numpy_and_onnxruntime_alone(tmp_path: Path) -> None:
    """What a GPU machine without PyAV or the service's dependencies runs: nothing else is imported."""
    probe = (
        "import sys, streamer.bench.gpu as g; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'av', 'pydantic', 'aiohttp', 'aiortc', 'torch', 'yaml', 'prometheus_client'}))"
    )
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"
    bad = subprocess.run(
        [sys.executable, "-m", "streamer.bench", "gpu", "--batches", "0"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: --batches '0': give comma-separated whole numbers from 1 to 256, e.g. 1,4,16"
    ]
