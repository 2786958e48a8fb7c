"""``bench --isa avx2``: a real process, with the shim built by the system's compiler, sees no AVX-512 or
VNNI in CPUID, its libraries (numpy, onnxruntime) dispatch their AVX2 kernels and still compute
correctly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamer.bench.isa import build_shim, caps_env
from streamer.errors import ConfigError
from streamer.measure.machine import MASKED_ENV

PROBE = """
import json, os, sys
import numpy as np
import onnxruntime as ort
from numpy._core._multiarray_umath import __cpu_features__ as features
from onnx import TensorProto, helper

graph = helper.make_graph(
    [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
    "g",
    [helper.make_tensor_value_info("a", TensorProto.UINT8, [64, 256]),
     helper.make_tensor_value_info("b", TensorProto.INT8, [256, 64])],
    [helper.make_tensor_value_info("y", TensorProto.INT32, [64, 64])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
b = rng.integers(-128, 127, (256, 64), dtype=np.int8)


def exact(a):
    (y,) = session.run(None, {"a": a, "b": b})
    return bool(np.array_equal(y, a.astype(np.int32) @ b.astype(np.int32)))


full = rng.integers(0, 255, (64, 256), dtype=np.uint8)
print(json.dumps({
    "masked": os.environ.get(sys.argv[1]),
    "avx2": bool(features["AVX2"]),
    "avx512f": bool(features["AVX512F"]),
    "avx512vnni": bool(features.get("AVX512VNNI", False)),
    "exact_7bit": exact(full // 2),
    "exact_8bit": exact(full),
}))
"""


def _probe(env: dict[str, str] | None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, MASKED_ENV],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_masked_process_sees_avx2_only_and_computes_exactly(cache: Path) -> None:
    native = _probe(None)
    masked = _probe(caps_env("avx2"))
    if masked["masked"] is None:
        pytest.skip("this kernel or CPU offers no CPUID faulting: the mask cannot be tested here")
    assert masked["masked"] == "avx2"
    assert masked["avx2"] == native["avx2"]
    assert masked["avx512f"] is False
    assert masked["avx512vnni"] is False
    # 7-bit activations (onnxruntime's reduce_range) are exact on every x86 kernel.
    assert masked["exact_7bit"] is True
    if native["avx512vnni"]:
        # Full 8-bit ones are exact with VNNI and not with AVX2's vpmaddubsw, whose pairs of products
        # saturate at int16: proof that onnxruntime dispatched its AVX2 kernel under the mask.
        assert native["exact_8bit"] is True
        assert masked["exact_8bit"] is False


def test_bench_machine_line_says_the_mask(cache: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamer.bench", "--isa", "avx2", "machine"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if "does not offer CPUID faulting" in done.stderr:
        pytest.skip("this kernel or CPU offers no CPUID faulting")
    assert done.returncode == 0, done.stderr
    assert "CPUID masked to avx2" in done.stdout
    assert "avx512" not in done.stdout.split("CPUID masked")[0]


def test_unknown_cap_and_missing_compiler_are_named(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="unknown ISA cap 'sse2'"):
        caps_env("sse2")
    monkeypatch.setenv("CC", str(cache / "no-such-cc"))
    with pytest.raises(ConfigError, match="no-such-cc"):
        build_shim()
