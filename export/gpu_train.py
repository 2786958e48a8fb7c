"""Trains a recurrent model from a data pack within a wall-clock budget, on a GPU lent for minutes.

``python -m export.gpu_train --pack .data/pack.npz --minutes 6 --out DIR`` runs on ``cuda`` where
there is one (bf16 autocast) and on the CPU otherwise (a smoke run). It needs torch, numpy and OpenCV
only: the pack (``export.datapack``) holds decoded frames, and ``export.sequences`` makes every
sequence and its noise on the device.

Truncated backpropagation through time: a batch of sequences is run from zero states (the runtime's
start, so every sequence begins with a reset) in chunks of ``chunk`` frames; the states go from one
chunk to the next detached, and the optimizer steps after each chunk. The curriculum lengthens chunks
and sequences (4 -> 32 and 16 -> 64 frames) while the frames per step stay ``frames_per_step``, so a
step costs about the same throughout. Sequences cut to other ones part way (no reset): the model
learns to recover from a scene change as from a reset.

The schedule (AdamW, linear warm-up then cosine) is defined in steps. Without ``--steps`` the run
fits its steps to ``--minutes``: it first times one batch of every curriculum phase (those steps train
too, at a tenth of the learning rate) and plans the steps that fill what is left, less a reserve for
validation and saving; a run that still falls behind stops at the budget. ``OUT/checkpoint.pt`` (the
format ``streamer export --checkpoint`` reads) and ``OUT/curve.json`` are written every minute and at
the end. The last validation runs the held-out pan at sigma 25 from a reset and prints PSNR per frame
after it and in the steady state.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from export.checkpoint import CHECKPOINT, FORMAT, save_checkpoint
from export.cli_args import parse_model_args
from export.datapack import DataPack, load_pack
from export.models.registry import build
from export.objective import (
    LOSS_SPACES,
    LOSSES,
    count_macs,
    enhance_clip,
    is_recurrent,
    noise_strengths,
    psnr,
    training_loss,
    zero_states,
)
from export.sequences import DEGRADATION, Motion, SequenceSampler
from streamer.errors import ConfigError, StreamerError

__all__ = ["CURVE", "GpuTrainConfig", "Phase", "main", "train_from_pack", "validate_sequence"]

CURVE = "curve.json"
"""The run's log beside the checkpoint: plan, measured speeds, and the curve."""

_VALIDATION_SIGMA = 25.0
_AFTER_RESET = 10
"""Frames after a reset whose PSNR the validation lists one by one."""


@dataclass(frozen=True, slots=True)
class Phase:
    """Until ``until`` (a share of the steps): ``chunk``-frame chunks of ``sequence``-frame sequences."""

    until: float
    chunk: int
    sequence: int


CURRICULUM = (Phase(0.1, 4, 16), Phase(0.35, 8, 32), Phase(0.7, 16, 32), Phase(1.0, 32, 64))
"""Short chunks first (fast, many sequences per batch), then long ones: memory over 32 frames."""


@dataclass(frozen=True, slots=True)
class GpuTrainConfig:
    """Everything that defines a run; stored in the checkpoint (``train_config``) and the curve."""

    arch: str = "convlstm"
    model: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None
    """Optimizer steps in the schedule; None fits them to ``minutes``."""
    minutes: float = 6.0
    """Wall-clock budget of the whole run, from start to the last file written."""
    frames_per_step: int = 512
    """Frames per optimizer step: the batch is this over the phase's chunk length."""
    crop: int = 160
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.02
    warmup: float = 0.05
    """Share of the steps over which the learning rate climbs to ``lr``."""
    weight_decay: float = 1e-4
    loss: str = "charbonnier"
    loss_space: str = "rgb"
    """``yuv420``: the loss on the picture a 4:2:0 output delivers (``export.objective.delivered_420``)."""
    grad_clip: float = 1.0
    seed: int = 0
    curriculum: tuple[Phase, ...] = CURRICULUM
    motion: Motion = field(default_factory=Motion)
    reserve_s: float = 25.0
    """Seconds kept back from the budget for the last validation and checkpoint."""
    checkpoint_every_s: float = 60.0
    log_every_s: float = 20.0
    init: str | None = None
    """Weights to start from: an exported model or a checkpoint, copied by name where shapes allow
    (``export.distill.warm_start``); e.g. conv3d_t1.onnx into the ConvLSTM's spatial path."""
    init_lr_scale: float = 1.0
    """The learning rate of the tensors ``init`` gave, as a share of ``lr``: below 1, a trained spatial
    path drifts less while the new parts around it learn at the full rate."""


def _check(config: GpuTrainConfig) -> None:
    if config.steps is not None and config.steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {config.steps}")
    if not 0.0 <= config.init_lr_scale <= 1.0:
        raise ConfigError(f"--init-lr-scale is a share of --lr, 0..1; got {config.init_lr_scale}")
    if not config.minutes > 0 or not config.lr > 0:
        raise ConfigError(f"--minutes and --lr must be positive; got {config.minutes} and {config.lr}")
    if config.loss not in LOSSES:
        raise ConfigError(f"--loss must be one of {LOSSES}, got {config.loss!r}")
    if config.loss_space not in LOSS_SPACES:
        raise ConfigError(f"--loss-space must be one of {LOSS_SPACES}, got {config.loss_space!r}")
    ends = [p.until for p in config.curriculum]
    if not config.curriculum or ends != sorted(ends) or ends[-1] != 1.0:
        raise ConfigError(f"the curriculum's phases must end in increasing order at 1.0; got {ends}")
    for phase in config.curriculum:
        if phase.chunk < 1 or phase.sequence % phase.chunk or config.frames_per_step % phase.chunk:
            raise ConfigError(
                f"phase {phase}: the sequence and --frames-per-step ({config.frames_per_step}) must be "
                "whole multiples of the chunk"
            )


@dataclass(frozen=True, slots=True)
class _Schedule:
    """The curriculum and learning rate by step; step ``start`` (after calibration) is the schedule's 0."""

    config: GpuTrainConfig
    start: int
    total: int

    def phase(self, step: int) -> Phase:
        done = (step - self.start) / max(1, self.total - self.start)
        return next(p for p in self.config.curriculum if done < p.until or p.until == 1.0)

    def lr(self, step: int) -> float:
        """Linear warm-up from a tenth of ``lr``, then cosine down to ``lr * min_lr_ratio``."""
        c = self.config
        span = max(1, self.total - self.start)
        warm = max(1, round(c.warmup * span))
        at = step - self.start
        if at < warm:
            return c.lr * (0.1 + 0.9 * at / warm)
        progress = min(1.0, (at - warm) / max(1, span - warm))
        low = c.lr * c.min_lr_ratio
        return low + (c.lr - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


class _Run:
    """The model, optimizer and sampler of one run, stepping through batches of sequences."""

    def __init__(self, config: GpuTrainConfig, pack: DataPack, device: torch.device) -> None:
        self.config = config
        self.device = device
        torch.manual_seed(config.seed)
        self.module = build(config.arch, **config.model).to(device)
        if not is_recurrent(self.module):
            raise ConfigError(f"export.gpu_train trains recurrent models; {config.arch!r} declares no state")
        self.module.train()
        self.warm_started: list[str] = []
        if config.init is not None:
            from export.distill import init_weights, warm_start

            self.warm_started = warm_start(self.module, init_weights(config.init, self.module))
        named = dict(self.module.named_parameters())
        given = [p for name, p in named.items() if name in self.warm_started]
        groups = [{"params": [p for name, p in named.items() if name not in self.warm_started], "scale": 1.0}]
        if given:
            groups.append({"params": given, "scale": config.init_lr_scale})
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
        self.sampler = SequenceSampler(pack, device, config.crop, config.motion, config.seed)
        self.amp = device.type == "cuda"
        self.step = 0

    def train_step(
        self,
        noisy: torch.Tensor,
        clean: torch.Tensor,
        states: list[torch.Tensor],
        lr: float,
        strength: tuple[torch.Tensor, ...] = (),
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One optimizer step on a chunk: its (loss, mean squared error) and the states at its end, detached.

        Nothing here waits for the device: the figures stay tensors until a log line reads them.
        """
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["scale"]
        outputs = []
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            for i in range(noisy.shape[1]):
                out, *states = self.module(noisy[:, i : i + 1], *states, *strength)
                outputs.append(out)
        output = torch.stack(outputs, dim=1).float()
        loss = training_loss(self.config.loss, output, clean, self.config.loss_space)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        if self.config.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.module.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.step += 1
        with torch.no_grad():
            mse = torch.mean((output.clamp(0.0, 1.0) - clean) ** 2)
        return torch.stack([loss.detach(), mse]), [s.detach() for s in states]

    def run_batch(
        self, phase: Phase, lr_at: Callable[[int], float], stop: Callable[[], bool]
    ) -> list[torch.Tensor]:
        """One batch of sequences of ``phase``, chunk by chunk from zero states (until ``stop()``): each
        step's (loss, mean squared error)."""
        size = self.config.frames_per_step // phase.chunk
        clean = self.sampler.clean(size, phase.sequence)
        noise = self.sampler.noise(size)
        states = zero_states(self.module, clean[:, :1])
        results = []
        strength: tuple[torch.Tensor, ...] | None = None
        for start in range(0, phase.sequence, phase.chunk):
            target = clean[:, start : start + phase.chunk].float() / 255.0
            noisy = self.sampler.degrade(target, noise)
            if strength is None:
                strength = self.strength(noisy[:, 0])
            figures, states = self.train_step(noisy, target, states, lr_at(self.step), strength)
            results.append(figures)
            if stop():
                break
        return results

    def strength(self, first: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """For a model that takes a strength, what ``model.strength: auto`` would feed each sequence: the
        noise estimate (``streamer.core.noise``) of its first degraded frame, (B, 3, H, W) in [0, 1]."""
        return (noise_strengths(first),) if getattr(self.module, "takes_strength", False) else ()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def validate_sequence(
    module: nn.Module, clip: torch.Tensor, sigma: float = _VALIDATION_SIGMA
) -> dict[str, Any]:
    """PSNR per frame with fixed Gaussian noise of ``sigma``, run from a reset over ``clip`` (N, 3, H, W in
    [0, 1]) played forth, back and forth again (3N - 2 frames, longer than any training sequence, so a
    state that drifts shows): the first ``_AFTER_RESET`` frames one by one, the steady state (the mean of
    the second half), and how far frame 5 is below it."""
    frames = torch.cat([clip, clip.flip(0)[1:], clip[1:]])
    generator = torch.Generator().manual_seed(int(sigma))
    noise = torch.randn(frames.shape, generator=generator).to(frames.device) * (sigma / 255.0)
    noisy = ((frames + noise) * 255.0).round().clamp(0, 255) / 255.0
    module.eval()
    with torch.no_grad():
        enhanced = enhance_clip(module, noisy, sigma)
    module.train()
    per_frame = [psnr(enhanced[i], frames[i]) for i in range(len(frames))]
    late = per_frame[len(per_frame) // 2 :]
    steady = sum(late) / len(late)
    return {
        "sigma": sigma,
        "frames": len(per_frame),
        "psnr_after_reset": [round(v, 3) for v in per_frame[:_AFTER_RESET]],
        "psnr_steady": round(steady, 3),
        "frame5_below_steady_db": round(steady - per_frame[min(4, len(per_frame) - 1)], 3),
        "noisy_psnr": round(psnr(noisy, frames), 3),
    }


def _calibrate(run: _Run, log: Callable[[str], None]) -> dict[str, float]:
    """Seconds per step of each phase: one untimed batch (kernel selection), then one timed batch; both
    train, at a tenth of the learning rate."""
    config = run.config
    seconds: dict[str, float] = {}
    slow = config.lr * 0.1
    for phase in config.curriculum:
        key = _key(phase)
        if key in seconds:
            continue
        run.run_batch(phase, lambda _step: slow, lambda: False)
        run.sync()
        started = time.perf_counter()
        steps = len(run.run_batch(phase, lambda _step: slow, lambda: False))
        run.sync()
        seconds[key] = (time.perf_counter() - started) / steps
        batch = config.frames_per_step // phase.chunk
        log(f"calibration: {key} batch {batch}: {1 / seconds[key]:.2f} steps/s")
    return seconds


def _key(phase: Phase) -> str:
    return f"chunk{phase.chunk}_sequence{phase.sequence}"


def _plan(config: GpuTrainConfig, seconds: dict[str, float], left: float, done: int) -> int:
    """The steps (calibration's ``done`` among them) that fill ``left`` seconds at the measured speeds."""
    if config.steps is not None:
        return config.steps
    per_step, start = 0.0, 0.0
    for phase in config.curriculum:
        per_step += (phase.until - start) * seconds[_key(phase)]
        start = phase.until
    return done + int(max(0.0, left) / per_step)


class _Clock:
    """The run's budget: seconds since ``began`` and to the deadline; log lines stamped with them."""

    def __init__(self, began: float, budget_s: float) -> None:
        self.began = began
        self.deadline = began + budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, line: str) -> None:
        print(f"[{self.elapsed():6.1f} s] {line}", flush=True)


class _Recorder:
    """Validates and writes ``checkpoint.pt`` and ``curve.json``; keeps the curve."""

    def __init__(self, run: _Run, pack: DataPack, out: Path, curve: dict[str, Any], clock: _Clock) -> None:
        self.run = run
        self.pack = pack
        self.out = out
        self.curve = curve
        self.clock = clock
        self.frames = torch.from_numpy(pack.validation).permute(0, 3, 1, 2).float().to(run.device) / 255.0
        self.losses: list[torch.Tensor] = []
        """Each step's (loss, mean squared error) since the last save."""

    def save(self, total: int, final: bool) -> None:
        run = self.run
        entry: dict[str, Any] = {"step": run.step, "seconds": round(self.clock.elapsed(), 1)}
        if self.losses:
            entry["loss"], entry["train_psnr"] = _averages(self.losses)
            self.losses.clear()
        entry["validation"] = v = validate_sequence(run.module, self.frames)
        self.curve["history"].append(entry)
        self.curve |= {"steps": run.step, "seconds": entry["seconds"], "finished_schedule": run.step >= total}
        _, _, h, w = self.frames.shape
        payload = {
            "format": FORMAT,
            "architecture": run.config.arch,
            "model_config": run.module.config(),  # type: ignore[operator]
            "model": {k: t.detach().cpu() for k, t in run.module.state_dict().items()},
            "step": run.step,
            "train_config": self.curve["config"],
            "validation": v,
            "validation_data": (
                f"{self.pack.description['validation']['what']}, {len(self.frames)} frames {h}x{w} played "
                f"forth, back and forth ({v['frames']} frames), Gaussian noise sigma {v['sigma']:g} "
                "(seeded), run from a reset; steady: the second half's mean"
            ),
            "history": self.curve["history"],
            "seconds": entry["seconds"],
            "trainer": "export.gpu_train",
            "device": self.curve["device"],
            "data": self.pack.description,
            "degradation": DEGRADATION,
        }
        save_checkpoint(self.out / CHECKPOINT, payload)
        (self.out / CURVE).write_text(json.dumps(self.curve, indent=2) + "\n")
        after = " ".join(f"{p:.2f}" for p in v["psnr_after_reset"])
        self.clock.log(
            f"{'final ' if final else ''}validation at step {run.step}: sigma {v['sigma']:g} steady "
            f"{v['psnr_steady']:.2f} dB (noisy {v['noisy_psnr']:.2f}), after a reset {after}; frame 5 "
            f"{v['frame5_below_steady_db']:.2f} dB below steady; wrote {self.out / CHECKPOINT}"
        )


def train_from_pack(
    config: GpuTrainConfig,
    pack: DataPack,
    out: str | Path,
    device: torch.device,
    started: float | None = None,
) -> dict[str, Any]:
    """Trains within ``config.minutes`` from ``started`` (``time.monotonic()``, default now); the curve."""
    _check(config)
    clock = _Clock(time.monotonic() if started is None else started, config.minutes * 60.0)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    run = _Run(config, pack, device)
    copied = run.warm_started
    if config.init is not None:
        clock.log(
            f"warm start from {config.init}: {len(copied)} of {len(run.module.state_dict())} tensors, at "
            f"{config.init_lr_scale:g}x the learning rate"
        )
    example = torch.zeros(1, 1, 3, config.crop, config.crop, device=device)
    macs = count_macs(run.module, (example, *zero_states(run.module, example), *run.strength(example[:, 0])))
    flop = 2 * 3 * macs * config.frames_per_step  # a forward pass and about twice that backward
    parameters = sum(p.numel() for p in run.module.parameters())
    clock.log(
        f"{config.arch} {config.model or 'defaults'} on {_device_name(device)}: {parameters:,} parameters, "
        f"{macs / 1e9:.3f} GMAC per {config.crop}x{config.crop} frame, {config.frames_per_step} frames "
        f"per step: ~{flop / 1e12:.2f} TFLOP per step"
    )
    seconds = _calibrate(run, clock.log)
    start = run.step
    total = _plan(config, seconds, clock.left() - config.reserve_s, start)
    clock.log(f"plan: {total} steps ({start} of them calibration) within {config.minutes * 60:.0f} s")
    curve: dict[str, Any] = {
        "config": json.loads(json.dumps(dataclasses.asdict(config))),
        "device": _device_name(device),
        "parameters": parameters,
        "macs_per_frame": macs,
        "tflop_per_step": flop / 1e12,
        "calibration_seconds_per_step": seconds,
        "planned_steps": total,
        "warm_started": copied,
        "history": [],
    }
    recorder = _Recorder(run, pack, out_dir, curve, clock)
    schedule = _Schedule(config, start, total)
    began = last_log = last_save = time.monotonic()

    def stop() -> bool:
        return run.step >= total or clock.left() < config.reserve_s

    while not stop():
        phase = schedule.phase(run.step)
        recorder.losses += run.run_batch(phase, schedule.lr, stop)
        now = time.monotonic()
        if now - last_log >= config.log_every_s:
            loss, quality = _averages(recorder.losses[-20:])
            rate = (run.step - start) / max(1e-9, now - began)
            clock.log(
                f"step {run.step}/{total} chunk {phase.chunk} sequence {phase.sequence} batch "
                f"{config.frames_per_step // phase.chunk}: loss {loss:.4f} PSNR {quality:.2f} dB, "
                f"{rate:.2f} steps/s, "
                f"lr {schedule.lr(run.step):.2e}, {clock.left():.0f} s left"
            )
            last_log = now
        if now - last_save >= config.checkpoint_every_s:
            recorder.save(total, final=False)
            last_save = time.monotonic()
    if run.step < total:
        clock.log(f"stopped by the budget at step {run.step} of {total}: the schedule did not finish")
    recorder.save(total, final=True)
    return curve


def _averages(figures: list[torch.Tensor]) -> tuple[float, float]:
    """The mean loss and the PSNR of the mean squared error of steps' (loss, mse) figures."""
    loss, mse = (float(v) for v in torch.stack(figures).mean(dim=0))
    return round(loss, 5), round(10.0 * math.log10(1.0 / max(mse, 1e-12)), 3)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)}, torch {torch.__version__})"
    return f"{device.type} (torch {torch.__version__}, {torch.get_num_threads()} threads)"


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    defaults = GpuTrainConfig()
    parser = argparse.ArgumentParser(
        prog="python -m export.gpu_train", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--pack", type=Path, required=True, help="a data pack (python -m export.datapack)")
    parser.add_argument("--out", type=Path, required=True, help="folder for checkpoint.pt and curve.json")
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="wall-clock budget (6)")
    parser.add_argument("--steps", type=int, help="steps in the schedule (default: fit to --minutes)")
    parser.add_argument("--arch", default=defaults.arch, help="a recurrent registry architecture (convlstm)")
    parser.add_argument(
        "--model-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="constructor argument, repeatable",
    )
    parser.add_argument("--frames-per-step", type=int, default=defaults.frames_per_step, help="(512)")
    parser.add_argument("--crop", type=int, default=defaults.crop, help="crop size in pixels (160)")
    parser.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate (1.5e-3)")
    parser.add_argument(
        "--loss-space",
        choices=LOSS_SPACES,
        default=defaults.loss_space,
        help="rgb, or yuv420: the loss on the picture a 4:2:0 output delivers (rgb)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--curriculum",
        metavar="UNTIL:CHUNK:SEQUENCE,...",
        help="phases, e.g. the default 0.1:4:16,0.35:8:32,0.7:16:32,1:32:64",
    )
    parser.add_argument(
        "--init",
        metavar="ONNX|CHECKPOINT",
        help="start from these weights, copied by name where the shapes allow (e.g. conv3d_t1.onnx "
        "into convlstm's spatial path)",
    )
    parser.add_argument(
        "--init-lr-scale",
        type=float,
        default=defaults.init_lr_scale,
        help="learning rate of the --init tensors as a share of --lr (1)",
    )
    parser.add_argument("--device", default="auto", help="cuda, cpu or auto: cuda where there is one")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (CPU runs)")
    args = parser.parse_args(argv)
    try:
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        auto = "cuda" if torch.cuda.is_available() else "cpu"
        device = torch.device(auto if args.device == "auto" else args.device)
        config = GpuTrainConfig(
            arch=args.arch,
            model=parse_model_args(args.model_arg),
            steps=args.steps,
            minutes=args.minutes,
            frames_per_step=args.frames_per_step,
            crop=args.crop,
            lr=args.lr,
            loss_space=args.loss_space,
            seed=args.seed,
            curriculum=CURRICULUM if args.curriculum is None else _curriculum(args.curriculum),
            init=args.init,
            init_lr_scale=args.init_lr_scale,
        )
        pack = load_pack(args.pack)
        clips = ", ".join(f"{name} {len(frames)} frames" for name, frames in pack.clips.items())
        print(f"pack {args.pack}: {clips}, {len(pack.photos)} photos", flush=True)
        curve = train_from_pack(config, pack, args.out, device, started)
    except StreamerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"done: {curve['steps']} steps in {curve['seconds']:.0f} s; wrote {args.out / CHECKPOINT}, {CURVE}")
    return 0


def _curriculum(text: str) -> tuple[Phase, ...]:
    try:
        return tuple(Phase(float(u), int(c), int(s)) for u, c, s in (p.split(":") for p in text.split(",")))
    except ValueError:
        raise ConfigError(
            f"--curriculum takes UNTIL:CHUNK:SEQUENCE,... (e.g. 0.5:8:32,1:16:32), got {text!r}"
        ) from None


if __name__ == "__main__":
    sys.exit(main())
