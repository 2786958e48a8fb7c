"""The tensors a model takes and gives on the host, made from frames and read back into them.

A batch of windows is padded to the model's multiple, laid out, ordered and scaled as its contract says
(``streamer.contract.layout``); its output is cut back to the frames' size and made uint8 RGB again. A
model that takes a strength gets one per window; a recurrent model's state has one shape per frame size.
The checks here name what a caller handed a backend and what it should have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.backend.base import STRENGTH, ModelInfo, State, Strengths
from streamer.contract.layout import from_model_channels, to_model_layout
from streamer.errors import BackendError, FrameError

__all__ = [
    "check_batch",
    "check_frames",
    "check_state",
    "check_states",
    "model_input",
    "model_output",
    "pad",
    "pad_frames",
    "state_shapes",
    "strength_feed",
    "zero_state",
]


def pad(batch: npt.NDArray[np.uint8], widths: tuple[tuple[int, int], ...]) -> npt.NDArray[np.uint8]:
    """Pads at the bottom and right; reflect keeps edges natural, edge covers tiny frames."""
    if all(after < size for (_, after), size in zip(widths, batch.shape, strict=True)):
        return np.pad(batch, widths, mode="reflect")
    return np.pad(batch, widths, mode="edge")


def pad_frames(frames: npt.NDArray[np.uint8], multiple: int) -> npt.NDArray[np.uint8]:
    """(N, H, W, C) frames padded to a ``multiple`` of H and W; as they are where they fit."""
    h, w = frames.shape[1:3]
    ph, pw = -h % multiple, -w % multiple
    if not ph and not pw:
        return frames
    return pad(frames, ((0, 0), (0, ph), (0, pw), (0, 0)))


def model_input(
    batch: npt.NDArray[np.uint8], info: ModelInfo
) -> npt.NDArray[np.uint8] | npt.NDArray[np.float32]:
    """The input of the model ``info`` describes for a (B, T, C, H, W) uint8 batch: padded to the
    model's multiple, in its layout, colour order and value range."""
    m = info.pad_multiple
    h, w = batch.shape[3:]
    ph, pw = -h % m, -w % m
    if ph or pw:
        batch = pad(batch, ((0, 0), (0, 0), (0, 0), (0, ph), (0, pw)))
    view = to_model_layout(batch, info.layout, info.channel_order)
    if info.uint8_input:
        return np.ascontiguousarray(view)
    lo, hi = info.value_range
    # One copy: the dtype conversion also makes the layout view contiguous; the scaling in place.
    scaled = view.astype(np.float32, order="C")
    scaled *= np.float32((hi - lo) / 255.0)
    if lo:
        scaled += np.float32(lo)
    return scaled


def model_output(
    y: object, info: ModelInfo, batch: tuple[int, ...], given: tuple[int, ...]
) -> npt.NDArray[np.uint8]:
    """The (B, 3, H*scale, W*scale) uint8 RGB frames in the output ``y`` of the model ``info``
    describes, run on the input of shape ``given`` made of a (B, T, C, H, W) ``batch``: checked against
    the contract, cut back from the padding, in RGB and 0..255."""
    b, _, _, h, w = batch
    m, s = info.pad_multiple, info.scale
    expected = (b, 3, (h + -h % m) * s, (w + -w % m) * s)
    if not isinstance(y, np.ndarray) or y.shape != expected:
        seen = y.shape if isinstance(y, np.ndarray) else type(y).__name__
        raise BackendError(
            f"model {info.name} returned {seen} for an input of {given}; the runtime expects "
            f"(B, 3, H*scale, W*scale) = {expected} (scale {s}), the target frame at the input's size "
            "times streamer.scale (model.scale)"
        )
    out = from_model_channels(y[:, :, : h * s, : w * s], info.channel_order)
    if info.uint8_output:
        return np.ascontiguousarray(out)
    lo, hi = info.value_range
    if lo:
        out -= np.float32(lo)
    out *= np.float32(255.0 / (hi - lo))
    np.clip(out, 0.0, 255.0, out=out)
    np.rint(out, out=out)
    return out.astype(np.uint8)


def strength_feed(info: ModelInfo, rows: int, strength: Strengths) -> dict[str, npt.NDArray[np.float32]]:
    """The ``strength`` feed of a model that takes one, (B, 1) float32; nothing for others."""
    if not info.strength:
        return {}
    default = info.strength_default
    values = [default] * rows if strength is None else [default if v is None else v for v in strength]
    if len(values) != rows:
        raise FrameError(f"model {info.name}: {len(values)} strengths for a batch of {rows}")
    return {STRENGTH: np.asarray(values, dtype=np.float32).reshape(rows, 1)}


def state_shapes(info: ModelInfo, batch: int, height: int, width: int) -> list[tuple[int, ...]]:
    """The shape of each of a recurrent model's state tensors for ``batch`` streams of frames
    ``height`` x ``width`` (padded to the model's multiple); none for other models."""
    m = info.pad_multiple
    hp, wp = height + -height % m, width + -width % m
    return [(batch, s.channels, math.ceil(hp / s.scale), math.ceil(wp / s.scale)) for s in info.state]


def zero_state(info: ModelInfo, batch: int, height: int, width: int) -> State:
    """A recurrent model's state at the start of a run, on the host: zeros."""
    return tuple(np.zeros(shape, np.float32) for shape in state_shapes(info, batch, height, width))


def check_state(info: ModelInfo, state: State, b: int, h: int, w: int) -> None:
    """``state`` is a recurrent model's state for ``b`` streams of frames ``h`` x ``w``."""
    shapes = state_shapes(info, b, h, w)
    if len(state) != len(shapes):
        raise FrameError(
            f"model {info.name} carries {len(shapes)} state tensors, got {len(state)}; "
            "start from initial_state()"
        )
    for spec, given, shape in zip(info.state, state, shapes, strict=True):
        seen = _tensor_of(given)
        if seen != (shape, "float32"):
            raise FrameError(
                f"state {spec.input!r} of model {info.name} is {seen[0]} {seen[1]}; frames "
                f"of {h}x{w} need {shape} float32: start from initial_state({b}, {h}, {w})"
            )


def check_states(info: ModelInfo, states: Sequence[State], given: str, rows: int, h: int, w: int) -> None:
    """One state per stream of ``given``, each a batch of one's for frames ``h`` x ``w``."""
    if len(states) != rows:
        raise FrameError(f"model {info.name}: {len(states)} states for {given}, one per stream")
    for state in states:
        check_state(info, state, 1, h, w)


def check_batch(info: ModelInfo, batch: npt.NDArray[np.uint8]) -> None:
    """``batch`` is what the model ``info`` describes takes: (B, T, 3, H, W) uint8 windows."""
    t = info.t
    shape = getattr(batch, "shape", None)
    dtype = getattr(batch, "dtype", None)
    ok = (
        isinstance(batch, np.ndarray)
        and batch.dtype == np.uint8
        and batch.ndim == 5
        and batch.shape[0] >= 1
        and batch.shape[1] == t
        and batch.shape[2] == 3
        and batch.shape[3] >= 1
        and batch.shape[4] >= 1
    )
    if not ok:
        raise FrameError(
            f"model {info.name} takes a batch of shape (B>=1, T={t}, C=3, H, W) uint8; "
            f"got shape {shape} dtype {dtype}. Stack Hyperframe.pixels() of {t}-frame windows"
        )


def check_frames(frames: npt.NDArray[np.uint8], name: str, what: str) -> None:
    """``frames`` are what ``what`` of model ``name`` takes: (N, H, W, 3) uint8 RGB."""
    ok = isinstance(frames, np.ndarray) and frames.dtype == np.uint8 and frames.ndim == 4
    if not ok or frames.shape[0] < 1 or frames.shape[3] != 3 or 0 in frames.shape:
        raise FrameError(
            f"{what} of model {name} takes frames shaped (N>=1, H, W, 3) uint8 RGB; got shape "
            f"{getattr(frames, 'shape', None)} dtype {getattr(frames, 'dtype', None)}"
        )


def _tensor_of(value: npt.NDArray[Any] | ort.OrtValue) -> tuple[tuple[int, ...], str]:
    """The shape and element type of a host array or a device value."""
    if isinstance(value, np.ndarray):
        return value.shape, str(value.dtype)
    kind = value.data_type()
    return tuple(value.shape()), "float32" if kind == "tensor(float)" else kind
