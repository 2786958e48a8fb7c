"""The onnxruntime backend: loads an exported model, checks it keeps the runtime's contract, runs batches.

The contract a model file keeps (``export.onnx_export`` writes models that do):

- one float32 input of rank 5, (B, T, C, H, W) or (B, C, T, H, W) as ``streamer.layout`` says, C = 3;
- one float32 output (B, 3, H, W): the target slot's frame at the input's (padded) size;
- metadata_props ``streamer.name``, ``streamer.t``, ``streamer.layout`` (NTCHW | NCTHW),
  ``streamer.output_position`` (center | last), ``streamer.value_range`` ("lo,hi"),
  ``streamer.pad_multiple``. Without ``streamer.t`` the input's static T axis stands in;
- recurrent models add one float32 input and one output per hidden tensor, declared in
  ``streamer.state`` as a JSON list of {"input", "output", "channels", "scale"}.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.backend.base import Backend, Layout, ModelInfo, State, StateSpec
from streamer.core.windower import OutputPosition
from streamer.errors import BackendError, ConfigError, FrameError, ModelError
from streamer.layout import to_model_layout

__all__ = ["PROVIDER_PREFERENCE", "OnnxBackend", "resolve_providers"]

logger = logging.getLogger(__name__)

_E = TypeVar("_E", Layout, OutputPosition)

PROVIDER_PREFERENCE = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
"""What ``providers="auto"`` tries, fastest first; CPU always ends the list as the fallback."""

_CPU = "CPUExecutionProvider"
_EXPORT_HINT = "export.onnx_export.export_onnx writes it"


def resolve_providers(providers: str | Sequence[str]) -> list[str]:
    """The execution providers to ask onnxruntime for, in order, all of them available in this build."""
    available = ort.get_available_providers()
    if isinstance(providers, str):
        if providers != "auto":
            raise ConfigError(
                f"backend providers must be 'auto' or a list of provider names, got {providers!r}; "
                f"available here: {available}"
            )
        return [p for p in PROVIDER_PREFERENCE if p in available and p != _CPU] + [_CPU]
    wanted = list(providers)
    if not wanted:
        raise ConfigError(f"backend providers is an empty list; use 'auto' or name some of {available}")
    missing = [p for p in wanted if p not in available]
    if missing:
        raise ConfigError(
            f"execution providers {missing} are not available in this onnxruntime build; available: "
            f"{available}. Install onnxruntime-gpu for CUDA/TensorRT, or use providers: auto"
        )
    return wanted


class OnnxBackend(Backend):
    """Runs one ONNX model with onnxruntime; one instance may serve several streams.

    Thread-safe: ``infer`` keeps no state between calls and onnxruntime's ``InferenceSession.run`` may
    be called from several threads at once, so a pool of workers can share one backend (and one copy
    of the weights on the device).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        providers: str | Sequence[str] = "auto",
        threads: int | None = None,
        spin: bool = False,
    ) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelError(
                f"model file {str(self.path)!r} does not exist or is not a file; pass the path of an "
                f".onnx file (streamer.assets.DEFAULT_MODEL is the shipped default)"
            )
        if threads is not None and threads < 1:
            raise ConfigError(
                f"backend threads must be at least 1, or null to let onnxruntime decide; got {threads}"
            )
        requested = resolve_providers(providers)
        options = ort.SessionOptions()
        # Spinning intra-op threads wait faster between ops but burn the cores that decode and encode
        # threads need: on for a process that only infers, off (the default) inside a pipeline.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        if threads is not None:
            options.intra_op_num_threads = threads
        try:
            session = ort.InferenceSession(str(self.path), sess_options=options, providers=requested)
        except Exception as err:
            raise ModelError(f"onnxruntime cannot load model {str(self.path)!r}: {err}") from err
        self._session: ort.InferenceSession | None = session
        self._info, self._input, self._output = _read_contract(session, self.path)
        logger.info(
            "model %s runs on %s (asked for %s)", self._info.name, self._info.provider, ", ".join(requested)
        )
        lo, hi = self._info.value_range
        self._lo = np.float32(lo)
        self._to_model = np.float32((hi - lo) / 255.0)
        self._to_pixels = np.float32(255.0 / (hi - lo))

    @property
    def info(self) -> ModelInfo:
        return self._info

    def infer(self, batch: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """Stateless models as they are; a recurrent one starts from zeros (a one-window stream)."""
        self._check_batch(batch)
        b, _, _, h, w = batch.shape
        return self._run(batch, self.initial_state(b, h, w))[0]

    def initial_state(self, batch: int, height: int, width: int) -> State:
        m = self._info.pad_multiple
        hp, wp = height + -height % m, width + -width % m
        return tuple(
            np.zeros((batch, s.channels, math.ceil(hp / s.scale), math.ceil(wp / s.scale)), np.float32)
            for s in self._info.state
        )

    def step(self, batch: npt.NDArray[np.uint8], state: State) -> tuple[npt.NDArray[np.uint8], State]:
        self._check_batch(batch)
        b, _, _, h, w = batch.shape
        expected = self.initial_state(b, h, w)
        for spec, given, zero in zip(self._info.state, state, expected, strict=False):
            if given.shape != zero.shape or given.dtype != np.float32:
                raise FrameError(
                    f"state {spec.input!r} of model {self._info.name} is {given.shape} {given.dtype}; frames "
                    f"of {h}x{w} need {zero.shape} float32: start from initial_state({b}, {h}, {w})"
                )
        if len(state) != len(expected):
            raise FrameError(
                f"model {self._info.name} carries {len(expected)} state tensors, got {len(state)}; "
                "start from initial_state()"
            )
        return self._run(batch, state)

    def _run(self, batch: npt.NDArray[np.uint8], state: State) -> tuple[npt.NDArray[np.uint8], State]:
        session = self._session
        if session is None:
            raise BackendError(f"backend for {str(self.path)!r} is closed; create a new OnnxBackend")
        b, _, _, h, w = batch.shape
        m = self._info.pad_multiple
        ph, pw = -h % m, -w % m
        if ph or pw:
            batch = _pad(batch, ph, pw)
        # One copy: the dtype conversion also makes the layout view contiguous; the scaling is in place.
        x = to_model_layout(batch, self._info.layout).astype(np.float32, order="C")
        x *= self._to_model
        if self._lo:
            x += self._lo
        feeds = {self._input: x, **{s.input: v for s, v in zip(self._info.state, state, strict=True)}}
        names = [self._output, *(s.output for s in self._info.state)]
        try:
            y, *next_state = session.run(names, feeds)
        except Exception as err:
            raise BackendError(
                f"onnxruntime failed running {self._info.name} on a batch of shape {x.shape}: {err}"
            ) from err
        expected = (b, 3, h + ph, w + pw)
        if not isinstance(y, np.ndarray) or y.shape != expected:
            seen = y.shape if isinstance(y, np.ndarray) else type(y).__name__
            raise BackendError(
                f"model {self._info.name} returned {seen} for an input of {x.shape}; the runtime expects "
                f"(B, 3, H, W) = {expected}, the target frame at the input's size (no rescaling yet)"
            )
        out = y[:, :, :h, :w]
        if self._lo:
            out -= self._lo
        out *= self._to_pixels
        np.clip(out, 0.0, 255.0, out=out)
        np.rint(out, out=out)
        return out.astype(np.uint8), tuple(next_state)

    def close(self) -> None:
        self._session = None

    def _check_batch(self, batch: npt.NDArray[np.uint8]) -> None:
        t = self._info.t
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
                f"model {self._info.name} takes a batch of shape (B>=1, T={t}, C=3, H, W) uint8; "
                f"got shape {shape} dtype {dtype}. Stack Hyperframe.pixels() of {t}-frame windows"
            )


def _pad(batch: npt.NDArray[np.uint8], ph: int, pw: int) -> npt.NDArray[np.uint8]:
    """Pads H and W at the bottom and right; reflect keeps edges natural, edge covers tiny frames."""
    h, w = batch.shape[3], batch.shape[4]
    widths = ((0, 0), (0, 0), (0, 0), (0, ph), (0, pw))
    if ph < h and pw < w:
        return np.pad(batch, widths, mode="reflect")
    return np.pad(batch, widths, mode="edge")


def _read_contract(session: ort.InferenceSession, path: Path) -> tuple[ModelInfo, str, str]:
    """The model's ModelInfo and its input and output names, or a ModelError saying what breaks."""
    meta: Mapping[str, str] = session.get_modelmeta().custom_metadata_map
    where = f"model {str(path)!r}"
    layout = _enum(meta, "streamer.layout", Layout, Layout.NTCHW, where)
    position = _enum(meta, "streamer.output_position", OutputPosition, OutputPosition.CENTER, where)
    t_axis, c_axis = (1, 2) if layout is Layout.NTCHW else (2, 1)

    inputs = session.get_inputs()
    images = [i for i in inputs if len(i.shape) == 5]
    if len(images) != 1:
        raise ModelError(
            f"{where} has {len(images)} rank-5 inputs ({[i.name for i in images]}); the runtime needs "
            f"exactly one image input shaped {layout.value}"
        )
    image = images[0]
    state = _state(meta, where)
    extra = [i.name for i in inputs if i is not image and i.name not in {s.input for s in state}]
    if extra:
        raise ModelError(
            f"{where} has inputs {extra} besides the frames input {image.name!r} that metadata "
            f"streamer.state does not declare; a recurrent model lists its state there ({_EXPORT_HINT})"
        )
    if image.type != "tensor(float)":
        raise ModelError(f"{where} input {image.name!r} is {image.type}; export it with a float32 input")
    shape = image.shape
    if shape[c_axis] != 3:
        other = Layout.NCTHW if layout is Layout.NTCHW else Layout.NTCHW
        raise ModelError(
            f"{where} input {image.name!r} has shape {shape}, so axis {c_axis} is not C=3 as layout "
            f"{layout.value} needs; if the model takes {other.value}, set metadata "
            f"streamer.layout={other.value}"
        )
    static_t = shape[t_axis] if isinstance(shape[t_axis], int) else None
    t = _int(meta, "streamer.t", where) if "streamer.t" in meta else static_t
    if t is None:
        raise ModelError(
            f"{where} has a dynamic T axis and no metadata streamer.t; add metadata_props key streamer.t "
            f"(the window length); {_EXPORT_HINT}"
        )
    if static_t is not None and static_t != t:
        raise ModelError(f"{where} has metadata streamer.t={t} but its input {image.name!r} has T={static_t}")

    missing = {s.input for s in state} - {i.name for i in inputs}
    missing |= {s.output for s in state} - {o.name for o in session.get_outputs()}
    if missing:
        raise ModelError(f"{where} declares state {sorted(missing)} in streamer.state but has no such tensor")
    outputs = [o for o in session.get_outputs() if o.name not in {s.output for s in state}]
    if len(outputs) != 1 or len(outputs[0].shape) != 4:
        seen = [(o.name, o.shape) for o in outputs]
        raise ModelError(
            f"{where} has outputs {seen} besides its state; the runtime needs exactly one, "
            "shaped (B, 3, H, W)"
        )
    out = outputs[0]
    channels = out.shape[1]
    if out.type != "tensor(float)" or (isinstance(channels, int) and channels != 3):
        raise ModelError(
            f"{where} output {out.name!r} is {out.type} {out.shape}; it must be float32 (B, 3, H, W)"
        )

    info = ModelInfo(
        name=meta.get("streamer.name", path.stem),
        t=t,
        layout=layout,
        output_position=position,
        value_range=_range(meta, where),
        pad_multiple=_int(meta, "streamer.pad_multiple", where) if "streamer.pad_multiple" in meta else 1,
        provider=session.get_providers()[0],
        state=state,
    )
    return info, image.name, out.name


def _state(meta: Mapping[str, str], where: str) -> tuple[StateSpec, ...]:
    raw = meta.get("streamer.state")
    if raw is None:
        return ()
    try:
        specs = tuple(
            StateSpec(str(d["input"]), str(d["output"]), int(d["channels"]), int(d["scale"]))
            for d in json.loads(raw)
        )
    except (ValueError, TypeError, KeyError) as err:
        raise ModelError(
            f"{where} has metadata streamer.state={raw!r} ({err}); it must be a JSON list of "
            '{"input": name, "output": name, "channels": int, "scale": int}'
        ) from None
    if any(s.channels < 1 or s.scale < 1 for s in specs):
        raise ModelError(f"{where} has metadata streamer.state={raw!r}; channels and scale must be >= 1")
    return specs


def _int(meta: Mapping[str, str], key: str, where: str) -> int:
    raw = meta[key]
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ModelError(f"{where} has metadata {key}={raw!r}; it must be a positive integer")
    return value


def _range(meta: Mapping[str, str], where: str) -> tuple[float, float]:
    raw = meta.get("streamer.value_range", "0,1")
    try:
        lo, hi = (float(v) for v in raw.split(","))
    except ValueError:
        lo = hi = 0.0
    if not hi > lo:
        raise ModelError(
            f"{where} has metadata streamer.value_range={raw!r}; it must be 'lo,hi' with lo < hi, e.g. '0,1'"
        )
    return lo, hi


def _enum(meta: Mapping[str, str], key: str, kind: type[_E], default: _E, where: str) -> _E:
    raw = meta.get(key)
    if raw is None:
        return default
    try:
        return kind(raw)
    except ValueError:
        allowed = " | ".join(str(m.value) for m in kind)
        raise ModelError(f"{where} has metadata {key}={raw!r}; expected {allowed}") from None
