"""The shipped motion-adaptive temporal filter: export round trip, shipped asset freshness, denoising."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from export.build_default import export_default
from export.models import MotionAdaptiveTemporalFilter
from export.onnx_export import export_onnx
from export.parity import PARITY_TOLERANCE
from streamer.assets import TEMPORAL_FILTER
from streamer.backend.base import Layout
from streamer.backend.onnx import OnnxBackend
from streamer.contract import Key
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError
from streamer.frame import Hyperframe
from tests.factories import make_frame

T = 5
NOISE_SIGMA = 15.0
H, W, FRAMES = 128, 192, 13


def moving_scene(n: int = FRAMES, h: int = H, w: int = W) -> np.ndarray:
    """(n, H, W, 3) uint8: a static textured background, a checkered square moving 3 px/frame right
    and a disk moving 2 px/frame diagonally."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    bg = np.stack([60 + 120 * xx / w, 80 + 90 * yy / h, 140 + 40 * np.sin(xx / 9) * np.cos(yy / 13)], axis=-1)
    for _ in range(6):
        y0, x0 = rng.integers(0, h - 20), rng.integers(0, w - 30)
        bg[y0 : y0 + 16, x0 : x0 + 24] = rng.integers(20, 235, 3)
    checker = ((yy[:32, :32] // 8 + xx[:32, :32] // 8) % 2)[..., None] > 0
    frames = []
    for i in range(n):
        f = bg.copy()
        sy, sx = h // 4, 10 + 3 * i
        f[sy : sy + 32, sx : sx + 32] = np.where(checker, [230, 40, 40], [30, 200, 60])
        disk = (yy - (h // 2 + 2 * i)) ** 2 + (xx - (w // 2 + 2 * i)) ** 2 < 14**2
        f[disk] = [250, 250, 30]
        frames.append(f)
    scene: np.ndarray = np.clip(np.rint(np.stack(frames)), 0, 255).astype(np.uint8)
    return scene


def add_noise(clean: np.ndarray, seed: int) -> np.ndarray:
    noisy = clean + np.random.default_rng(seed).normal(0.0, NOISE_SIGMA, clean.shape)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def centred_batch(frames: np.ndarray) -> np.ndarray:
    """Every full T-window of the sequence as hyperframes, (B, T, C, H, W), built the pipeline's way."""
    stream = [make_frame(i, pixels=px) for i, px in enumerate(frames)]
    windows = [Hyperframe(tuple(stream[s : s + T]), target=T // 2) for s in range(len(stream) - T + 1)]
    return np.stack([hf.pixels() for hf in windows])


def targets(frames: np.ndarray) -> np.ndarray:
    """The centre frames of ``centred_batch`` windows, (B, C, H, W)."""
    return frames[T // 2 : len(frames) - T // 2].transpose(0, 3, 1, 2)


def motion_mask(clean: np.ndarray) -> np.ndarray:
    """(B, H, W): pixels where some other frame of the target's window differs from the target."""
    centre = targets(clean).astype(np.int16)
    windows = centred_batch(clean).astype(np.int16)
    moving: np.ndarray = np.abs(windows - centre[:, None]).max(axis=(1, 2)) > 10
    return moving


def psnr(a: np.ndarray, b: np.ndarray, mask: np.ndarray | None = None) -> float:
    err = (a.astype(np.float64) - b.astype(np.float64)) ** 2
    if mask is not None:
        err = err.transpose(1, 0, 2, 3)[:, mask]
    return float(10 * np.log10(255.0**2 / err.mean()))


@pytest.fixture(scope="module")
def backend() -> OnnxBackend:
    return OnnxBackend(TEMPORAL_FILTER, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def scene() -> np.ndarray:
    return moving_scene()


def test_export_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "tf.onnx"
    report = export_onnx(
        MotionAdaptiveTemporalFilter(),
        path,
        t=T,
        layout=Layout.NCTHW,
        output_position=OutputPosition.CENTER,
        name="tf",
    )
    assert report.parity_max_abs_error <= PARITY_TOLERANCE
    assert [s[0] for s in report.parity_shapes] == [1, 2]
    assert report.parity_shapes[0][3:] != report.parity_shapes[1][3:]
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    props = {p.key: p.value for p in model.metadata_props}
    assert props == {
        "streamer.name": "tf",
        "streamer.t": "5",
        "streamer.layout": "NCTHW",
        "streamer.output_position": "center",
        "streamer.value_range": "0,1",
        "streamer.pad_multiple": "1",
    }
    assert model.opset_import[0].version == report.opset == 17
    assert 1_000 < report.size_bytes == path.stat().st_size < 300_000


def test_exported_file_has_dynamic_batch_height_width(tmp_path: Path) -> None:
    report = export_onnx(
        MotionAdaptiveTemporalFilter(t=3, position=OutputPosition.LAST),
        tmp_path / "tf.onnx",
        t=3,
        layout=Layout.NCTHW,
        output_position=OutputPosition.LAST,
        name="tf3",
    )
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    (frames,) = session.get_inputs()
    assert [isinstance(d, str) for d in frames.shape] == [True, False, False, True, True]
    assert frames.shape[1:3] == [3, 3]
    (out,) = session.run(None, {frames.name: np.zeros((3, 3, 3, 17, 23), np.float32)})
    assert out.shape == (3, 3, 17, 23)


def test_shipped_asset_is_what_the_code_exports_now(tmp_path: Path) -> None:
    fresh, module = export_default(tmp_path)
    shipped = onnx.load(TEMPORAL_FILTER)
    # streamer.blend is measured on the exported file afterwards (export.calibrate_blend)
    assert {p.key: p.value for p in shipped.metadata_props if p.key != Key.BLEND} == fresh.metadata
    x = np.random.default_rng(5).uniform(0, 1, size=(2, 3, T, 40, 56)).astype(np.float32)
    runs = [
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"frames": x})[0]
        for p in (TEMPORAL_FILTER, fresh.path)
    ]
    np.testing.assert_allclose(runs[0], runs[1], atol=1e-6)
    card = json.loads(TEMPORAL_FILTER.with_suffix(".json").read_text())
    assert card["parameters"] == module.config()
    assert (card["t"], card["layout"], card["output_position"]) == (T, "NCTHW", "center")
    assert card["cpu_benchmark"]["fps"] > 0


def test_identical_frames_come_back_unchanged(backend: OnnxBackend, scene: np.ndarray) -> None:
    still = np.repeat(scene[:1], T, axis=0)
    np.testing.assert_array_equal(backend.infer(centred_batch(still)), targets(still))


def test_a_frame_unlike_the_target_gets_no_weight() -> None:
    x = torch.full((1, 3, T, 8, 8), 0.5)
    x[:, :, 0] = 1.0
    with torch.no_grad():
        out = MotionAdaptiveTemporalFilter()(x)
    torch.testing.assert_close(out, torch.full((1, 3, 8, 8), 0.5), atol=1e-6, rtol=0)


def test_noisy_moving_scene_gains_psnr(backend: OnnxBackend, scene: np.ndarray) -> None:
    noisy = add_noise(scene, seed=1)
    clean = targets(scene)
    before = psnr(targets(noisy), clean)
    after = psnr(backend.infer(centred_batch(noisy)), clean)
    # Measured: 24.6 dB -> 29.9 dB (+5.3 dB).
    assert after - before > 4.5


def test_motion_is_not_ghosted(backend: OnnxBackend, scene: np.ndarray) -> None:
    moving = motion_mask(scene)
    clean = targets(scene)
    filtered = psnr(backend.infer(centred_batch(scene)), clean, moving)
    plain_mean = psnr(np.rint(centred_batch(scene).mean(axis=1)), clean, moving)
    # Measured on the noise-free scene where things move: 46 dB, against 15 dB for a plain temporal mean.
    assert plain_mean < 20
    assert filtered > 42


def test_static_scene_is_denoised_more_than_motion_is(backend: OnnxBackend, scene: np.ndarray) -> None:
    still = np.repeat(scene[:1], FRAMES, axis=0)
    noisy_still, noisy = add_noise(still, seed=2), add_noise(scene, seed=1)
    still_gain = psnr(backend.infer(centred_batch(noisy_still)), targets(still)) - psnr(
        targets(noisy_still), targets(still)
    )
    moving = motion_mask(scene)
    motion_gain = psnr(backend.infer(centred_batch(noisy)), targets(scene), moving) - psnr(
        targets(noisy), targets(scene), moving
    )
    # Measured: +5.7 dB where nothing moves, +2.2 dB where things move (kept close to the noisy input).
    assert still_gain > 5.0
    assert 0 < motion_gain < still_gain - 2


def test_torch_export_failure_is_a_model_error(tmp_path: Path) -> None:
    class Unsupported(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cummax(x[:, :, 0], dim=-1).values

    with pytest.raises(ModelError, match=r"torch could not export 'cm'.*cummax"):
        export_onnx(
            Unsupported(),
            tmp_path / "cm.onnx",
            t=T,
            layout=Layout.NCTHW,
            output_position=OutputPosition.CENTER,
            name="cm",
        )
    assert not (tmp_path / "cm.onnx").exists()


def test_parity_failure_is_a_model_error_and_writes_nothing(tmp_path: Path) -> None:
    class Noisy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, :, 0] + torch.rand_like(x[:, :, 0])

    with pytest.raises(ModelError, match=r"onnxruntime differs from PyTorch on 'rnd'"):
        export_onnx(
            Noisy(),
            tmp_path / "rnd.onnx",
            t=T,
            layout=Layout.NCTHW,
            output_position=OutputPosition.CENTER,
            name="rnd",
        )
    assert not (tmp_path / "rnd.onnx").exists()


def test_module_breaking_the_output_contract_is_a_model_error(tmp_path: Path) -> None:
    class Halves(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, :, 0, ::2, ::2]

    with pytest.raises(ModelError, match=r"the runtime needs \(B, 3, H, W\)"):
        export_onnx(
            Halves(),
            tmp_path / "h.onnx",
            t=T,
            layout=Layout.NCTHW,
            output_position=OutputPosition.CENTER,
            name="h",
        )


@pytest.mark.parametrize(
    ("t", "pad_multiple", "value_range"), [(0, 1, (0.0, 1.0)), (5, 0, (0.0, 1.0)), (5, 1, (1.0, 1.0))]
)
def test_impossible_export_settings_are_a_config_error(
    tmp_path: Path, t: int, pad_multiple: int, value_range: tuple[float, float]
) -> None:
    with pytest.raises(ConfigError, match=r"cannot export 'x'"):
        export_onnx(
            MotionAdaptiveTemporalFilter(),
            tmp_path / "x.onnx",
            t=t,
            layout=Layout.NCTHW,
            output_position=OutputPosition.CENTER,
            value_range=value_range,
            pad_multiple=pad_multiple,
            name="x",
        )
