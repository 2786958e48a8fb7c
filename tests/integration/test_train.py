"""Training on the bundled data: a few real steps, bit-exact resume, and the checkpoint the exporter reads."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from export.cli import main, register
from export.data import (
    CAMERA_DRAWS,
    HELDOUT_CLIP,
    MAX_CAMERA_DRAWS,
    TRAIN_CLIPS,
    Degradation,
    TrainingData,
    heldout_clip,
    through_420,
)
from export.objective import noise_strengths
from export.train import CHECKPOINT, TrainConfig, load_checkpoint, train
from streamer.core.noise import noise_sigma
from streamer.errors import ConfigError, ModelError

pytestmark = pytest.mark.slow

TINY = TrainConfig(
    arch="conv3d",
    model={"t": 3, "position": "center", "embed": 4, "features": 8, "channels": 8, "blocks": 1},
    steps=4,
    batch=2,
    crop=32,
    lr=1e-3,
    checkpoint_every=2,
    clip_frames=8,
    photo_frames=8,
    val_frames=2,
)


def test_batches_are_a_pure_function_of_seed_and_step() -> None:
    data = TrainingData(seed=3, clip_frames=8, photo_frames=8)
    a, b = data.batch(7, 3, 5, 24), data.batch(7, 3, 5, 24)
    np.testing.assert_array_equal(a.noisy, b.noisy)
    np.testing.assert_array_equal(a.clean, b.clean)
    assert a.clean.shape == a.noisy.shape == (3, 5, 3, 24, 24)
    assert not np.array_equal(data.batch(8, 3, 5, 24).clean, a.clean)
    assert a.noisy.min() >= 0.0
    assert a.noisy.max() <= 1.0
    assert np.abs(a.noisy - a.clean).mean() > 0.005  # degraded, not a copy


def test_camera_damaged_batches_are_seeded_and_come_from_each_clips_damaged_copies() -> None:
    data = TrainingData(seed=3, degradation=Degradation(camera=1.0), clip_frames=8, photo_frames=8)
    assert all(len(source.camera) == CAMERA_DRAWS for source in data.sources[1:])
    a, b = data.batch(5, 4, 4, 24), data.batch(5, 4, 4, 24)
    np.testing.assert_array_equal(a.noisy, b.noisy)
    assert a.noisy.shape == (4, 4, 3, 24, 24)
    # every sequence is one of the precomputed copies (a tenth of draws are clean: those equal the clip)
    assert np.abs(a.noisy - a.clean).mean() > 0.0


def test_noiseless_camera_draws_are_the_encoders_damage_alone_and_a_bad_share_is_refused(
    tmp_path: Path,
) -> None:
    degradation = Degradation(camera=1.0, camera_noiseless=1.0)
    data = TrainingData(seed=3, degradation=degradation, clip_frames=8, photo_frames=8)
    noisy = TrainingData(seed=3, degradation=Degradation(camera=1.0), clip_frames=8, photo_frames=8)
    # Every damaged copy is encoded but carries no sensor noise: the estimate reads it as almost clean.
    quiet = [noise_sigma(copy[0]) for source in data.sources[1:] for copy in source.camera]
    loud = [noise_sigma(copy[0]) for source in noisy.sources[1:] for copy in source.camera]
    assert float(np.median(quiet)) < 1.5 < float(np.median(loud))
    with pytest.raises(ConfigError, match=r"camera_noiseless is a share of the camera draws, 0\.\.1; got 2"):
        train(dataclasses.replace(TINY, camera_noiseless=2.0), tmp_path / "bad", progress=False)


def test_camera_draws_set_how_many_encodes_each_clip_is_sampled_from(tmp_path: Path) -> None:
    degradation = Degradation(camera=1.0, camera_draws=5)
    data = TrainingData(seed=3, degradation=degradation, clip_frames=8, photo_frames=8)
    assert {len(source.camera) for source in data.sources[1:]} == {5}
    assert not data.sources[0].camera  # the 720p clip: its half-size copy stands for it
    for draws in (0, MAX_CAMERA_DRAWS + 1):
        with pytest.raises(ConfigError, match=rf"camera_draws is .* 1\.\.{MAX_CAMERA_DRAWS} .*; got {draws}"):
            train(dataclasses.replace(TINY, camera_draws=draws), tmp_path / "bad", progress=False)
    # the CLI writes these numbers out (it does not import the training data's module to parse flags)
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    register(commands)
    args = parser.parse_args(["train", "--arch", "conv3d", "--out", str(tmp_path)])
    assert args.camera_draws == CAMERA_DRAWS
    assert f"(1..{MAX_CAMERA_DRAWS})" in commands.choices["train"].format_help()


def _luma_and_colour_noise(noisy: np.ndarray, level: float) -> tuple[float, float]:
    """The deviation of a grey picture's noise in luma and in one colour difference (R - G)."""
    diff = noisy.astype(np.float64) - level
    luma = 0.299 * diff[..., 0] + 0.587 * diff[..., 1] + 0.114 * diff[..., 2]
    return float(luma.std()), float((diff[..., 0] - diff[..., 1]).std())


def test_noise_through_420_keeps_its_luma_and_loses_colour_finer_than_a_2x2_block() -> None:
    rng = np.random.default_rng(0)
    noisy = np.clip(np.rint(128 + rng.normal(0, 20, (2, 33, 48, 3))), 0, 255).astype(np.uint8)
    streamed = through_420(noisy)
    assert streamed.shape == noisy.shape
    assert streamed.dtype == np.uint8
    np.testing.assert_array_equal(streamed[:, 32], noisy[:, 32])  # the odd last row is kept as it was
    luma, colour = _luma_and_colour_noise(noisy[:, :32], 128)
    luma_420, colour_420 = _luma_and_colour_noise(streamed[:, :32], 128)
    assert abs(luma_420 - luma) < 0.1 * luma
    assert colour_420 < 0.7 * colour
    flat = np.full((1, 16, 16, 3), (90, 140, 200), dtype=np.uint8)
    assert np.abs(through_420(flat).astype(int) - flat).max() <= 2  # a flat colour comes back


def test_noise_420_sends_a_share_of_the_noise_only_sequences_through_420(tmp_path: Path) -> None:
    def noise_only(share: float) -> Degradation:
        return Degradation(sigma_range=(20.0, 20.0), poisson=0.0, h264=0.0, h264_noise=0.0, noise_420=share)

    def colour_noise(share: float) -> float:
        data = TrainingData(seed=3, degradation=noise_only(share), clip_frames=8, photo_frames=8)
        batch = data.batch(2, 8, 2, 32)
        diff = (batch.noisy - batch.clean) * 255
        return float((diff[:, :, 0] - diff[:, :, 1]).std())

    assert colour_noise(1.0) < 0.7 * colour_noise(0.0)
    data = TrainingData(seed=3, degradation=noise_only(1.0), clip_frames=8, photo_frames=8)
    np.testing.assert_array_equal(data.batch(4, 2, 2, 32).noisy, data.batch(4, 2, 2, 32).noisy)
    with pytest.raises(ConfigError, match=r"noise_420 is a share of the noise-only sequences, 0\.\.1; got 2"):
        train(dataclasses.replace(TINY, noise_420=2.0), tmp_path / "bad", progress=False)


def test_each_sequence_carries_the_strength_the_runtimes_noise_estimate_would_give_it() -> None:
    def strengths(**shares: float) -> np.ndarray:
        degradation = Degradation(sigma_range=(20.0, 20.0), **{"poisson": 0.0, "h264_noise": 0.0, **shares})
        batch = TrainingData(seed=3, degradation=degradation, clip_frames=8, photo_frames=8).batch(
            2, 8, 1, 64
        )
        strength = noise_strengths(torch.from_numpy(batch.noisy[:, 0]))
        assert (strength.shape, strength.dtype) == ((8, 1), torch.float32)
        return strength.numpy()

    # Gaussian noise reads as its sigma (a little less where dark or bright pixels clip it) ...
    assert float(np.median(strengths(h264=0.0))) == pytest.approx(20.0, abs=2.0)
    # ... and low-bitrate H.264 as almost none: the strength tells noise from compression.
    assert float(np.median(strengths(h264=1.0))) < 3.0


def test_a_model_that_takes_a_strength_trains_on_it_and_exports_with_the_input(tmp_path: Path) -> None:
    config = dataclasses.replace(TINY, model={**TINY.model, "strength": True}, steps=2, checkpoint_every=2)
    result = train(config, tmp_path, progress=False)
    assert set(result.validation) >= {"psnr_sigma15", "psnr_sigma25"}
    assert (
        main(
            [
                "export",
                "--checkpoint",
                str(result.checkpoint),
                "--out",
                str(tmp_path / "s.onnx"),
                "--no-bench",
            ]
        )
        == 0
    )
    model = onnx.load(tmp_path / "s.onnx")
    assert [i.name for i in model.graph.input] == ["frames", "strength"]


def test_init_lr_scale_sets_the_rate_of_the_given_tensors_apart_from_the_new_ones(tmp_path: Path) -> None:
    start = tmp_path / "start"
    first = train(TINY, start, progress=False)
    config = dataclasses.replace(
        TINY, model={**TINY.model, "strength": True}, init=(str(first.checkpoint),), init_lr_scale=0.0
    )
    result = train(config, tmp_path / "run", progress=False)
    before, after = load_checkpoint(first.checkpoint)["model"], load_checkpoint(result.checkpoint)["model"]
    # At 0x the copied tensors stay as they were; the strength's conditioning, new, learned.
    assert all(torch.equal(after[name], tensor) for name, tensor in before.items())
    assert after["condition.2.weight"].abs().max() > 0
    # Two sources in turn: the second overwrites what the first gave, the rest keeps the first's.
    other = train(dataclasses.replace(TINY, seed=1), tmp_path / "other", progress=False)
    second = load_checkpoint(other.checkpoint)["model"]
    both = dataclasses.replace(config, init=(str(first.checkpoint), str(other.checkpoint)), steps=1)
    merged = load_checkpoint(train(both, tmp_path / "both", progress=False).checkpoint)["model"]
    assert all(torch.equal(merged[name], tensor) for name, tensor in second.items())
    with pytest.raises(ConfigError, match=r"init_lr_scale is a share of lr, 0\.\.1; got 2"):
        train(dataclasses.replace(config, init_lr_scale=2.0), tmp_path / "bad", progress=False)


def test_the_heldout_clip_is_not_trained_on() -> None:
    assert HELDOUT_CLIP not in TRAIN_CLIPS
    frames = heldout_clip(max_frames=3)
    assert frames.shape == (3, 272, 640, 3)
    assert frames.dtype == np.uint8


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Bit-for-bit needs one summation order: a multi-threaded backward on a loaded machine differed once."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_resume_continues_bit_for_bit(tmp_path: Path, one_thread: None) -> None:
    straight = train(TINY, tmp_path / "straight", progress=False, threads=1)
    first = train(TINY, tmp_path / "resumed", stop_after=2, progress=False, threads=1)
    assert first.step == 2
    resumed = train(TINY, tmp_path / "resumed", resume=True, progress=False, threads=1)
    assert straight.step == resumed.step == 4
    a = load_checkpoint(straight.checkpoint)
    b = load_checkpoint(resumed.checkpoint)
    assert a["model"].keys() == b["model"].keys()
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    assert a["scheduler"] == b["scheduler"]
    assert a["validation"] == b["validation"]
    assert a["train_config"] == dataclasses.asdict(TINY)
    assert [h["step"] for h in a["history"]] == [2, 4]


def test_resume_keeps_the_stored_config_and_refuses_a_missing_checkpoint(tmp_path: Path) -> None:
    train(TINY, tmp_path, stop_after=2, progress=False)
    other = dataclasses.replace(TINY, lr=0.5)
    result = train(other, tmp_path, resume=True, progress=False)
    assert load_checkpoint(result.checkpoint)["train_config"]["lr"] == TINY.lr
    with pytest.raises(ConfigError, match=r"does not exist; train first"):
        train(TINY, tmp_path / "none", resume=True, progress=False)
    with pytest.raises(ConfigError, match=r"loss space must be rgb or yuv420, got 'yuv444'"):
        train(dataclasses.replace(TINY, loss_space="yuv444"), tmp_path / "bad", progress=False)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match=r"cannot read checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")


def test_convgru_trains_unrolled_and_exports_from_its_checkpoint(tmp_path: Path) -> None:
    config = dataclasses.replace(
        TINY,
        arch="convgru",
        model={"features": 4, "channels": 8, "hidden": 4, "blocks": 0},
        steps=2,
        seq_len=3,
    )
    result = train(config, tmp_path, progress=False)
    checkpoint = load_checkpoint(result.checkpoint)
    assert checkpoint["architecture"] == "convgru"
    assert checkpoint["model_config"] == config.model
    out = tmp_path / "gru.onnx"
    assert main(["export", "--checkpoint", str(tmp_path / CHECKPOINT), "--out", str(out), "--no-bench"]) == 0
    meta = {p.key: p.value for p in onnx.load(out).metadata_props}
    assert json.loads(meta["streamer.state"])[0]["channels"] == 4
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["training"]["config"] == json.loads(json.dumps(dataclasses.asdict(config)))  # tuples: lists
    assert card["training"]["step"] == 2
    assert card["training"]["final_validation"] == result.validation
    assert card["parameters"] == config.model


def test_cli_train_runs_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "train",
        "--arch",
        "conv3d",
        "--t",
        "1",
        "--model-arg",
        "embed=4",
        "--model-arg",
        "features=4",
        "--model-arg",
        "channels=4",
        "--steps",
        "2",
        "--batch",
        "1",
        "--crop",
        "16",
        "--clip-frames",
        "4",
        "--checkpoint-every",
        "2",
        "--loss-space",
        "yuv420",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(argv) == 0
    assert "trained to step 2" in capsys.readouterr().out
    stored = load_checkpoint(tmp_path / CHECKPOINT)
    assert stored["model_config"]["t"] == 1
    assert stored["train_config"]["loss_space"] == "yuv420"
    assert (
        main(["train", "--arch", "conv3d", "--steps", "0", "--out", str(tmp_path / "x"), "--no-progress"])
        == 2
    )
    assert "steps, batch and checkpoint_every must be >= 1" in capsys.readouterr().err


def test_a_cheaper_tier_starts_from_the_teachers_filters_and_learns_from_its_outputs(tmp_path: Path) -> None:
    from export.distill import init_weights, warm_start
    from export.train import build_model
    from streamer.assets import DEFAULT_MODEL

    student = {"t": 5, "position": "center", "half": 16, "quarter": 0, "fused": 16, "refine": 8, "blocks": 1}
    config = dataclasses.replace(
        TINY, arch="streaming", model=student, steps=2, teacher=str(DEFAULT_MODEL), init=(str(DEFAULT_MODEL),)
    )
    module = build_model("streaming", student)
    copied = warm_start(module, init_weights(DEFAULT_MODEL, module))
    assert "entry.weight" in copied  # conv3d_t5's embedding, whole: the student keeps its 16 maps
    assert "window_blocks.0.conv1.weight" in copied  # its first block, first channels
    teacher_entry = init_weights(DEFAULT_MODEL, module)["entry.weight"]
    assert torch.equal(module.state_dict()["entry.weight"], teacher_entry)
    assert torch.equal(
        module.state_dict()["mix_half.weight"], init_weights(DEFAULT_MODEL, module)["mix_half.weight"][:8]
    )

    result = train(config, tmp_path, progress=False)
    assert result.step == 2
    assert load_checkpoint(result.checkpoint)["train_config"]["teacher"] == str(DEFAULT_MODEL)

    recurrent = dataclasses.replace(
        TINY,
        arch="convgru",
        model={"features": 4, "channels": 8, "hidden": 4, "blocks": 0},
        teacher=str(DEFAULT_MODEL),
    )
    with pytest.raises(ConfigError, match="window models only"):
        train(recurrent, tmp_path / "gru", progress=False)
    wrong_t = dataclasses.replace(config, model={**student, "t": 3})
    with pytest.raises(ConfigError, match="T=3"):
        train(wrong_t, tmp_path / "t3", progress=False)
