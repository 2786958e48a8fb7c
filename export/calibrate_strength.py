"""``python -m export.calibrate_strength``: what strength a model with a strength input should get for
each noise estimate, measured, and written into the model as its ``streamer.strength_curve``.

A strength model is trained to remove noise of the sigma it is told, but told the true sigma it can
be too gentle or too harsh, and the stream's estimate (``streamer.core.noise``) is not the true sigma
either. So, on clips the model was trained on (never the benchmarks' held-out ``bikes`` and
``chelsea``), each is given Gaussian noise of a range of sigmas (0: clean), and the model runs on each
at every strength of a grid, as live frames run (``streamer.measure.enhanced.model_frames``); for each
sigma the estimate that ``auto`` would read (the median of the per-frame estimates) is paired with the
strength whose mean PSNR over the clips is highest. Made monotone (a higher estimate never gets a
lower strength), the pairs are the curve ``auto`` follows (``ModelInfo.auto_strength``); ``--write``
stores it in the ONNX file's metadata and its card. Then ``streamer bench quality`` on the held-out
clip says what it is worth.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from tqdm import tqdm

from export.measured import store_measured
from streamer.backend.onnx import OnnxBackend
from streamer.contract import Key, strength_curve
from streamer.core.noise import noise_sigma
from streamer.errors import ConfigError
from streamer.measure.clips import add_noise, load_clip, parse_size
from streamer.measure.enhanced import model_frames
from streamer.measure.metrics import Clip, psnr
from streamer.media.samples import sample_clip

__all__ = ["Level", "calibrate", "curve_of", "main", "write_curve"]

SIGMAS = (6.0, 10.0, 15.0, 20.0, 25.0, 35.0, 50.0)
"""From 6 up: under it, the training clips' own compression (bigbuckbunny is an H.264 file) is most of
what differs from the reference, and a strength model's low strengths deblock it (as they should on a
compressed feed), which PSNR against those artifacts counts as harm, so below 6 the grid's winner
answers the compression rather than the noise (on conv3d_t1_strength, a clean clip's "best" strength is
far from 0). Quieter feeds get the curve's line down to (0, 0)."""
STRENGTHS = (0.0, 3.0, 6.0, 9.0, 12.0, 16.0, 20.0, 25.0, 30.0, 35.0, 40.0, 50.0, 60.0, 70.0)
CLIPS = ("bigbuckbunny", "carphone_pristine")
"""Sample clips in the training data (``export.datapack``); bikes.mp4 is held out for the benchmarks."""


@dataclass(frozen=True, slots=True)
class Level:
    """One noise level: what auto reads, and how each strength scores (mean PSNR over the clips)."""

    sigma: float
    estimate: float
    """Mean over the clips of the median per-frame estimate: what ``auto`` converges to."""
    psnr_by_strength: dict[float, float]
    best: float
    """The strength with the highest mean PSNR."""
    psnr_auto: float
    """Mean PSNR with the estimate itself as the strength (``auto`` without a curve), interpolated
    from the grid."""


def _estimate(clip: Clip) -> float:
    return float(statistics.median(noise_sigma(frame) for frame in clip))


def calibrate(
    backend: OnnxBackend,
    clips: Sequence[Clip],
    sigmas: Sequence[float] = SIGMAS,
    strengths: Sequence[float] = STRENGTHS,
    seed: int = 0,
) -> list[Level]:
    if not backend.info.strength:
        raise ConfigError(f"model {backend.info.name} takes no strength input; there is nothing to calibrate")
    levels: list[Level] = []
    with tqdm(total=len(sigmas) * len(strengths) * len(clips), unit="run") as bar:
        for sigma in sigmas:
            noisy = [add_noise(clean, sigma, seed) if sigma else clean for clean in clips]
            estimate = float(np.mean([_estimate(clip) for clip in noisy]))
            scores: dict[float, float] = {}
            for strength in strengths:
                runs = []
                for clean, clip in zip(clips, noisy, strict=True):
                    out = np.stack(list(model_frames(backend, clip, Fraction(25), strength)))
                    runs.append(psnr(out, clean))
                    bar.update()
                scores[strength] = float(np.mean(runs))
                bar.set_description(f"sigma {sigma:g}, strength {strength:g}: {scores[strength]:.2f} dB")
            grid = sorted(scores)
            auto = float(np.interp(estimate, grid, [scores[s] for s in grid]))
            levels.append(Level(sigma, estimate, scores, max(grid, key=scores.__getitem__), auto))
    return levels


def curve_of(levels: Sequence[Level]) -> tuple[tuple[float, float], ...]:
    """The (estimate, strength) points, estimates rising, strengths never falling, from (0, 0): no
    noise, no strength."""
    points: list[tuple[float, float]] = [(0.0, 0.0)]
    for level in sorted(levels, key=lambda lv: lv.estimate):
        x = round(level.estimate, 2)
        y = max([level.best, *(p[1] for p in points)])
        if x <= points[-1][0]:
            points[-1] = (points[-1][0], max(points[-1][1], y))
        else:
            points.append((x, y))
    return tuple(points)


def _text(curve: Sequence[tuple[float, float]]) -> str:
    return ",".join(f"{x:g}:{y:g}" for x, y in curve)


def write_curve(model: Path, curve: Sequence[tuple[float, float]], how: str) -> None:
    """Stores ``curve`` in the model's metadata (and its card beside it, where there is one)."""
    text = _text(curve)
    strength_curve(text, str(model))  # what the runtime will read back
    card = {"strength_curve": {"points": [list(p) for p in curve], "measured": how}}
    store_measured(model, Key.STRENGTH_CURVE, text, card)


def _markdown(levels: Sequence[Level], curve: Sequence[tuple[float, float]]) -> str:
    lines = [
        "| sigma | estimate (auto reads) | PSNR, strength = estimate | best strength | PSNR at best | gain |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in levels:
        best = lv.psnr_by_strength[lv.best]
        lines.append(
            f"| {lv.sigma:g} | {lv.estimate:.2f} | {lv.psnr_auto:.2f} | {lv.best:g} | {best:.2f} | "
            f"{best - lv.psnr_auto:+.2f} |"
        )
    lines.append("")
    lines.append(f"curve (estimate:strength): {_text(curve)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.calibrate_strength", description=__doc__)
    parser.add_argument("--model", type=Path, required=True, help="an ONNX model with a strength input")
    parser.add_argument(
        "--clips", default=",".join(CLIPS), help="sample clips (training ones), comma-separated"
    )
    parser.add_argument("--frames", type=int, default=32, help="frames of each clip")
    parser.add_argument("--size", default="480x270", help="the clips resized to WxH")
    parser.add_argument("--sigmas", default=",".join(f"{s:g}" for s in SIGMAS), help="noise sigmas, 0: none")
    parser.add_argument("--strengths", default=",".join(f"{s:g}" for s in STRENGTHS), help="the grid tried")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime threads (default: its own)")
    parser.add_argument("--write", action="store_true", help="store the curve in the model and its card")
    parser.add_argument("--json", type=Path, help="write every level's scores here")
    args = parser.parse_args(argv)
    if not args.model.is_file():
        parser.error(f"--model {str(args.model)!r} is not a file")
    if args.frames < 2:
        parser.error(f"--frames {args.frames}: give at least 2")
    try:
        sigmas = [float(s) for s in args.sigmas.split(",")]
        strengths = [float(s) for s in args.strengths.split(",")]
    except ValueError as err:
        parser.error(f"--sigmas and --strengths take comma-separated numbers: {err}")
    if any(not 0 <= v <= 255 for v in [*sigmas, *strengths]):
        parser.error("--sigmas and --strengths are in 0..255 levels")
    size = parse_size(args.size)
    names = [c.strip() for c in args.clips.split(",") if c.strip()]
    clips = [load_clip(sample_clip(name), args.frames, size)[0] for name in names]
    backend = OnnxBackend(args.model, threads=args.threads, spin=True)
    try:
        levels = calibrate(backend, clips, sigmas, strengths)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    curve = curve_of(levels)
    print(_markdown(levels, curve))
    if args.json:
        args.json.write_text(json.dumps([asdict(lv) for lv in levels], indent=1))
    if args.write:
        how = (
            f"python -m export.calibrate_strength on {', '.join(names)} ({args.frames} frames at "
            f"{args.size}), Gaussian sigmas {args.sigmas}, strengths {args.strengths}"
        )
        write_curve(args.model, curve, how)
        print(f"wrote {Key.STRENGTH_CURVE} into {args.model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
