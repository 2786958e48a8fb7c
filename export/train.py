"""Trains a registry architecture on ``export.data``; ``streamer train`` (``export.cli_train``) runs it.

Adam with a cosine schedule on a Charbonnier (or L1) loss. Window models (``conv3d``,
``temporal_filter``) learn the output slot's frame from T-frame windows; the recurrent ``convgru`` is
unrolled over sequences of ``seq_len`` frames from a zero state (truncated backpropagation through
time), as the runtime runs it from a stream's start or a discontinuity.

A run is a pure function of its config: batches depend on ``(seed, step)`` only and the checkpoint
(``OUT/checkpoint.pt``) holds the model, optimizer, scheduler, step, RNG states and the config, so
``--resume`` continues bit for bit where the run stopped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from export.checkpoint import CHECKPOINT, FORMAT, load_checkpoint, save_checkpoint
from export.data import (
    CAMERA_DRAWS,
    MAX_CAMERA_DRAWS,
    Batch,
    Degradation,
    TrainingData,
    add_gaussian_noise,
    heldout_photo_clip,
)
from export.distill import OnnxTeacher, init_weights, warm_start
from export.models.registry import ARCHITECTURES, build
from export.objective import (
    LOSS_SPACES,
    LOSSES,
    enhance_clip,
    is_recurrent,
    noise_strengths,
    psnr,
    training_loss,
    window_input,
    zero_states,
)
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError

__all__ = [
    "CHECKPOINT",
    "TrainConfig",
    "TrainResult",
    "build_model",
    "load_checkpoint",
    "psnr",
    "train",
    "validate",
]

logger = logging.getLogger(__name__)

_VAL_SIGMAS = (15.0, 25.0)


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Everything that defines a training run; stored in the checkpoint and the model card."""

    arch: str = "conv3d"
    model: dict[str, Any] = field(default_factory=dict)
    """Constructor keyword arguments of the architecture (``t`` and ``position`` included)."""
    steps: int = 2000
    batch: int = 16
    crop: int = 96
    lr: float = 1e-3
    min_lr_ratio: float = 0.02
    loss: str = "charbonnier"
    loss_space: str = "rgb"
    """``yuv420``: the loss on the picture a 4:2:0 output delivers (``export.objective.delivered_420``)."""
    seed: int = 0
    seq_len: int = 8
    """Frames per unrolled sequence, for recurrent models."""
    checkpoint_every: int = 500
    grad_clip: float = 1.0
    clip_frames: int | None = None
    """Frames decoded from each training clip, and at most the frames of each photo pan; None is all."""
    photo_frames: int = 48
    val_frames: int = 8
    teacher: str | None = None
    """An exported window model (float NTCHW) whose outputs are a second target (distillation)."""
    distill: float = 1.0
    """Weight of the teacher term in the loss."""
    init: tuple[str, ...] = ()
    """Checkpoints or exported Conv3ds whose weights' leading slices start the model (warm start), in
    turn: a later one overwrites what an earlier one gave (a recurrence from one model, a spatial path
    from another)."""
    init_lr_scale: float = 1.0
    """The learning rate of the tensors ``init`` gave, as a share of ``lr``."""
    camera: float = 0.0
    """Share of sequences damaged as a camera does (``export.camera``), the rest as ``export.data``'s
    default degradations are shared."""
    camera_noiseless: float = 0.0
    """Of the camera draws, the share with no sensor noise (good light: the encoder's damage alone)."""
    camera_draws: int = CAMERA_DRAWS
    """Camera damage draws per training clip, each a whole-clip encode made at start."""
    noise_420: float = 0.0
    """Of the sequences with noise alone, the share whose noisy frames go through 4:2:0 as a video
    stream carries them (``export.data.through_420``)."""


@dataclass(frozen=True, slots=True)
class TrainResult:
    """Where the run ended and how it scored on the held-out validation clip."""

    checkpoint: Path
    step: int
    validation: dict[str, float]
    seconds: float


@dataclass(slots=True)
class _Run:
    """Where a run stands besides its weights and optimizer: the step, the latest validation, the history
    of validations and the seconds spent training."""

    step: int = 0
    validation: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def build_model(arch: str, model: dict[str, Any]) -> nn.Module:
    """The architecture ``arch`` built from its config; a recurrent model must declare its state."""
    module = build(arch, **model)
    if not hasattr(module, "state_specs"):
        raise ModelError(f"architecture {arch!r} does not declare state_specs; see export.models.registry")
    return module


def _forward(model: nn.Module, noisy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Model outputs and the matching clean-frame indices for a (B, L, 3, H, W) sequence batch.

    Window models see the first T frames and enhance their output slot; recurrent models enhance every
    frame of the sequence, unrolled from zero states; either is given each sequence's strength
    (``noise_strengths`` of its first frame) if it takes one.
    """
    module: Any = model  # the registry's attributes (t, layout) are not nn.Module's
    extra = (noise_strengths(noisy[:, 0]),) if getattr(module, "takes_strength", False) else ()
    if is_recurrent(module):
        states = zero_states(module, noisy[:, :1])
        outputs = []
        for i in range(noisy.shape[1]):
            out, *states = module(noisy[:, i : i + 1], *states, *extra)
            outputs.append(out)
        return torch.stack(outputs, dim=1), torch.arange(noisy.shape[1])
    t = int(module.t)
    slot = module.output_position.slot(t)
    out = module(window_input(noisy[:, :t], module.layout), *extra)
    return out.unsqueeze(1), torch.tensor([slot])


def _sequence_length(module: nn.Module, config: TrainConfig) -> int:
    return config.seq_len if is_recurrent(module) else int(getattr(module, "t", 1))


def validate(module: nn.Module, config: TrainConfig, clean: np.ndarray | None = None) -> dict[str, float]:
    """PSNR on the held-out photograph pan at sigma 15 and 25 (fixed noise), and of the noisy input.

    Window models enhance every frame with replicated edges, recurrent ones run the clip from a zero
    state, as the runtime does; a model that takes a strength gets the sigma (what the runtime's noise
    estimate reads on Gaussian noise).
    """
    frames = heldout_photo_clip(config.val_frames, (128, 192)) if clean is None else clean
    target = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 255.0
    result: dict[str, float] = {}
    module.eval()
    with torch.no_grad():
        for sigma in _VAL_SIGMAS:
            noisy_np = add_gaussian_noise(frames, sigma, np.random.default_rng(int(sigma)))
            noisy = torch.from_numpy(noisy_np).permute(0, 3, 1, 2).float() / 255.0
            enhanced = enhance_clip(module, noisy, sigma)
            result[f"psnr_sigma{sigma:g}"] = round(psnr(enhanced, target), 3)
            result[f"noisy_psnr_sigma{sigma:g}"] = round(psnr(noisy, target), 3)
    module.train()
    return result


def train(
    config: TrainConfig,
    out: str | Path,
    *,
    resume: bool = False,
    stop_after: int | None = None,
    threads: int | None = None,
    progress: bool = True,
) -> TrainResult:
    """Trains to ``config.steps`` (or until step ``stop_after``), checkpointing into ``out``.

    With ``resume`` the run continues from ``out/checkpoint.pt`` and its stored config wins over
    ``config``: resuming never silently changes what is being trained.
    """
    out_dir = Path(out)
    path = out_dir / CHECKPOINT
    if threads is not None:
        torch.set_num_threads(threads)
    payload = load_checkpoint(path) if resume else None
    if payload is not None:
        config = _config_from_dict(payload["train_config"])
    _check_config(config)
    torch.manual_seed(config.seed)
    np.random.seed(config.seed)
    module = build_model(config.arch, dict(config.model))
    # Also on resume, where the checkpoint then overwrites the weights: the names set the rates.
    copied = _warm_start(module, config, announce=payload is None)
    optimizer, scheduler = _optimizer(module, config, copied)
    teacher = _teacher(module, config, threads)
    run = _Run() if payload is None else _resume(payload, module, optimizer, scheduler)
    end = config.steps if stop_after is None else min(stop_after, config.steps)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = TrainingData(
        seed=config.seed,
        degradation=Degradation(
            camera=config.camera,
            camera_noiseless=config.camera_noiseless,
            camera_draws=config.camera_draws,
            noise_420=config.noise_420,
        ),
        clip_frames=config.clip_frames,
        photo_frames=config.photo_frames,
    )
    length = _sequence_length(module, config)
    module.train()
    bar = tqdm(total=config.steps, initial=run.step, disable=not progress, unit="step", dynamic_ncols=True)
    while run.step < end:
        started = time.perf_counter()
        batch = data.batch(run.step, config.batch, length, config.crop)
        loss, output, target = _step(module, teacher, optimizer, scheduler, config, batch)
        run.step += 1
        bar.update(1)
        run.seconds += time.perf_counter() - started
        loss_value = float(loss.detach())
        bar.set_postfix(loss=f"{loss_value:.4f}", psnr=f"{psnr(output.detach(), target):.2f}")
        if run.step % config.checkpoint_every == 0 or run.step == end:
            run.validation = validate(module, config)
            run.history.append({"step": run.step, "loss": loss_value, **run.validation})
            scores = json.dumps(run.validation)
            bar.write(f"step {run.step}/{config.steps} loss {loss_value:.4f} validation {scores}")
            _save(path, config, module, optimizer, scheduler, run)
    bar.close()
    return TrainResult(checkpoint=path, step=run.step, validation=run.validation, seconds=run.seconds)


def _warm_start(module: nn.Module, config: TrainConfig, *, announce: bool) -> set[str]:
    """Copies each ``config.init`` source into the module in turn; the names of the tensors they gave."""
    copied: set[str] = set()
    for source in config.init:
        names = warm_start(module, init_weights(source, module))
        copied.update(names)
        if announce:
            logger.info("warm start from %s: %d of %d tensors", source, len(names), len(module.state_dict()))
    return copied


def _optimizer(
    module: nn.Module, config: TrainConfig, copied: set[str]
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam at ``config.lr``, the ``copied`` tensors at ``init_lr_scale`` of it, and its cosine schedule."""
    named = dict(module.named_parameters())
    groups = [{"params": [p for name, p in named.items() if name not in copied], "lr": config.lr}]
    given = [p for name, p in named.items() if name in copied]
    if given:
        groups.append({"params": given, "lr": config.lr * config.init_lr_scale})
    optimizer = torch.optim.Adam(groups, lr=config.lr)
    # Cosine from each group's rate down to min_lr_ratio of it: the --init tensors keep their share.
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, partial(_cosine, config.steps, config.min_lr_ratio)
    )
    return optimizer, scheduler


def _teacher(module: nn.Module, config: TrainConfig, threads: int | None) -> OnnxTeacher | None:
    """The ``config.teacher`` model loaded for distillation, None without one."""
    if config.teacher is None:
        return None
    if is_recurrent(module):
        raise ConfigError("a teacher distils into window models only; drop --teacher for a recurrent model")
    return OnnxTeacher(config.teacher, _sequence_length(module, config), threads)


def _resume(
    payload: dict[str, Any],
    module: nn.Module,
    optimizer: torch.optim.Adam,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
) -> _Run:
    """Loads a checkpoint's weights, optimizer, schedule and RNG states; where its run stood."""
    module.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    torch.set_rng_state(payload["rng"]["torch"])
    np.random.set_state(payload["rng"]["numpy"])
    return _Run(
        step=int(payload["step"]),
        validation=dict(payload.get("validation", {})),
        history=list(payload.get("history", [])),
        seconds=float(payload.get("seconds", 0.0)),
    )


def _step(
    module: nn.Module,
    teacher: OnnxTeacher | None,
    optimizer: torch.optim.Adam,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
    config: TrainConfig,
    batch: Batch,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One optimizer step on ``batch``: the loss, the model's output and the clean frames it was scored on."""
    noisy, clean = torch.from_numpy(batch.noisy), torch.from_numpy(batch.clean)
    output, index = _forward(module, noisy)
    target = clean[:, index]
    loss = training_loss(config.loss, output, target, config.loss_space)
    if teacher is not None:
        guide = teacher(noisy)  # a window model's batch is one window of T frames
        loss = loss + config.distill * training_loss(config.loss, output[:, 0], guide, config.loss_space)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    if config.grad_clip > 0:
        nn.utils.clip_grad_norm_(module.parameters(), config.grad_clip)
    optimizer.step()
    scheduler.step()
    return loss, output, target


def _save(
    path: Path,
    config: TrainConfig,
    module: nn.Module,
    optimizer: torch.optim.Adam,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
    run: _Run,
) -> None:
    """Writes the checkpoint ``--resume`` continues from."""
    save_checkpoint(
        path,
        {
            "format": FORMAT,
            "architecture": config.arch,
            "model_config": module.config(),  # type: ignore[operator]
            "model": module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "step": run.step,
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state()},
            "train_config": dataclasses.asdict(config),
            "validation": run.validation,
            "history": run.history,
            "seconds": round(run.seconds, 1),
            "threads": torch.get_num_threads(),
        },
    )


def _cosine(steps: int, floor: float, step: int) -> float:
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * min(step, steps) / steps))


def _config_from_dict(raw: dict[str, Any]) -> TrainConfig:
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    init = raw.get("init")
    # Checkpoints before repeatable --init stored one path or None.
    raw = {**raw, "init": () if init is None else (init,) if isinstance(init, str) else tuple(init)}
    unknown = set(raw) - known
    if unknown:
        raise ModelError(
            f"checkpoint train_config has unknown keys {sorted(unknown)}; it is from a newer version"
        )
    return TrainConfig(**raw)


def _check_config(config: TrainConfig) -> None:
    if config.arch not in ARCHITECTURES:
        raise ConfigError(f"unknown architecture {config.arch!r}; choose one of {sorted(ARCHITECTURES)}")
    if config.steps < 1 or config.batch < 1 or config.crop < 8 or config.checkpoint_every < 1:
        raise ConfigError(
            f"steps, batch and checkpoint_every must be >= 1 and crop >= 8; got steps={config.steps}, "
            f"batch={config.batch}, crop={config.crop}, checkpoint_every={config.checkpoint_every}"
        )
    if not 0.0 <= config.camera <= 1.0:
        raise ConfigError(f"camera is a share of the training sequences, 0..1; got {config.camera}")
    if not 1 <= config.camera_draws <= MAX_CAMERA_DRAWS:
        raise ConfigError(
            f"camera_draws is the number of camera damage draws per clip, 1..{MAX_CAMERA_DRAWS} (each one "
            f"a whole-clip encode held in memory); got {config.camera_draws}"
        )
    if not 0.0 <= config.camera_noiseless <= 1.0:
        raise ConfigError(
            f"camera_noiseless is a share of the camera draws, 0..1; got {config.camera_noiseless}"
        )
    if not 0.0 <= config.noise_420 <= 1.0:
        raise ConfigError(f"noise_420 is a share of the noise-only sequences, 0..1; got {config.noise_420}")
    if not config.distill >= 0:
        raise ConfigError(f"distill must be >= 0, got {config.distill}")
    if not config.lr > 0:
        raise ConfigError(f"lr must be positive, got {config.lr}")
    if not 0.0 <= config.init_lr_scale <= 1.0:
        raise ConfigError(f"init_lr_scale is a share of lr, 0..1; got {config.init_lr_scale}")
    if config.loss not in LOSSES:
        raise ConfigError(f"loss must be charbonnier, l1 or l2, got {config.loss!r}")
    if config.loss_space not in LOSS_SPACES:
        raise ConfigError(f"loss space must be rgb or yuv420, got {config.loss_space!r}")
    position = config.model.get("position")
    if position is not None and position not in {p.value for p in OutputPosition}:
        raise ConfigError(f"position {position!r} is not one of center | last")
