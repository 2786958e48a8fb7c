"""A window model run on frames that stay on the device: each frame uploaded once, windows made there.

Built for a GPU: the host path hands onnxruntime a whole T-frame window for every output frame (at 720p
and T=5, 13.8 MB of uint8 up per frame, 55 MB as float32), although each frame belongs to T windows.
Here each frame goes up once, as its own uint8 bytes (``upload``; ``upload_planes``: a decoder's
4:2:0 planes, half those bytes), and a small graph makes it (1, 3, H, W) uint8 RGB in device memory
(:func:`~streamer.backend.device_graphs.upload_graph`: a transpose, or the conversion from planes),
which the stream's :class:`~streamer.core.features.FeatureCache` keeps for the T windows it belongs
to, as a streaming model's feature maps are kept. So each frame is rearranged or converted once, not
once per window it is in (T times). One graph takes the window's T frames, arranges them as the model
wants, scales them, runs the model and hands back the uint8 frame (``run``), through IO binding, so
nothing but one frame comes down. The graphs are made in ``streamer.backend.device_graphs``; this
module opens and runs them and carries the frames to and from them.

Windows of several streams share one call (``run_batch``): the batch graph concatenates each slot's
frames along the batch axis first. A graph's inputs are fixed, so there is one session per batch size,
made when first needed (or by ``warm``), for powers of two only: a batch in between repeats its last
window up to the next (a GPU's call costs more than a window's pixels at these sizes, and each session
keeps its own memory arena, so fewer sizes keep less). Each window's output comes down straight into a
host buffer of its own, bound, so onnxruntime makes no copy of its own; host buffers and device frames
are kept and reused once nobody holds them, page-locked on a GPU (``streamer.backend.host_buffers``).

A recurrent model runs the same graph one step at a time (``step``), its state inputs bound to the
last step's state outputs, which onnxruntime leaves in device memory: one frame up and one down per
step, where the host path carries the whole state both ways. Steps of several streams share a call
(``step_batch``) as windows do: each stream's state goes in and comes out as its own row.

The same graph runs on the CPU provider, where device memory is host memory: CI tests this path
against the host path (``OnnxBackend(device_frames=True)``). Making the graphs needs the onnx package
(in the CUDA image; the CPU image, which has no use for this path, leaves it out), which only
``streamer.backend.device_graphs`` imports.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.backend.base import STRENGTH, ModelInfo, device_of
from streamer.backend.device_graphs import (
    HOST_RGB,
    UP_RGB,
    UP_UV,
    UP_Y,
    batch_size,
    frame_input,
    frame_output,
    graph_tools_missing,
    read_model,
    state_name,
    upload_graph,
    window_graph,
    yuv_outputs,
)
from streamer.backend.host_buffers import BufferPool, cuda_host_memory
from streamer.errors import BackendError, FrameError, ModelError
from streamer.frame import Colour

if TYPE_CHECKING:
    import onnx

__all__ = [
    "DeviceFrames",
    "Transfers",
    "batch_size",
    "frame_input",
    "frame_output",
    "graph_tools_missing",
    "state_name",
    "upload_graph",
    "window_graph",
    "yuv_outputs",
]

DEVICE_FRAMES_KEPT = 1024
"""Device frames of one size kept for reuse: a stream's cache holds T plus the frames of its windows in
flight, so this covers dozens of streams (6.2 MB each at 1080p); past it, frames are allocated anew.
Planes on their way to the upload graph are kept the same way, by their own shapes."""
OUTPUTS_KEPT = 256
"""Host buffers of one size kept for output frames: those in flight to the encoders of every stream."""
STAGING_KEPT = 16
"""Page-locked buffers of one size kept for frames on their way up: one per upload under way."""


def _uploaded_as(planes: Colour | None) -> str:
    """How a frame went up, for messages: as RGB, or as 4:2:0 planes in their colour."""
    return "RGB" if planes is None else f"4:2:0 planes in {planes}"


def _gather(host: npt.NDArray[np.uint8], parts: Sequence[npt.NDArray[np.uint8]]) -> None:
    """``parts`` (arrays of one shape, strided or not) copied one after another into ``host``."""
    for row, part in zip(host.reshape(len(parts), *parts[0].shape), parts, strict=True):
        np.copyto(row, part)


@dataclass(frozen=True, slots=True)
class Transfers:
    """Bytes between host and device since the backend started, and the frames they carried."""

    uploads: int
    uploaded_bytes: int
    downloads: int
    downloaded_bytes: int


class DeviceFrames:
    """The window graphs of one model, a session per batch size, and the frames' trips to and from
    them."""

    def __init__(
        self,
        path: Path,
        info: ModelInfo,
        options: ort.SessionOptions,
        providers: list[str],
        provider_options: Mapping[str, Mapping[str, str]],
        starved: Callable[[Exception, str], None] | None = None,
    ) -> None:
        """``starved``: called with a failed call's error and what it ran on, before the BackendError
        this raises, to raise its own where the device ran out of memory (the host path's rule)."""
        self._model = read_model(path)
        self._info = info
        self._starved = starved
        self._options = options
        self._providers = providers
        self._settings = [dict(provider_options.get(p, {})) for p in providers]
        self._sessions: dict[tuple[int, Colour | None], ort.InferenceSession] = {}
        self._uploaders: dict[Colour | None, ort.InferenceSession] = {}
        self._opening = threading.Lock()
        self._lock = threading.Lock()
        self._uploads = self._uploaded = self._downloads = self._downloaded = 0
        self.device = device_of(self._session(1).get_providers()[0])
        memory = cuda_host_memory() if self.device == "cuda" else None
        self._pin = None if memory is None else memory.pin
        self._host: dict[tuple[str, tuple[int, ...]], BufferPool] = {}
        self._frames: dict[tuple[int, ...], collections.deque[Any]] = {}
        """By shape, the device memory of frames nobody holds (onnxruntime's own values)."""
        self._made: dict[tuple[int, ...], int] = {}
        self._zeros: dict[tuple[int, ...], ort.OrtValue] = {}
        """By shape, a recurrent model's zero state on the device, shared by every run's first step."""
        self._pools = threading.Lock()
        self.reuse = True
        """Frames cross through kept (and, on a GPU, page-locked) buffers, and device frames are
        written into kept device memory; False: fresh arrays and allocations each time (``bench gpu``
        compares the two)."""

    def _session(self, batch: int, yuv: Colour | None = None) -> ort.InferenceSession:
        """The session of the graph for ``batch`` windows (giving 4:2:0 planes in ``yuv``'s matrix and
        range, where given), made on first use."""
        key = (batch, yuv)
        with self._opening:
            session = self._sessions.get(key)
            if session is None:
                model = type(self._model)()
                model.CopyFrom(self._model)
                graph = window_graph(model, self._info, batch, yuv)
                what = f"{self._info.name} with its window made on the device (batch {batch})"
                session = self._sessions[key] = self._open(graph, what)
            return session

    def _uploader(self, planes: Colour | None) -> ort.InferenceSession:
        """The session of :func:`upload_graph` for frames that go up as RGB (None) or as 4:2:0 planes
        in ``planes``' matrix and range, made on first use."""
        with self._opening:
            session = self._uploaders.get(planes)
            if session is None:
                kind = _uploaded_as(planes)
                what = f"the graph that makes frames uploaded as {kind} RGB on the device"
                session = self._uploaders[planes] = self._open(upload_graph(planes), what)
            return session

    def _open(self, graph: onnx.ModelProto, what: str) -> ort.InferenceSession:
        try:
            return ort.InferenceSession(
                graph.SerializeToString(),
                sess_options=self._options,
                providers=self._providers,
                provider_options=self._settings,
            )
        except Exception as err:
            raise ModelError(
                f"onnxruntime cannot load {what}: {err}; set model.device_frames: false to run on "
                "host-made windows"
            ) from err

    @property
    def graphs(self) -> frozenset[tuple[int, Colour | None]]:
        """The window graphs made so far, each as (batch, colour of the planes it makes; None: RGB):
        warm-up's work, which a live frame finding one missing would wait for."""
        with self._opening:
            return frozenset(self._sessions)

    @property
    def upload_graphs(self) -> frozenset[Colour | None]:
        """The upload graphs made so far, by the colour of the planes each takes (None: RGB)."""
        with self._opening:
            return frozenset(self._uploaders)

    def transfers(self) -> Transfers:
        with self._lock:
            return Transfers(self._uploads, self._uploaded, self._downloads, self._downloaded)

    def _buffers(self, use: str, shape: tuple[int, ...], cap: int) -> BufferPool:
        """The host buffers of one use (``staging``, ``outputs``) and size."""
        with self._pools:
            pool = self._host.get((use, shape))
            if pool is None:
                pool = self._host[(use, shape)] = BufferPool(shape, cap, self._pin)
            return pool

    def _device_frame(self, shape: tuple[int, ...]) -> ort.OrtValue:
        """Device memory for one frame that no cache or window holds any more, else new. Each hand-out
        is a wrapper of its own around the kept memory: when the last cache and window let go of it,
        its finalizer gives the memory back."""
        with self._pools:
            free = self._frames.setdefault(shape, collections.deque())
            if free:
                memory = free.pop()
            else:
                fresh = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), np.uint8, self.device, 0)
                made = self._made.get(shape, 0)
                if made >= DEVICE_FRAMES_KEPT:
                    return fresh  # past the cap: not kept
                self._made[shape] = made + 1
                memory = fresh._get_c_value()
        value = ort.OrtValue(memory)
        weakref.finalize(value, free.append, memory)
        return value

    def upload(self, frame: npt.NDArray[np.uint8]) -> ort.OrtValue:
        """One (H, W, 3) uint8 frame, padded to the model's multiple, copied into device memory and
        made (1, 3, H, W) there."""
        h, w, _ = frame.shape
        value = self._made_rgb(None, {HOST_RGB: self._put((1, h, w, 3), [frame])}, h, w)
        with self._lock:
            self._uploads += 1
            self._uploaded += frame.nbytes
        return value

    def _made_rgb(
        self, planes: Colour | None, inputs: Mapping[str, ort.OrtValue], h: int, w: int
    ) -> ort.OrtValue:
        """The (1, 3, H, W) RGB frame that the upload graph makes of ``inputs``, in device memory of its
        own (kept, unless ``reuse`` is off). The inputs' memory goes back once this returns."""
        session = self._uploader(planes)
        binding = session.io_binding()
        for name, value in inputs.items():
            binding.bind_ortvalue_input(name, value)
        made = self._device_frame((1, 3, h, w)) if self.reuse else None
        if made is None:
            binding.bind_output(UP_RGB, self.device, 0)
        else:
            binding.bind_ortvalue_output(UP_RGB, made)
        try:
            session.run_with_iobinding(binding)
        except Exception as err:
            kind = _uploaded_as(planes)
            what = f"a {w}x{h} frame uploaded as {kind}"
            if self._starved is not None:
                self._starved(err, what)
            raise BackendError(f"onnxruntime failed making RGB of {what} on the device: {err}") from err
        return made if made is not None else binding.get_outputs()[0]

    def _put(self, shape: tuple[int, ...], parts: Sequence[npt.NDArray[np.uint8]]) -> ort.OrtValue:
        """uint8 arrays of one shape (a frame; a plane; the U and V planes), views as they lie,
        copied into device memory as one ``shape`` tensor: each byte copied once on the host, into a
        page-locked buffer the GPU reads by DMA (none on the CPU provider, where device memory is host
        memory and a lone contiguous array goes straight in)."""
        lone = parts[0].reshape(shape) if len(parts) == 1 and parts[0].flags.c_contiguous else None
        if not self.reuse:
            if lone is None:
                lone = np.empty(shape, np.uint8)
                _gather(lone, parts)
            return ort.OrtValue.ortvalue_from_numpy(lone, self.device, 0)
        value = self._device_frame(shape)
        if self._pin is None and lone is not None:
            value.update_inplace(lone)
        else:
            stage = self._buffers("staging", shape, STAGING_KEPT).take()
            _gather(stage, parts)
            value.update_inplace(stage)
        return value

    def upload_planes(
        self, y: npt.NDArray[np.uint8], u: npt.NDArray[np.uint8], v: npt.NDArray[np.uint8], colour: Colour
    ) -> ort.OrtValue:
        """A frame's 4:2:0 planes in ``colour``'s (resolved) matrix and range, padded to the model's
        multiple, copied into device memory (half the bytes of its RGB) and made (1, 3, H, W) RGB
        there."""
        h, w = y.shape
        uploaded = {UP_Y: self._put((1, 1, h, w), [y]), UP_UV: self._put((1, 2, *u.shape), [u, v])}
        value = self._made_rgb(colour, uploaded, h, w)
        with self._lock:
            self._uploads += 1
            self._uploaded += y.nbytes + u.nbytes + v.nbytes
        return value

    def run(self, frames: Sequence[ort.OrtValue], strength: float | None = None) -> npt.NDArray[np.uint8]:
        """The enhanced (H*scale, W*scale, 3) frame of the window of ``frames``, in slot order."""
        return self.run_batch([frames], [strength])[0]

    def run_batch(
        self, windows: Sequence[Sequence[ort.OrtValue]], strengths: Sequence[float | None] | None = None
    ) -> list[npt.NDArray[np.uint8]]:
        """The enhanced (H*scale, W*scale, 3) frame of each of ``windows`` (frames of one size), in one
        call; a model that takes a strength gets ``strengths``, one per window (None: its default)."""
        if self._info.state:
            raise ModelError(
                f"model {self._info.name} is recurrent: its frames run as steps, with their state "
                "(DeviceFrames.step, step_batch), not as windows"
            )
        outs, _ = self._call(windows, None, strengths)
        return [out[0][0] for out in outs]

    def run_batch_yuv(
        self,
        windows: Sequence[Sequence[ort.OrtValue]],
        strengths: Sequence[float | None] | None,
        colour: Colour,
    ) -> list[tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]]:
        """As ``run_batch``, each window's frame as 4:2:0 planes in ``colour``'s (resolved) matrix and
        range: its (H*scale, W*scale) Y plane and its (2, H*scale/2, W*scale/2) U and V planes, made on
        the device (half the bytes of RGB come down, and the encoder takes them as they are). The
        frames' scaled size must be even."""
        if self._info.state:
            raise ModelError(
                f"model {self._info.name} is recurrent: its frames run as steps (step_batch_yuv)"
            )
        self._check_even(windows)
        outs, _ = self._call(windows, None, strengths, colour)
        return [(y[0, 0], uv[0]) for y, uv in outs]

    def _check_steps(
        self, windows: Sequence[Sequence[ort.OrtValue]], states: Sequence[Sequence[ort.OrtValue]]
    ) -> None:
        if not self._info.state:
            raise ModelError(f"model {self._info.name} carries no state: run its windows with run_batch")
        if len(states) != len(windows):
            raise FrameError(
                f"model {self._info.name}: {len(states)} states for {len(windows)} windows, one per stream"
            )

    def _check_even(self, windows: Sequence[Sequence[ort.OrtValue]]) -> None:
        h, w = self._size_of(windows[0][0]) if windows and windows[0] else (0, 0)
        s = self._info.scale
        if (h * s) % 2 or (w * s) % 2:
            raise FrameError(
                f"model {self._info.name}: 4:2:0 planes need an even frame size; frames of {w}x{h} "
                f"come out {w * s}x{h * s}"
            )

    def step(
        self, frames: Sequence[ort.OrtValue], state: Sequence[ort.OrtValue], strength: float | None = None
    ) -> tuple[npt.NDArray[np.uint8], tuple[ort.OrtValue, ...]]:
        """A recurrent model's enhanced (H*scale, W*scale, 3) frame of ``frames`` (its T, in slot order)
        and its next state, which stays in device memory: the state read is the last step's output, so
        nothing but the frame crosses (a ConvLSTM's state is 49.8 MB per 1080p frame each way)."""
        (pixels,), (made,) = self.step_batch([frames], [state], [strength])
        return pixels, made

    def step_batch(
        self,
        windows: Sequence[Sequence[ort.OrtValue]],
        states: Sequence[Sequence[ort.OrtValue]],
        strengths: Sequence[float | None] | None = None,
    ) -> tuple[list[npt.NDArray[np.uint8]], list[tuple[ort.OrtValue, ...]]]:
        """Steps of several streams (one window and one state each, frames of one size) in one call:
        each stream's frame and next state, the states staying in device memory."""
        self._check_steps(windows, states)
        outs, made = self._call(windows, states, strengths)
        return [out[0][0] for out in outs], made

    def step_batch_yuv(
        self,
        windows: Sequence[Sequence[ort.OrtValue]],
        states: Sequence[Sequence[ort.OrtValue]],
        strengths: Sequence[float | None] | None,
        colour: Colour,
    ) -> tuple[list[tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]], list[tuple[ort.OrtValue, ...]]]:
        """As ``step_batch``, each stream's frame as 4:2:0 planes, as ``run_batch_yuv`` gives them."""
        self._check_steps(windows, states)
        self._check_even(windows)
        outs, made = self._call(windows, states, strengths, colour)
        return [(y[0, 0], uv[0]) for y, uv in outs], made

    def _call(
        self,
        windows: Sequence[Sequence[ort.OrtValue]],
        states: Sequence[Sequence[ort.OrtValue]] | None,
        strengths: Sequence[float | None] | None,
        yuv: Colour | None = None,
    ) -> tuple[list[list[npt.NDArray[np.uint8]]], list[tuple[ort.OrtValue, ...]]]:
        """One bound call of the graph for ``len(windows)`` rows, filled up with repeats of the last:
        each row's outputs (its RGB frame, or with ``yuv`` its Y and its U and V planes), and with
        ``states`` each row's next state (onnxruntime allocates them on the device, from its arena on a
        GPU)."""
        rows = len(windows)
        self._check_window(windows)
        batch = batch_size(rows)
        session = self._session(batch, yuv)
        outs = self._outputs(windows[0][0], batch, yuv is not None)
        names = [
            yuv_outputs(b, batch) if yuv is not None else (frame_output(b, batch),) for b in range(batch)
        ]
        specs = self._info.state if states is not None else ()
        binding = session.io_binding()
        for b in range(batch):
            row = min(b, rows - 1)
            for k, value in enumerate(windows[row]):
                binding.bind_ortvalue_input(frame_input(k, b, batch), value)
            for name, out in zip(names[b], outs[b], strict=True):
                self._bind_pixels(binding, name, out)
            if states is not None:
                for spec, value in zip(specs, states[row], strict=True):
                    binding.bind_ortvalue_input(state_name(spec.input, b, batch), value)
        for b in range(batch):  # after every frame: get_outputs lists outputs in the order bound
            for spec in specs:
                binding.bind_output(state_name(spec.output, b, batch), self.device, 0)
        self._bind_strengths(binding, strengths, rows, batch)
        what = f"{rows} {'step' if specs else 'window'}(s) of frames {self._size(windows[0][0])}"
        self._execute(session, binding, outs, what)
        if not specs:
            return outs[:rows], []
        made, n = binding.get_outputs()[batch * len(names[0]) :], len(specs)
        return outs[:rows], [tuple(made[b * n : (b + 1) * n]) for b in range(rows)]

    def zero_state(self, shapes: Sequence[tuple[int, ...]]) -> tuple[ort.OrtValue, ...]:
        """A recurrent model's zero state in device memory, uploaded once per shape and shared: a step
        only reads its state inputs."""
        made = []
        for shape in shapes:
            with self._pools:
                value = self._zeros.get(shape)
            if value is None:
                value = self.to_device(np.zeros(shape, np.float32))
                with self._pools:
                    value = self._zeros.setdefault(shape, value)
            made.append(value)
        return tuple(made)

    def to_device(self, array: npt.NDArray[np.float32]) -> ort.OrtValue:
        """A host tensor (a state a caller kept on the host) copied into device memory, its bytes
        counted."""
        value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), self.device, 0)
        with self._lock:
            self._uploaded += array.nbytes
        return value

    def _check_window(self, windows: Sequence[Sequence[ort.OrtValue]]) -> None:
        t = self._info.t
        if not windows or any(len(frames) != t for frames in windows):
            raise FrameError(
                f"model {self._info.name} takes windows of T={t} frames; got {[len(w) for w in windows]}"
            )

    @staticmethod
    def _size_of(frame: ort.OrtValue) -> tuple[int, int]:
        """A frame's height and width, as it lies in device memory (padded)."""
        _, _, h, w = frame.shape()
        return h, w

    def _size(self, frame: ort.OrtValue) -> str:
        h, w = self._size_of(frame)
        return f"{w}x{h}"

    def _outputs(self, frame: ort.OrtValue, batch: int, yuv: bool) -> list[list[npt.NDArray[np.uint8]]]:
        """Host buffers for ``batch`` output frames of ``frame``'s size (RGB, or its 4:2:0 planes): kept
        ones unless ``reuse`` is off."""
        h, w = self._size_of(frame)
        h, w = h * self._info.scale, w * self._info.scale
        shapes = [(1, 1, h, w), (1, 2, h // 2, w // 2)] if yuv else [(1, h, w, 3)]
        if not self.reuse:
            return [[np.empty(shape, np.uint8) for shape in shapes] for _ in range(batch)]
        pools = [self._buffers("outputs", shape, OUTPUTS_KEPT) for shape in shapes]
        return [[pool.take() for pool in pools] for _ in range(batch)]

    @staticmethod
    def _bind_pixels(binding: ort.IOBinding, name: str, out: npt.NDArray[np.uint8]) -> None:
        """The output frame straight into ``out``, so onnxruntime makes no copy of its own."""
        binding.bind_output(name, "cpu", 0, np.uint8, list(out.shape), out.ctypes.data)

    def _bind_strengths(
        self, binding: ort.IOBinding, strengths: Sequence[float | None] | None, rows: int, batch: int
    ) -> None:
        """Each window's strength, for a model that takes one; repeats fill a batch up."""
        if not self._info.strength:
            return
        given = list(strengths) if strengths is not None else [None] * rows
        if len(given) != rows:
            raise FrameError(f"model {self._info.name}: {len(given)} strengths for {rows} windows")
        default = self._info.strength_default
        values = [default if v is None else v for v in given]
        values += [values[-1]] * (batch - rows)
        binding.bind_cpu_input(STRENGTH, np.asarray(values, np.float32).reshape(batch, 1))

    def _execute(
        self,
        session: ort.InferenceSession,
        binding: ort.IOBinding,
        outs: Sequence[Sequence[npt.NDArray[np.uint8]]],
        what: str,
    ) -> None:
        """Runs a bound call; counts the frames that came down (a batch filled up with repeats brings
        those down too)."""
        try:
            session.run_with_iobinding(binding)
        except Exception as err:
            if self._starved is not None:
                self._starved(err, f"{what} kept on the device")
            raise BackendError(
                f"onnxruntime failed running {self._info.name} on {what} kept on the device: {err}"
            ) from err
        with self._lock:
            self._downloads += len(outs)
            self._downloaded += sum(plane.nbytes for out in outs for plane in out)

    def warm(
        self,
        frame: ort.OrtValue,
        batch: int,
        state: Sequence[ort.OrtValue] | None = None,
        yuv: Colour | None = None,
    ) -> None:
        """Each graph a call of up to ``batch`` windows of ``frame``'s size runs, run once on it (a
        recurrent model's with ``state`` in each row; with ``yuv``, the graphs that make 4:2:0 planes in
        it, and the RGB graph of one window, which a probe and a region take)."""
        size = 1
        if yuv is not None and state is None:
            self.run_batch([[frame] * self._info.t], [None])
        while True:
            window = [[frame] * self._info.t] * size
            rows = [None] * size
            if state is not None and yuv is not None:
                self.step_batch_yuv(window, [state] * size, rows, yuv)
            elif state is not None:
                self.step_batch(window, [state] * size, rows)
            elif yuv is not None:
                self.run_batch_yuv(window, rows, yuv)
            else:
                self.run_batch(window, rows)
            if size >= batch:
                return
            size *= 2
