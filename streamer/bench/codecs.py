"""``streamer bench codecs``: what decoding and encoding a stream costs the host, on each engine that
works here, and so how many live streams the host's cores carry around the model.

A GPU that runs the model for 64 1080p30 streams still needs each stream decoded and encoded, and the
issue's stream count includes both. Each row times one engine on one stream's frames, one thread, as the
runtime runs it: decode is the RTSP source's work (H.264 packets to rgb24 frames, ``to_rgb``), encode
the RTSP sink's (rgb24 to the encoder's format, ``from_rgb``, then the live output's settings, through
:func:`streamer.media.hwcodec.encoder_options`). The row ``libx264 from 4:2:0`` encodes what a model on the
device hands the encoder with ``model.yuv420``: 4:2:0 planes, copied into the encoder's frame
(``yuv_frame``) instead of converted from rgb24; the row ``cpu to 4:2:0`` decodes as a source does for
such a model, each frame's planes taken as they lie (``yuv_of``). The clip is made here: a moving
picture with a sensor's noise, through libx264 as a camera sends it (no B-frames, a keyframe a second).

Engines: ``cpu`` (libavcodec's H.264 decoder) and ``nvdec`` (FFmpeg's CUDA hwaccel, frames back in host
memory); ``libx264`` and ``h264_nvenc``. An engine that does not work here is listed with FFmpeg's
reason, not timed. Host CPU time is this process's, all threads: what the engine leaves for the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import itertools
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction

import av
import numpy as np
import numpy.typing as npt
from av.codec.hwaccel import HWAccel
from av.container import InputContainer
from av.video.codeccontext import VideoCodecContext

from streamer.bench.gpu import gpu_name
from streamer.bench.harness import emit, parse_sizes
from streamer.errors import ConfigError
from streamer.frame import Yuv420
from streamer.measure.machine import cpu_isa, cpu_name
from streamer.measure.synthetic import camera_clip
from streamer.media.colour import from_rgb, to_rgb, yuv_frame, yuv_of
from streamer.media.hwcodec import NVENC, X264, encoder_options, nvdec_unavailable, nvenc_unavailable

__all__ = ["CodecReport", "CodecSpeed", "run_codec_bench"]

Rounds = Callable[[], tuple[int, float]]
"""One round of an engine's work: the frames it did and the CPU seconds of their rgb24 conversion."""

FROM_PLANES = f"{X264} from 4:2:0"
"""The encode row of libx264 fed 4:2:0 planes (``model.yuv420``) rather than rgb24."""
TO_PLANES = "cpu to 4:2:0"
"""The decode row that takes each frame's 4:2:0 planes as they lie (``yuv_of``) rather than rgb24, as
the sources do for a model that takes planes (``model.yuv420``)."""

LIVE_OUTPUT = {"preset": "ultrafast", "tune": "zerolatency", "bf": "0", "g": "30", "threads": "1"}
"""The RTSP sink's defaults (``sink.preset``, ``tune``, ``gop``), one encoder thread."""


@dataclass(frozen=True, slots=True)
class CodecSpeed:
    stage: str
    """``decode`` or ``encode``."""
    engine: str
    """``cpu`` or ``nvdec``; ``libx264`` or ``h264_nvenc``."""
    size: str
    fps: float | None
    """Frames per second of one stream, one thread, at the median round; None where it did not run."""
    host_ms: float | None
    """Host CPU time per frame, all threads of this process, at the median round."""
    convert_ms: float | None
    """Of ``host_ms``, the rgb24 conversion (``to_rgb`` after decode, ``from_rgb`` before encode): what
    a device path that makes and takes the encoder's YUV itself would leave off the host. For the
    encode from 4:2:0 planes, their copy into the encoder's frame."""
    rounds: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StreamCount:
    size: str
    decode: str
    encode: str
    host_ms: float
    """Host CPU time per frame of one stream, decoded and encoded."""
    per_core: float
    """Live streams at the rate asked for that one core decodes and encodes."""
    here: int
    """The same on this machine's cores, rounded down (the model's host work not included)."""


@dataclass(frozen=True, slots=True)
class CodecReport:
    cpu: str
    isa: tuple[str, ...]
    cores: int
    gpu: str
    fps: int
    """The live streams' frame rate the counts are for."""
    nvdec: str
    nvenc: str
    speeds: list[CodecSpeed]
    streams: list[StreamCount]
    wall_s: float


def _timed(once: Rounds, seconds: float) -> tuple[float, float, float, int]:
    """Frames per second, host CPU ms per frame and its conversion's share, each at its median round,
    and the rounds; after one round untimed (the engine's warm-up)."""
    once()
    rates: list[float] = []
    costs: list[float] = []
    converts: list[float] = []
    start = time.perf_counter()
    while len(rates) < 3 or time.perf_counter() - start < seconds:
        cpu0, t0 = time.process_time(), time.perf_counter()
        done, converting = once()
        rates.append(done / (time.perf_counter() - t0))
        costs.append(1000 * (time.process_time() - cpu0) / done)
        converts.append(1000 * converting / done)
    return statistics.median(rates), statistics.median(costs), statistics.median(converts), len(rates)


@contextlib.contextmanager
def _decoder(clip: bytes, accel: HWAccel | None, planes: bool = False) -> Iterator[Rounds]:
    """Rounds on one decoder kept open, so its set-up (a CUDA decoder's is long) is paid once: each round
    feeds it the clip's packets again (the clip starts at a keyframe) and converts each frame to rgb24
    (with ``planes``, takes its 4:2:0 planes as they lie instead, ``yuv_of``)."""
    with av.open(io.BytesIO(clip), "r", format="h264", hwaccel=accel) as given:
        assert isinstance(given, InputContainer)
        stream = given.streams.video[0]
        stream.thread_type, stream.thread_count = "SLICE", 1
        packets = [packet for packet in given.demux(stream) if packet.size]
        context = stream.codec_context

        def once() -> tuple[int, float]:
            done, converting = 0, 0.0
            for packet in packets:
                for frame in context.decode(packet):
                    cpu0 = time.process_time()
                    if planes:
                        yuv_of(frame)
                    else:
                        to_rgb(frame)
                    converting += time.process_time() - cpu0
                    done += 1
            return done, converting

        yield once


@contextlib.contextmanager
def _encoder(
    pixels: Sequence[npt.NDArray[np.uint8]], codec: str, fps: int, planes: bool = False
) -> Iterator[Rounds]:
    """Rounds on one encoder kept open with the live output's settings: each round encodes the clip's
    frames again, timestamps running on, from rgb24 as the RTSP sink does (with ``planes``, from the
    frames' 4:2:0 planes in the encoder's colour, made before the rounds, as a model on the device
    gives them)."""
    height, width = pixels[0].shape[:2]
    context = av.CodecContext.create(codec, "w")
    assert isinstance(context, VideoCodecContext)
    context.width, context.height, context.pix_fmt = width, height, "yuv420p"
    context.time_base = Fraction(1, fps)
    context.bit_rate = 2_000_000 * width * height // (1280 * 720)
    context.options = encoder_options(codec, LIVE_OUTPUT)
    context.open()
    pts = itertools.count()
    yuv = [_planes(frame, context) for frame in pixels] if planes else []

    def once() -> tuple[int, float]:
        converting = 0.0
        for k, frame in enumerate(pixels):
            cpu0 = time.process_time()
            made = yuv_frame(yuv[k]) if planes else from_rgb(frame, context)
            converting += time.process_time() - cpu0
            made.pts = next(pts)
            context.encode(made)
        return len(pixels), converting

    yield once


def _planes(pixels: npt.NDArray[np.uint8], context: VideoCodecContext) -> Yuv420:
    """A frame's 4:2:0 planes in the encoder's colour, as ``model.yuv420`` makes them."""
    planes = yuv_of(from_rgb(pixels, context))  # the converted frame is tagged with that colour
    if planes is None:
        raise ConfigError(f"4:2:0 planes need an even frame size; got {pixels.shape[1]}x{pixels.shape[0]}")
    return planes


def _row(
    stage: str,
    engine: str,
    size: str,
    why: str | None,
    engine_rounds: Callable[[], contextlib.AbstractContextManager[Rounds]],
    seconds: float,
) -> CodecSpeed:
    if why is not None:
        return CodecSpeed(stage, engine, size, None, None, None, 0, why)
    try:
        with engine_rounds() as once:
            fps, host_ms, convert_ms, rounds = _timed(once, seconds)
    except (av.error.FFmpegError, ValueError, OSError) as err:
        why = str(err).strip().splitlines()[0][:300]
        return CodecSpeed(stage, engine, size, None, None, None, 0, why)
    return CodecSpeed(stage, engine, size, fps, host_ms, convert_ms, rounds)


def _counts(speeds: Sequence[CodecSpeed], fps: int, cores: int) -> list[StreamCount]:
    counts = []
    done = [s for s in speeds if s.host_ms is not None]
    for size in dict.fromkeys(s.size for s in done):
        for dec in (s for s in done if s.size == size and s.stage == "decode"):
            for enc in (s for s in done if s.size == size and s.stage == "encode"):
                assert dec.host_ms is not None
                assert enc.host_ms is not None
                host_ms = dec.host_ms + enc.host_ms
                per_core = 1000.0 / (fps * host_ms)
                counts.append(
                    StreamCount(size, dec.engine, enc.engine, host_ms, per_core, math.floor(per_core * cores))
                )
    return counts


def run_codec_bench(
    sizes: Sequence[tuple[int, int]],
    frames: int,
    fps: int,
    seconds: float,
    progress: Callable[[str], None] = lambda _: None,
) -> CodecReport:
    begun = time.perf_counter()
    nvdec, nvenc = nvdec_unavailable(), nvenc_unavailable()
    speeds: list[CodecSpeed] = []
    for width, height in sizes:
        size = f"{width}x{height}"
        progress(f"{size}: making a {frames}-frame camera clip")
        clip, pixels = camera_clip(width, height, frames, fps)
        accel = HWAccel("cuda", allow_software_fallback=False)
        nvdec_why, nvenc_why = nvdec and "unavailable (NVDEC above)", nvenc and "unavailable (NVENC above)"
        rows: list[tuple[str, str, str | None, Callable[[], contextlib.AbstractContextManager[Rounds]]]] = [
            ("decode", "cpu", None, functools.partial(_decoder, clip, None)),
            ("decode", "nvdec", nvdec_why, functools.partial(_decoder, clip, accel)),
            ("decode", TO_PLANES, None, functools.partial(_decoder, clip, None, True)),
            ("encode", X264, None, functools.partial(_encoder, pixels, X264, fps)),
            ("encode", FROM_PLANES, None, functools.partial(_encoder, pixels, X264, fps, True)),
            ("encode", NVENC, nvenc_why, functools.partial(_encoder, pixels, NVENC, fps)),
        ]
        for stage, engine, why, engine_rounds in rows:
            speeds.append(_row(stage, engine, size, why, engine_rounds, seconds))
            row = speeds[-1]
            done = (
                f"{row.fps:.1f} fps, {row.host_ms:.2f} host ms/frame" if row.fps else f"not run: {row.error}"
            )
            progress(f"{size} {stage} {engine}: {done}")
    cores = os.cpu_count() or 1
    return CodecReport(
        cpu=cpu_name(),
        isa=cpu_isa(),
        cores=cores,
        gpu=gpu_name(),
        fps=fps,
        nvdec=nvdec or "works",
        nvenc=nvenc or "works",
        speeds=speeds,
        streams=_counts(speeds, fps, cores),
        wall_s=time.perf_counter() - begun,
    )


def _cell(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def format_report(report: CodecReport) -> tuple[str, str]:
    head = [
        f"host: {report.cpu} ({', '.join(report.isa) or 'no AVX flags'}), {report.cores} cores",
        f"GPU: {report.gpu}",
        f"NVDEC: {report.nvdec}",
        f"NVENC: {report.nvenc}",
        "",
    ]
    columns = [
        "stage",
        "engine",
        "size",
        "fps (one stream, one thread)",
        "host CPU ms/frame",
        "of which rgb24 conversion",
        "rounds",
        "not run",
    ]
    rows = [
        [
            s.stage,
            s.engine,
            s.size,
            _cell(s.fps),
            _cell(s.host_ms, 2),
            _cell(s.convert_ms, 2),
            str(s.rounds),
            s.error or "",
        ]
        for s in report.speeds
    ]
    counts_columns = [
        "size",
        "decode",
        "encode",
        "host ms/frame",
        f"{report.fps} fps streams per core",
        f"on {report.cores} cores",
    ]
    counts = [
        [c.size, c.decode, c.encode, _cell(c.host_ms, 2), _cell(c.per_core, 2), str(c.here)]
        for c in report.streams
    ]
    tail = [
        "",
        f"streams: live {report.fps} fps streams whose decode and encode the host's cores carry, the model's "
        "own host work not included",
        f"total {report.wall_s:.1f} s",
    ]
    table = "\n".join(
        [
            *head,
            " | ".join(columns),
            *(" | ".join(r) for r in rows),
            "",
            " | ".join(counts_columns),
            *(" | ".join(r) for r in counts),
            *tail,
        ]
    )
    markdown = "\n".join(
        [
            *head,
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
            *("| " + " | ".join(r) + " |" for r in rows),
            "",
            "| " + " | ".join(counts_columns) + " |",
            "|" + "---|" * len(counts_columns),
            *("| " + " | ".join(r) + " |" for r in counts),
            *tail,
        ]
    )
    return table, markdown


def run_from_args(args: argparse.Namespace) -> int:
    if not 2 <= args.frames <= 600:
        raise ConfigError(f"--frames {args.frames}: give a number of frames from 2 to 600")
    if not 1 <= args.fps <= 240:
        raise ConfigError(f"--fps {args.fps}: give a frame rate from 1 to 240")
    if not math.isfinite(args.seconds) or not 0 < args.seconds <= 600:
        raise ConfigError(f"--seconds {args.seconds}: give a number of seconds above 0, at most 600")
    report = run_codec_bench(
        parse_sizes(args.sizes, "--sizes"),
        args.frames,
        args.fps,
        args.seconds,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    table, markdown = format_report(report)
    return emit(table, markdown, asdict(report), args.json, args.markdown)
