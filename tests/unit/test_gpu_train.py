"""Training from a data pack, as on a lent GPU: the pack's round trip, the sequences made on the device,
a CPU smoke run that writes what ``streamer export`` reads, and an entry point that needs no PyAV."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from export.checkpoint import CHECKPOINT, FORMAT, load_checkpoint, save_checkpoint
from export.cli import main as export_main
from export.data import HELDOUT_CLIP, HELDOUT_PHOTO, TRAIN_PHOTOS
from export.datapack import DataPack, build_pack, load_pack, save_pack
from export.gpu_train import CURVE, GpuTrainConfig, Phase, _plan, _Run, train_from_pack
from export.models.registry import build
from export.sequences import Motion, Noise, SequenceSampler
from streamer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TINY = {"embed": 4, "features": 8, "channels": 8, "hidden": 6, "blocks": 1}
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def pack_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pack") / "pack.npz"
    save_pack(build_pack(clip_height=64, validation_frames=12, clip_frames=40), path)
    return path


def test_a_pack_holds_the_training_sources_exactly_and_leaves_the_benchmark_clips_out(
    pack_file: Path,
) -> None:
    pack = load_pack(pack_file)
    built = build_pack(clip_height=64, validation_frames=12, clip_frames=40)
    assert set(pack.clips) == {"bigbuckbunny", "carphone_pristine"}
    assert set(pack.photos) == set(TRAIN_PHOTOS)
    for name, frames in built.clips.items():
        assert frames.shape[1] == 64
        np.testing.assert_array_equal(pack.clips[name], frames)
    for name, photo in built.photos.items():
        np.testing.assert_array_equal(pack.photos[name], photo)
    np.testing.assert_array_equal(pack.validation, built.validation)
    assert pack.validation.shape == (12, 192, 256, 3)
    assert pack.description["held_out"] == [HELDOUT_CLIP, HELDOUT_PHOTO]
    assert HELDOUT_PHOTO not in pack.photos
    assert HELDOUT_CLIP.removesuffix(".mp4") not in pack.clips


def _random_pack() -> DataPack:
    rng = np.random.default_rng(0)
    return DataPack(
        clips={"c": rng.integers(0, 256, (3, 8, 10, 3), dtype=np.uint8)},
        photos={"p": rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)},
        validation=rng.integers(0, 256, (2, 8, 8, 3), dtype=np.uint8),
        description={"format": FORMAT, "clips": {"c": {}}, "photos": {"p": [9, 7]}},
    )


def test_a_pack_round_trips_noise_exactly_and_refuses_what_it_cannot_be(tmp_path: Path) -> None:
    pack = _random_pack()
    save_pack(pack, tmp_path / "p.npz")
    back = load_pack(tmp_path / "p.npz")
    np.testing.assert_array_equal(back.clips["c"], pack.clips["c"])  # lossless even on pure noise
    np.testing.assert_array_equal(back.photos["p"], pack.photos["p"])
    np.testing.assert_array_equal(back.validation, pack.validation)
    assert back.description == pack.description
    with pytest.raises(ConfigError, match=r"over the 100 allowed; lower --clip-height"):
        save_pack(pack, tmp_path / "big.npz", max_bytes=100)
    assert not list(tmp_path.glob("big*"))
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ConfigError, match=r"is not a data pack"):
        load_pack(tmp_path / "other.npz")
    with pytest.raises(ConfigError, match=r"does not exist; build it with python -m export.datapack"):
        load_pack(tmp_path / "missing.npz")


def test_sequences_are_crops_of_the_sources_and_cut_once_part_way(pack_file: Path) -> None:
    pack = load_pack(pack_file)
    sampler = SequenceSampler(pack, CPU, crop=32, seed=0)
    clean = sampler.clean(8, 16)
    assert clean.shape == (8, 16, 3, 32, 32)
    assert clean.dtype == torch.uint8
    # Still cameras on photographs: nothing changes from frame to frame but at the cut.
    still = Motion(clip=0.0, still=1.0, sprite=0.0, cut=1.0)
    clean = SequenceSampler(pack, CPU, crop=32, motion=still, seed=1).clean(6, 16).float()
    changed = (clean[:, 1:] - clean[:, :-1]).abs().amax(dim=(2, 3, 4)) > 0
    assert changed.sum(dim=1).tolist() == [1] * 6
    cut = changed.float().argmax(dim=1) + 1
    assert ((cut >= 4) & (cut <= 12)).all()


def test_noise_is_drawn_per_sequence_in_the_camera_range_and_rounded_to_8_bits(pack_file: Path) -> None:
    sampler = SequenceSampler(load_pack(pack_file), CPU, crop=32, seed=0)
    noise = sampler.noise(400)
    gaussian = noise.peak == 0
    assert 0.7 < float(gaussian.float().mean()) < 0.9
    assert 5.0 <= float(noise.sigma[gaussian].min()) <= float(noise.sigma[gaussian].max()) <= 50.0
    assert float(noise.sigma[~gaussian].max()) <= 5.0
    assert 10.0 <= float(noise.peak[~gaussian].min()) <= float(noise.peak[~gaussian].max()) <= 200.0
    clean = torch.full((3, 4, 3, 32, 32), 0.5)
    noisy = sampler.degrade(clean, Noise(torch.tensor([25.0, 5.0, 0.0]), torch.tensor([0.0, 0.0, 20.0])))
    assert torch.equal(noisy * 255, (noisy * 255).round())
    spread = ((noisy - clean) * 255).std(dim=(1, 2, 3, 4))
    # Shot noise at half of a 20-electron white: 10 electrons, std sqrt(10) / 20 of the range.
    for measured, expected in zip(spread.tolist(), [25.0, 5.0, 10**0.5 / 20 * 255], strict=True):
        assert abs(measured - expected) < 0.06 * expected


def test_the_steps_fill_the_time_left_at_each_phases_measured_speed() -> None:
    config = GpuTrainConfig(curriculum=(Phase(0.5, 4, 16), Phase(1.0, 8, 16)))
    seconds = {"chunk4_sequence16": 0.1, "chunk8_sequence16": 0.3}
    assert _plan(config, seconds, left=20.0, done=6) == 106  # 20 s at 0.2 s per step on average
    assert _plan(GpuTrainConfig(steps=50), seconds, left=20.0, done=6) == 50


def test_a_cpu_smoke_run_learns_and_writes_a_checkpoint_streamer_export_reads(
    pack_file: Path, tmp_path: Path
) -> None:
    config = GpuTrainConfig(
        model=TINY,
        steps=200,
        frames_per_step=16,
        crop=32,
        lr=3e-3,
        curriculum=(Phase(0.5, 4, 8), Phase(1.0, 8, 16)),
    )
    pack = load_pack(pack_file)
    curve = train_from_pack(config, pack, tmp_path, CPU)
    assert curve["steps"] == 200
    assert curve["finished_schedule"]
    final = curve["history"][-1]["validation"]
    assert len(final["psnr_after_reset"]) == 10
    assert final["psnr_steady"] > final["noisy_psnr"] + 1.0
    assert json.loads((tmp_path / CURVE).read_text())["planned_steps"] == 200
    checkpoint = load_checkpoint(tmp_path / CHECKPOINT)
    assert (checkpoint["architecture"], checkpoint["step"], checkpoint["trainer"]) == (
        "convlstm",
        200,
        "export.gpu_train",
    )
    assert checkpoint["model_config"] == {**TINY, "guard": 0.2, "strength": False}
    assert checkpoint["data"] == pack.description
    out = tmp_path / "lstm.onnx"
    assert (
        export_main(["export", "--checkpoint", str(tmp_path / CHECKPOINT), "--out", str(out), "--no-bench"])
        == 0
    )
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["training"]["step"] == 200
    assert card["training"]["trainer"] == "export.gpu_train"
    assert "no H.264" in card["training"]["degradation"]
    assert card["training"]["validation_data"].startswith(f"pan over the held-out {HELDOUT_PHOTO!r}")
    assert card["parity_sequence"]["steps"] == 16
    assert card["parity_sequence"]["max_abs_error"] <= 1e-4


def test_a_run_that_falls_behind_stops_at_its_budget_and_says_so(pack_file: Path, tmp_path: Path) -> None:
    config = GpuTrainConfig(
        model=TINY, steps=100_000, minutes=0.05, reserve_s=0.0, frames_per_step=8, crop=32,
        curriculum=(Phase(1.0, 8, 8),),
    )  # fmt: skip
    curve = train_from_pack(config, load_pack(pack_file), tmp_path, CPU)
    assert not curve["finished_schedule"]
    assert curve["steps"] < 100_000
    assert load_checkpoint(tmp_path / CHECKPOINT)["step"] == curve["steps"]


def test_a_model_that_takes_a_strength_gets_each_sequences_noise_estimate(
    pack_file: Path, tmp_path: Path
) -> None:
    config = GpuTrainConfig(
        model={**TINY, "strength": True}, steps=3, frames_per_step=8, crop=32, curriculum=(Phase(1.0, 8, 8),),
    )  # fmt: skip
    run = _Run(config, load_pack(pack_file), CPU)
    noisy = torch.full((2, 3, 32, 32), 0.5)
    noisy[1] += torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(0)) * (20.0 / 255.0)
    (strength,) = run.strength(noisy)
    assert strength.shape == (2, 1)
    assert float(strength[0, 0]) < 1.0
    assert float(strength[1, 0]) == pytest.approx(20.0, abs=3.0)
    train_from_pack(config, load_pack(pack_file), tmp_path, CPU)
    assert load_checkpoint(tmp_path / CHECKPOINT)["model"]["condition.2.weight"].abs().max() > 0


def test_a_curriculum_the_batch_cannot_follow_is_refused(pack_file: Path, tmp_path: Path) -> None:
    config = GpuTrainConfig(model=TINY, frames_per_step=12, curriculum=(Phase(1.0, 8, 16),))
    with pytest.raises(ConfigError, match=r"whole multiples of the chunk"):
        train_from_pack(config, load_pack(pack_file), tmp_path, CPU)
    unknown = GpuTrainConfig(model=TINY, loss_space="yuv444")
    with pytest.raises(ConfigError, match=r"--loss-space must be one of \('rgb', 'yuv420'\), got 'yuv444'"):
        train_from_pack(unknown, load_pack(pack_file), tmp_path, CPU)


def test_the_entry_point_imports_no_decoder_runtime_or_config_library(
    pack_file: Path, tmp_path: Path
) -> None:
    """The lent machine has torch, numpy and OpenCV; PyAV, onnx, onnxruntime, pydantic may be absent."""
    argv = ["--pack", str(pack_file), "--out", str(tmp_path), "--steps", "3", "--frames-per-step", "8"]
    argv += ["--crop", "32", "--curriculum", "1:8:8", "--threads", "1"]
    argv += [f"--model-arg={k}={v}" for k, v in TINY.items()]
    code = (
        "import sys\n"
        "from export.gpu_train import main\n"
        f"assert main({argv!r}) == 0\n"
        "absent = {'av', 'skvideo', 'skimage', 'onnx', 'onnxruntime', 'pydantic', 'aiortc', 'aiohttp'}\n"
        "print(sorted(absent & {name.split('.')[0] for name in sys.modules}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_init_starts_a_run_from_given_weights(pack_file: Path, tmp_path: Path) -> None:
    torch.manual_seed(1)
    source = build("convlstm", **TINY)
    save_checkpoint(
        tmp_path / "source.pt",
        {
            "format": FORMAT,
            "architecture": "convlstm",
            "model_config": source.config(),
            "model": source.state_dict(),
            "step": 0,
            "train_config": {},
        },
    )
    config = GpuTrainConfig(
        model=TINY,
        steps=1,
        frames_per_step=4,
        crop=16,
        lr=1e-12,
        curriculum=(Phase(1.0, 4, 4),),
        init=str(tmp_path / "source.pt"),
    )
    curve = train_from_pack(config, load_pack(pack_file), tmp_path / "run", CPU)
    assert sorted(curve["warm_started"]) == sorted(source.state_dict())
    trained = load_checkpoint(tmp_path / "run" / CHECKPOINT)["model"]
    for name, tensor in source.state_dict().items():
        torch.testing.assert_close(trained[name], tensor, atol=1e-6, rtol=0)
