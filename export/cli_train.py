"""The ``streamer train`` subcommand: its flags, and the handler that runs ``export.train`` with them.

torch is imported inside the handler only: the runtime CLI loads this module to list the subcommand.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from export.cli_args import ARCH_NAMES, add_model_flags, model_kwargs, require_export_extra

__all__ = ["add_train"]


def add_train(subparsers: Any) -> None:
    """Adds ``train`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p = subparsers.add_parser(
        "train",
        help="train a model on the bundled clips and photographs",
        description="Train a registry architecture; checkpoints go to OUT/checkpoint.pt.",
    )
    p.add_argument("--arch", choices=ARCH_NAMES, default="conv3d", help="architecture (default: conv3d)")
    add_model_flags(p)
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps in the schedule (default: 2000)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (default: 16)")
    p.add_argument("--crop", type=int, default=96, help="crop size in pixels (default: 96)")
    p.add_argument(
        "--lr", type=float, default=1e-3, help="peak learning rate, cosine-annealed (default: 1e-3)"
    )
    p.add_argument(
        "--loss",
        choices=("charbonnier", "l1", "l2"),
        default="charbonnier",
        help="charbonnier (a smooth L1), l1, or l2: the squared error PSNR scores (default: charbonnier)",
    )
    p.add_argument(
        "--loss-space",
        choices=("rgb", "yuv420"),
        default="rgb",
        help="rgb, or yuv420: the loss on the picture a 4:2:0 output delivers (luma as it is, colour as "
        "each 2x2 block's mean), which is what a viewer of streamer's output sees (default: rgb)",
    )
    p.add_argument("--seq-len", type=int, default=8, help="unrolled frames for recurrent models (default: 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--checkpoint-every", type=int, default=500, help="steps between checkpoints (default: 500)"
    )
    p.add_argument(
        "--clip-frames", type=int, help="use only this many frames per clip and photo pan (quick runs)"
    )
    _add_camera_flags(p)
    _add_start_flags(p)
    p.add_argument("--out", type=Path, required=True, help="run folder; holds checkpoint.pt")
    p.add_argument("--resume", action="store_true", help="continue OUT/checkpoint.pt with its stored config")
    p.add_argument("--stop-after", type=int, help="stop at this step (the schedule still spans --steps)")
    p.add_argument("--threads", type=int, help="torch intra-op threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_train)


def _add_camera_flags(parser: argparse.ArgumentParser) -> None:
    """How many training sequences are damaged as a camera damages them, and how."""
    parser.add_argument(
        "--camera",
        type=float,
        default=0.0,
        help="share of training sequences damaged as a camera does (export.camera: blur, rescale, sensor "
        "noise, x264 CRF 23..40), from --camera-draws draws per clip made at start (default: 0)",
    )
    parser.add_argument(
        "--camera-draws",
        type=int,
        default=3,
        help="camera damage draws per training clip (1..64), each a whole-clip encode made at start and held "
        "in memory: more draws, more CRFs, GOPs and noises to learn from (default: 3)",
    )
    parser.add_argument(
        "--camera-noiseless",
        type=float,
        default=0.0,
        help="of those camera draws, the share with no sensor noise, always encoded: a camera in good light, "
        "whose stream shows the encoder's damage alone (default: 0)",
    )
    parser.add_argument(
        "--noise-420",
        type=float,
        default=0.0,
        help="share of the sequences with noise alone (Gaussian, shot) whose noisy frames go through 4:2:0 "
        "as a lossless video stream carries them, colour averaged over 2x2 blocks: every stream streamer "
        "reads is 4:2:0, and a model that never saw noise so is left with its colour (default: 0)",
    )


def _add_start_flags(parser: argparse.ArgumentParser) -> None:
    """What the model learns from besides the clips (a teacher) and starts from (--init)."""
    parser.add_argument(
        "--teacher",
        type=Path,
        help="an exported window model (float NTCHW, e.g. conv3d_t5.onnx) whose outputs are a second "
        "target: distils a cheaper tier from it",
    )
    parser.add_argument(
        "--distill", type=float, default=1.0, help="weight of the teacher's term in the loss (default: 1.0)"
    )
    parser.add_argument(
        "--init",
        type=Path,
        action="append",
        help="start from the leading slices of this checkpoint's weights, or of an exported model's (a "
        "Conv3d, streaming or ConvLSTM ONNX file: export.recover rebuilds it; a narrower model takes each "
        "layer's first channels); repeatable, a later one overwriting what "
        "an earlier one gave",
    )
    parser.add_argument(
        "--init-lr-scale",
        type=float,
        default=1.0,
        help="learning rate of the tensors --init gave, as a share of --lr (1): below 1, a trained "
        "path drifts less while the new parts around it (a strength's conditioning) learn at the full rate",
    )


def _run_train(args: argparse.Namespace) -> int:
    require_export_extra("train")
    from export.train import TrainConfig, train  # torch stays out of the runtime CLI

    config = TrainConfig(
        arch=args.arch,
        model=model_kwargs(args),
        steps=args.steps,
        batch=args.batch,
        crop=args.crop,
        lr=args.lr,
        loss=args.loss,
        loss_space=args.loss_space,
        seed=args.seed,
        seq_len=args.seq_len,
        checkpoint_every=args.checkpoint_every,
        clip_frames=args.clip_frames,
        camera=args.camera,
        camera_noiseless=args.camera_noiseless,
        camera_draws=args.camera_draws,
        noise_420=args.noise_420,
        teacher=None if args.teacher is None else str(args.teacher),
        distill=args.distill,
        init=tuple(str(path) for path in args.init or ()),
        init_lr_scale=args.init_lr_scale,
    )
    result = train(
        config,
        args.out,
        resume=args.resume,
        stop_after=args.stop_after,
        threads=args.threads,
        progress=not args.no_progress,
    )
    print(
        f"trained to step {result.step} in {result.seconds:.0f} s; checkpoint {result.checkpoint}; "
        f"validation {json.dumps(result.validation)}"
    )
    return 0
