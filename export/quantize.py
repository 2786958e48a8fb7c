"""INT8 for streaming models: static QDQ quantization calibrated on real noisy frames, quality measured.

``streamer export --int8`` writes ``<stem>.int8.onnx`` and ``<stem>.int8.encoder.onnx`` beside the fp32 pair.
Weights are per-channel QInt8; activations QUInt8 (QInt8 activations run slower than fp32 on AVX2 without
VNNI); ``reduce_range`` (7-bit weights) is on where the CPU lacks VNNI, whose u8 x s8 dot products would
otherwise saturate, and off where it has them. The encoder's first convolution (it reads the raw frame) and
the fusion's last (it writes the residual added to the output pixels) stay fp32: the two places where a
quantization step is a visible error.

Calibration (``--calibrate``) reads real footage, not the held-out benchmark clip: frames of a video
file or a ``sample:NAME`` clip, each degraded with Gaussian noise of a sigma cycling over 0..40, since
that is what the model sees live. The encoder is calibrated on those frames; the fusion graph on
windows of their fp32 feature maps. The quality of the INT8 pair against its fp32 source (PSNR at sigma
15 and 25 on the held-out ``bikes.mp4``, clean input against itself, flicker) and the fps of both, with
the CPU's model name and ISA flags, go into the model card: a quantized model is never shipped
unmeasured.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort

from streamer.contract import Key
from streamer.engine.tiers import model_fps
from streamer.errors import ConfigError, ModelError, SourceError
from streamer.measure.machine import cpu_isa, cpu_name
from streamer.media.samples import resolve_sample

__all__ = [
    "FLICKER_TOLERANCE",
    "INT8_MIN_PSNR_DB",
    "FlickerSequence",
    "Int8Pair",
    "calibration_frames",
    "flicker_sequences",
    "measure_int8",
    "quantize_streaming",
]

INT8_MIN_PSNR_DB = 50.0
"""Default budget: the INT8 fusion's uint8 output against fp32's on the calibration windows. 0.3 dB
off a 40 dB denoiser is ~0.5 added MSE, i.e. ~51 dB between the two; 50 dB keeps losses near that."""

_SIGMAS = (0.0, 10.0, 25.0, 40.0)
"""Noise added to calibration frames, in turn: the range a live camera's noise spans."""

FLICKER_SIGMAS = (15.0, 25.0)
"""Noise of the sequences the flicker check runs on: the sigmas the INT8 bar is set at."""

FLICKER_TOLERANCE = 0.10
"""The INT8 graph's flicker index may exceed fp32's by this fraction of it, no more: quantization error
that changes from frame to frame is shimmer a still scene did not have, and a graph with a few
convolutions in INT8 can add much of it while its PSNR barely moves, so flicker is checked on its own."""


@dataclass(frozen=True, slots=True)
class Int8Pair:
    path: Path
    encoder_path: Path
    reduce_range: bool
    kept_fp32: tuple[str, ...]
    """Names of the convolutions left in fp32."""
    solo_db: dict[str, float]
    """Each fusion convolution's output PSNR against fp32 when it alone is INT8 (its sensitivity)."""
    psnr_db: float
    """The INT8 fusion graph's output PSNR against fp32 on the calibration windows."""
    min_psnr_db: float
    flicker: dict[float, tuple[float, float]]
    """By sigma, the flicker index of fp32's and the INT8 pair's outputs on the flicker sequences (none
    where no sequences were given)."""


def _decoded(source: str, limit: int = 300) -> list[npt.NDArray[np.uint8]]:
    """The first ``limit`` frames of ``source`` (a video file or ``sample:NAME``) as RGB."""
    path = Path(resolve_sample(source))
    if not path.is_file():
        raise ConfigError(f"--calibrate {source!r} is not a video file or sample:NAME clip")
    try:
        with av.open(str(path)) as container:
            decoded = [
                np.asarray(f.to_ndarray(format="rgb24"), dtype=np.uint8)
                for _, f in zip(range(limit), container.decode(video=0), strict=False)
            ]
    except (av.error.FFmpegError, OSError) as err:
        raise SourceError(f"--calibrate {source!r} cannot be decoded: {err}") from err
    if not decoded:
        raise SourceError(f"--calibrate {source!r} has no video frames")
    return decoded


def _noisy(frame: npt.NDArray[np.uint8], sigma: float, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
    noisy = frame.astype(np.float32) + rng.normal(0.0, sigma, frame.shape).astype(np.float32)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def calibration_frames(source: str, count: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    """``count`` frames (N, H, W, 3) of ``source`` (a video file or ``sample:NAME``), spread over its
    first 10 s, each with Gaussian noise of a sigma from ``_SIGMAS`` in turn."""
    if count < 1:
        raise ConfigError(f"--calibrate-frames must be at least 1, got {count}")
    decoded = _decoded(source)
    picks = np.linspace(0, len(decoded) - 1, count).round().astype(int)
    rng = np.random.default_rng(seed)
    return np.stack([_noisy(decoded[index], _SIGMAS[i % len(_SIGMAS)], rng) for i, index in enumerate(picks)])


@dataclass(frozen=True, slots=True)
class FlickerSequence:
    """Consecutive frames of the calibration source, clean and with noise of one sigma: what the
    flicker check of the INT8 choice runs on (the spread calibration frames have no motion to follow)."""

    sigma: float
    clean: npt.NDArray[np.uint8]
    noisy: npt.NDArray[np.uint8]


def flicker_sequences(source: str, length: int = 12, seed: int = 0) -> list[FlickerSequence]:
    """``length`` consecutive frames from the middle of ``source``'s first 10 s, at each of the
    ``FLICKER_SIGMAS``."""
    decoded = _decoded(source)
    if len(decoded) < length:
        raise SourceError(
            f"--calibrate {source!r} has {len(decoded)} frames; the flicker check needs {length}"
        )
    start = (len(decoded) - length) // 2
    clean = np.stack(decoded[start : start + length])
    rng = np.random.default_rng(seed)
    return [
        FlickerSequence(sigma, clean, np.stack([_noisy(f, sigma, rng) for f in clean]))
        for sigma in FLICKER_SIGMAS
    ]


class _Feeds:
    """onnxruntime's CalibrationDataReader protocol over a list of feed dicts."""

    def __init__(self, feeds: list[dict[str, npt.NDArray[Any]]]) -> None:
        self._feeds: Iterator[dict[str, npt.NDArray[Any]]] = iter(feeds)

    def get_next(self) -> dict[str, npt.NDArray[Any]] | None:
        return next(self._feeds, None)


def _convs(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node if n.op_type == "Conv"]


def _quantize(
    src: Path,
    dst: Path,
    feeds: list[dict[str, npt.NDArray[Any]]],
    reduce: bool,
    exclude: list[str] | None = None,
    only: list[str] | None = None,
) -> None:
    """Static QDQ of ``src``: every node but ``exclude``, or (``only`` given) just those nodes."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # its calibrator prints to stdout
                quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
                quantize_static(
                    str(prepared),
                    str(dst),
                    _Feeds(feeds),
                    quant_format=QuantFormat.QDQ,
                    per_channel=True,
                    reduce_range=reduce,
                    activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    nodes_to_exclude=exclude or [],
                    nodes_to_quantize=only,
                    calibrate_method=CalibrationMethod.Percentile,
                    extra_options={"CalibPercentile": 99.99},
                )
        except Exception as err:
            ops = sorted({n.op_type for n in onnx.load(str(src)).graph.node})
            raise ModelError(
                f"onnxruntime cannot quantize {src.name}: {err}. Its ops are {ops}; an op without an INT8 "
                f"kernel can be left in fp32"
            ) from err


def quantize_streaming(
    model: Path,
    frames: npt.NDArray[np.uint8],
    windows: int = 16,
    min_psnr_db: float = INT8_MIN_PSNR_DB,
    progress: Callable[[str], None] | None = None,
    sequences: Sequence[FlickerSequence] = (),
) -> Int8Pair:
    """Writes the INT8 pair of the streaming model ``model`` (fusion graph path) calibrated on ``frames``,
    with every fusion convolution in INT8 that the ``min_psnr_db`` budget allows and, on each of
    ``sequences``, that keeps the flicker index within ``FLICKER_TOLERANCE`` of fp32's."""
    from streamer.backend.onnx import OnnxBackend

    if not 20.0 <= min_psnr_db <= 99.0:
        raise ConfigError(f"--int8-min-psnr must be 20..99 dB, got {min_psnr_db}")
    backend = OnnxBackend(model, providers=["CPUExecutionProvider"])
    info = backend.info
    if not info.streaming:
        raise ConfigError(
            f"--int8 quantizes streaming models (their uint8 graphs); {model.name} is a window model"
        )
    meta = {p.key: p.value for p in onnx.load(str(model)).metadata_props}
    encoder_src = model.with_name(meta[Key.ENCODER])
    out = model.with_name(f"{model.stem}.int8.onnx")
    encoder_out = model.with_name(f"{model.stem}.int8.encoder.onnx")
    t = info.t
    if len(frames) < t:
        raise ConfigError(f"calibrating a T={t} model needs at least {t} frames, got {len(frames)}")
    m = info.pad_multiple
    h, w = frames.shape[1] // m * m, frames.shape[2] // m * m
    frames = np.ascontiguousarray(frames[:, :h, :w])
    features = backend.encode(frames)
    backend.close()
    reduce = not {"avx512_vnni", "avx_vnni", "amx_int8"} & set(cpu_isa())
    say = progress or (lambda _: None)

    encoder_all = _convs(onnx.load(str(encoder_src)))
    keep_encoder, encoder_convs = encoder_all[:1], encoder_all[1:]
    if encoder_convs:
        frame_feeds = [{"frame": frames[i : i + 1]} for i in range(len(frames))]
        _quantize(encoder_src, encoder_out, frame_feeds, reduce, only=encoder_convs)
    else:  # an encoder that is its first convolution alone stays fp32
        shutil.copyfile(encoder_src, encoder_out)
    starts = np.linspace(0, len(frames) - t, min(windows, len(frames) - t + 1)).round().astype(int)
    maps = [[m[None] for m in frame_maps] for frame_maps in features]
    feeds = _window_feeds(frames, maps, starts, t, info.output_position.slot(t), info.features)
    check = None
    if sequences:
        slot = info.output_position.slot(t)
        check = _FlickerCheck.build(
            model, encoder_src, encoder_out, sequences, t, slot, (h, w), info.features
        )
    choice = _choose_fusion_convs(model, out, feeds, reduce, min_psnr_db, say, check)

    quantized = onnx.load(str(out))
    onnx.helper.set_model_props(
        quantized,
        {
            **meta,
            Key.NAME: f"{meta.get(Key.NAME, model.stem)}-int8",
            Key.ENCODER: encoder_out.name,
            Key.INT8: json.dumps(
                {"activations": "QUInt8", "weights": "QInt8 per-channel", "reduce_range": reduce}
            ),
        },
    )
    onnx.save(quantized, str(out))
    return Int8Pair(
        out,
        encoder_out,
        reduce,
        (*keep_encoder, *choice.kept),
        choice.solo_db,
        choice.psnr_db,
        min_psnr_db,
        choice.flicker,
    )


@dataclass(frozen=True, slots=True)
class _Choice:
    kept: tuple[str, ...]
    solo_db: dict[str, float]
    psnr_db: float
    flicker: dict[float, tuple[float, float]]


def _window_feeds(
    frames: npt.NDArray[np.uint8],
    maps: Sequence[Sequence[npt.NDArray[Any]]],
    starts: Iterable[int],
    t: int,
    slot: int,
    features: Sequence[Any],
) -> list[dict[str, npt.NDArray[Any]]]:
    """The fusion graph's feeds for the windows beginning at ``starts``: the target frame and, for each
    feature and slot, that frame's map (``maps[frame][feature]``, batch of one)."""
    return [
        {
            "target": frames[start + slot][None],
            **{
                f"{spec.name}_{k}": maps[start + k][index]
                for index, spec in enumerate(features)
                for k in range(t)
            },
        }
        for start in starts
    ]


def _encode(path: Path, frames: npt.NDArray[np.uint8]) -> list[list[npt.NDArray[Any]]]:
    """Each frame's feature maps from the encoder graph at ``path``."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [session.run(None, {"frame": frame[None]}) for frame in frames]


@dataclass(frozen=True, slots=True)
class _FlickerCheck:
    """The flicker index of a fusion graph's outputs over each sequence's sliding windows, against the
    fp32 pair's on the same windows: the INT8 encoder's maps feed the probes, fp32's the reference."""

    cases: tuple[tuple[float, list[dict[str, npt.NDArray[Any]]], npt.NDArray[np.uint8]], ...]
    reference: dict[float, float]

    @classmethod
    def build(
        cls,
        model: Path,
        encoder: Path,
        int8_encoder: Path,
        sequences: Sequence[FlickerSequence],
        t: int,
        slot: int,
        size: tuple[int, int],
        features: Sequence[Any],
    ) -> _FlickerCheck:
        from streamer.measure.metrics import flicker_index

        h, w = size
        cases = []
        reference: dict[float, float] = {}
        for sequence in sequences:
            noisy = np.ascontiguousarray(sequence.noisy[:, :h, :w])
            clean = np.ascontiguousarray(sequence.clean[:, :h, :w])
            if len(noisy) < t + 1:
                raise ConfigError(
                    f"a flicker sequence needs at least {t + 1} frames for T={t}, got {len(noisy)}"
                )
            starts = range(len(noisy) - t + 1)
            feeds = {
                name: _window_feeds(noisy, _encode(encoder_path, noisy), starts, t, slot, features)
                for name, encoder_path in (("fp32", encoder), ("int8", int8_encoder))
            }
            targets = clean[slot : slot + len(noisy) - t + 1]
            reference[sequence.sigma] = flicker_index(np.concatenate(_outputs(model, feeds["fp32"])), targets)
            cases.append((sequence.sigma, feeds["int8"], targets))
        return cls(tuple(cases), reference)

    def measure(self, fusion: Path) -> dict[float, float]:
        from streamer.measure.metrics import flicker_index

        return {
            sigma: flicker_index(np.concatenate(_outputs(fusion, feeds)), targets)
            for sigma, feeds, targets in self.cases
        }

    def holds(self, measured: dict[float, float]) -> bool:
        return all(
            measured[sigma] <= ref + FLICKER_TOLERANCE * abs(ref) for sigma, ref in self.reference.items()
        )

    def describe(self, measured: dict[float, float]) -> str:
        return ", ".join(
            f"flicker at sigma {sigma:g} {measured[sigma]:+.3f} (fp32 {ref:+.3f})"
            for sigma, ref in self.reference.items()
        )


def _choose_fusion_convs(
    model: Path,
    out: Path,
    feeds: list[dict[str, npt.NDArray[Any]]],
    reduce: bool,
    min_psnr_db: float,
    say: Callable[[str], None],
    check: _FlickerCheck | None = None,
) -> _Choice:
    """Mixed precision by measured sensitivity: each convolution is quantized alone and its output's PSNR
    against fp32 taken; the least sensitive go to INT8 first, and the graph keeps the longest such prefix (the
    last convolution, which writes the output pixels, never) whose whole-graph PSNR stays within the budget.
    Only convolutions are quantized: with the elementwise ops around them (the residual adds, the target
    frame's path) also in INT8, one block alone falls far under the budget. The probes run on the calibration
    windows themselves: this measures quantization error, not generalisation, which ``measure_int8`` checks on
    held-out footage. With a flicker ``check``, a prefix must also keep the flicker index on its sequences
    within ``FLICKER_TOLERANCE`` of fp32's."""
    reference = _outputs(model, feeds)
    convs = _convs(onnx.load(str(model)))
    candidates, last = convs[:-1], convs[-1:]
    solo: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.onnx"
        for i, conv in enumerate(candidates, 1):
            _quantize(model, probe, feeds, reduce, only=[conv])
            solo[conv] = _psnr(_outputs(probe, feeds), reference)
            say(f"INT8 probe {i}/{len(candidates)}: {conv} alone in INT8: {solo[conv]:.1f} dB against fp32")
        order = sorted(candidates, key=lambda c: -solo[c])
        # The longest prefix of ``order`` within budget: PSNR falls as convolutions join, so bisect.
        flicker = dict(check.reference) if check else {}
        lo, hi, best = 0, len(order), (0, 99.0, flicker)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            _quantize(model, probe, feeds, reduce, only=order[:mid])
            db = _psnr(_outputs(probe, feeds), reference)
            flicker = check.measure(probe) if check else {}
            steady = check.holds(flicker) if check else True
            said = f"; {check.describe(flicker)}" if check else ""
            say(
                f"INT8 probe: the {mid} least sensitive convolution(s) in INT8: {db:.1f} dB against "
                f"fp32{said}"
            )
            if db >= min_psnr_db and steady:
                lo, best = mid, (mid, db, flicker)
            else:
                hi = mid - 1
    count, db, flicker = best
    kept = tuple(order[count:] + last)
    if count:
        _quantize(model, out, feeds, reduce, only=order[:count])
    else:  # nothing fits the budget: the "INT8" graph is the fp32 one, and the card says so
        shutil.copyfile(model, out)
    say(f"INT8: {count} of {len(convs)} fusion convolutions in INT8, {db:.1f} dB against fp32")
    pairs = {
        sigma: (round(ref, 3), round(flicker[sigma], 3))
        for sigma, ref in (check.reference if check else {}).items()
    }
    return _Choice(kept, {k: round(v, 2) for k, v in solo.items()}, round(db, 2), pairs)


def _outputs(path: Path, feeds: list[dict[str, npt.NDArray[Any]]]) -> list[npt.NDArray[Any]]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [session.run(None, feed)[0] for feed in feeds]


def _psnr(got: list[npt.NDArray[Any]], reference: list[npt.NDArray[Any]]) -> float:
    """PSNR in dB of uint8 outputs against the fp32 model's, over all windows; 99 when identical."""
    se = sum(float(np.sum((a.astype(np.float64) - b) ** 2)) for a, b in zip(got, reference, strict=True))
    mse = se / sum(a.size for a in got)
    return 99.0 if mse == 0 else min(99.0, 10 * math.log10(255.0**2 / mse))


def measure_int8(fp32: Path, int8: Path, frames: int = 30) -> dict[str, Any]:
    """Quality of ``int8`` against ``fp32`` on held-out footage, and both models' fps, for the card."""
    from streamer.backend.onnx import OnnxBackend
    from streamer.measure.clips import add_noise, default_clip, load_clip
    from streamer.measure.enhanced import model_frames
    from streamer.measure.metrics import flicker_index, psnr

    clean, _ = load_clip(default_clip(), frames, None)
    result: dict[str, Any] = {"clip": f"bikes.mp4 (held out), first {len(clean)} frames"}
    backends = {
        name: OnnxBackend(p, providers=["CPUExecutionProvider"])
        for name, p in (("fp32", fp32), ("int8", int8))
    }
    try:
        for label, sigma in (("sigma15", 15.0), ("sigma25", 25.0), ("clean", 0.0)):
            noisy = add_noise(clean, sigma, seed=0) if sigma else clean
            row: dict[str, float] = {}
            for name, backend in backends.items():
                out = np.stack(list(model_frames(backend, noisy)))
                row[f"{name}_psnr"] = round(psnr(out, clean), 3)
                row[f"{name}_flicker"] = round(flicker_index(out, clean), 3)
            delta = row["int8_psnr"] - row["fp32_psnr"]
            row["delta_db"] = round(delta, 3) if np.isfinite(delta) else 0.0
            result[label] = row
        for w, h in ((640, 360), (1280, 720)):
            result[f"fps_{w}x{h}"] = {name: round(model_fps(b, w, h), 1) for name, b in backends.items()}
    finally:
        for backend in backends.values():
            backend.close()
    result["machine"] = {"processor": cpu_name(), "isa": list(cpu_isa()), "onnxruntime": ort.__version__}
    return result
