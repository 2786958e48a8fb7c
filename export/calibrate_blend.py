"""``python -m export.calibrate_blend``: where a model starts to help a camera's stream, measured, and
written into the model as its ``streamer.blend`` (do no harm, ``streamer.core.blend``).

On clips the models were trained on (never the benchmarks' held-out ``bikes``), each clip is sent as a
camera would send it at a range of damage: clean (coded losslessly), x264 at CRF 18 to 40, and noise
then compression. Each stream goes through the pipeline and the file output at its defaults with the
model given its whole change (``streamer.measure.delivered``), and is written by that output alone, which
is what an identity model delivers (the path adds nothing); the gain is the difference of the two as a
user receives them (PSNR against the clean frames), and each stream's
damage is what the runtime reads of it: its decoder's median quantizer and median noise estimate.

The blend's quantizer ramp gives none of the change up to the highest quantizer of a stream without
noise that the model harmed by more than ``--tolerance`` dB, and all of it from the next such stream's
quantizer up: where the harm was smaller, the same quantizer on other footage is where the model gains
(the quantizer a given damage reads as follows the content), and giving that up would cost more than
the harm. The noise ramp gives none up to the highest noise estimate of a stream without noise (what
the clips' own texture reads as) and all from twice that: a stream must read clearly noisier than clean
footage before its noise alone is worth the change. ``--write`` stores the blend in the ONNX file's
metadata and its card; ``streamer bench quality --track camera`` on the held-out clip then says what it
is worth.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from tqdm import tqdm

from export.measured import store_measured
from streamer.backend.onnx import OnnxBackend
from streamer.contract import Key
from streamer.core.blend import FULL, Blend
from streamer.core.noise import noise_sigma
from streamer.measure.clips import camera_stream, load_clip, parse_size
from streamer.measure.delivered import delivered, reencoded
from streamer.measure.metrics import Clip, psnr
from streamer.media.colour import to_rgb, yuv_of
from streamer.media.quantizer import DECODER_OPTIONS, quantizer
from streamer.media.samples import sample_clip

__all__ = ["Damage", "Measured", "blend_of", "main", "measure", "write_blend"]

CLIPS = ("bigbuckbunny", "carphone_pristine")
"""Sample clips in the training data (``export.datapack``); bikes.mp4 is held out for the benchmarks."""


@dataclass(frozen=True, slots=True)
class Damage:
    """One way a camera's stream is damaged: noise (Gaussian ``sigma``, or a sensor's read and shot
    noise), then x264 at ``crf`` (None: coded losslessly)."""

    key: str
    sigma: float = 0.0
    shot: float = 0.0
    crf: int | None = None

    def stream(self, clean: Clip, fps: Fraction, path: Path, seed: int) -> None:
        """Writes the stream a camera would send of ``clean`` to ``path``."""
        camera_stream(clean, fps, seed, path, sigma=self.sigma, shot=self.shot, crf=self.crf)


DAMAGES = (
    Damage("clean"),
    *(Damage(f"crf{crf}", crf=crf) for crf in (18, 23, 27, 30, 33, 36, 40)),
    Damage("sensor_crf28", sigma=6.0, shot=0.5, crf=28),
    Damage("noise8_crf24", sigma=8.0, crf=24),
    Damage("noise15_crf30", sigma=15.0, crf=30),
)


@dataclass(frozen=True, slots=True)
class Measured:
    """One damage, over the clips: what the runtime reads of it and what the model's change is worth."""

    key: str
    noisy: bool
    quantizer: float
    """Mean over the clips of the stream's median mean QP."""
    sigma: float
    """Mean over the clips of the stream's median noise estimate."""
    identity: float
    """Mean PSNR delivered with an identity model (the stream written by the file output alone)."""
    model: float
    """Mean PSNR delivered with the model's whole change."""

    @property
    def gain(self) -> float:
        return self.model - self.identity


def _read(path: Path) -> tuple[float, float]:
    """A stream's median quantizer and median noise estimate, as the runtime reads them."""
    quantizers, sigmas = [], []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.codec_context.options = DECODER_OPTIONS
        for frame in container.decode(stream):
            q = quantizer(frame)
            quantizers.append(0.0 if q is None else q)
            planes = yuv_of(frame)
            sigmas.append(noise_sigma(planes if planes is not None else to_rgb(frame)))
    return statistics.median(quantizers), statistics.median(sigmas)


def measure(
    model: OnnxBackend,
    clips: Sequence[Clip],
    fps: Fraction,
    damages: Sequence[Damage],
    work: Path,
    seed: int = 0,
    step: Callable[[], object] = lambda: None,
) -> list[Measured]:
    """Every damage of every clip through the pipeline with the model, and written alone."""
    out = []
    for damage in damages:
        rows = []
        for k, clean in enumerate(clips):
            stream = work / f"{damage.key}_{k}.mp4"
            damage.stream(clean, fps, stream, seed)
            q, sigma = _read(stream)
            base = psnr(reencoded(stream, work / "out.mp4"), clean)
            mine = psnr(delivered(stream, model, work / "out.mp4", blend=FULL), clean)
            rows.append((q, sigma, base, mine))
            step()
        q, sigma, base, mine = (float(np.mean(column)) for column in zip(*rows, strict=True))
        out.append(Measured(damage.key, damage.sigma > 0, q, sigma, base, mine))
    return out


TOLERANCE_DB = 0.05
"""The harm on one stream without noise that a quantizer ramp leaves in place rather than give up the
gains the same quantizer brings on other footage: small beside what a re-encode costs, so that a model
delivers at least what the identity delivers."""


def blend_of(measured: Sequence[Measured], tolerance: float = TOLERANCE_DB) -> Blend:
    """The ramps (see the module docstring); the whole change everywhere for a model that harmed no
    stream without noise by more than ``tolerance`` dB."""
    quiet = sorted((m for m in measured if not m.noisy), key=lambda m: m.quantizer)
    harmed = [m.quantizer for m in quiet if m.gain < -tolerance]
    if not quiet or not harmed:
        return FULL
    worst = max(harmed)
    above = [m.quantizer for m in quiet if m.quantizer > worst]
    texture = max(m.sigma for m in quiet)
    q_full = min(above) if above else 51.0
    return Blend((round(worst, 1), round(q_full, 1)), (round(texture, 2), round(2 * texture, 2)))


def _measured(
    path: Path, names: Sequence[str], frames: int, size: tuple[int, int], threads: int | None, quiet: bool
) -> list[Measured]:
    clips = [load_clip(sample_clip(name), frames, size)[0] for name in names]
    model = OnnxBackend(path, threads=threads)
    with tempfile.TemporaryDirectory(prefix="streamer-blend-") as work:
        try:
            with tqdm(total=len(DAMAGES) * len(clips), disable=quiet, unit="stream") as bar:
                return measure(model, clips, Fraction(25), DAMAGES, Path(work), step=bar.update)
        finally:
            model.close()


def _load(path: Path) -> list[Measured]:
    """Figures ``--json`` wrote: one object per stream, as :class:`Measured` holds them."""
    fields = ("key", "noisy", "quantizer", "sigma", "identity", "model")
    try:
        rows = json.loads(path.read_text())
        return [Measured(**{k: row[k] for k in fields}) for row in rows]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"--measured {str(path)!r}: not figures written by --json ({err})") from None


def write_blend(model: Path, blend: Blend, how: str) -> None:
    """Stores ``blend`` in the model's metadata (and its card beside it, where there is one)."""
    store_measured(
        model, Key.BLEND, blend.describe(), {"blend": {"ramps": blend.describe(), "measured": how}}
    )


def _markdown(measured: Sequence[Measured], blend: Blend) -> str:
    lines = [
        "| stream | quantizer | noise estimate | identity (dB) | whole change (dB) | gain | blend weight |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in measured:
        weight = blend.weight(m.quantizer, m.sigma)
        lines.append(
            f"| {m.key} | {m.quantizer:.1f} | {m.sigma:.2f} | {m.identity:.2f} | {m.model:.2f} | "
            f"{m.gain:+.2f} | {weight:.2f} |"
        )
    lines += ["", f"blend (QP_NONE:QP_FULL,SIGMA_NONE:SIGMA_FULL): {blend.describe()}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.calibrate_blend", description=__doc__)
    parser.add_argument("--model", type=Path, required=True, help="an ONNX model")
    parser.add_argument(
        "--clips", default=",".join(CLIPS), help="sample clips (training ones), comma-separated"
    )
    parser.add_argument("--frames", type=int, default=24, help="frames of each clip")
    parser.add_argument("--size", default="480x270", help="the clips resized to WxH")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime threads (default: its own)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE_DB,
        help=f"harm (dB) on a stream without noise that the ramps leave in place ({TOLERANCE_DB:g})",
    )
    parser.add_argument("--write", action="store_true", help="store the blend in the model and its card")
    parser.add_argument("--json", type=Path, help="write every stream's figures here")
    parser.add_argument(
        "--measured", type=Path, help="take the figures --json wrote earlier instead of measuring again"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if not args.model.is_file():
        parser.error(f"--model {str(args.model)!r} is not a file")
    if args.frames < 2:
        parser.error(f"--frames {args.frames}: give at least 2")
    if args.tolerance < 0:
        parser.error(f"--tolerance {args.tolerance:g}: give a harm in dB, 0 or more")
    names = [c.strip() for c in args.clips.split(",") if c.strip()]
    if args.measured is not None:
        measured = _load(args.measured)
    else:
        measured = _measured(
            args.model, names, args.frames, parse_size(args.size), args.threads, args.no_progress
        )
    blend = blend_of(measured, args.tolerance)
    print(_markdown(measured, blend))
    if args.json:
        args.json.write_text(json.dumps([asdict(m) | {"gain": m.gain} for m in measured], indent=1))
    if args.write:
        how = (
            f"python -m export.calibrate_blend on {', '.join(names)} ({args.frames} frames at {args.size}), "
            f"streams {', '.join(d.key for d in DAMAGES)}, tolerance {args.tolerance:g} dB"
        )
        write_blend(args.model, blend, how)
        print(f"wrote {Key.BLEND} {blend.describe()} into {args.model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
