"""The inference port: ``infer(batch)``, synchronous, run by the pipeline in a worker thread.

Streaming models (``ModelInfo.features`` not empty) also answer ``encode`` and ``fuse``: each frame is
encoded once into feature maps, which a per-stream :class:`~streamer.core.features.FeatureCache`
keeps beside the frames, and each window's output is fused from its T cached maps.
``enhance_cached`` is the one place that walks a window through the cache.
"""

from __future__ import annotations

import abc
import contextlib
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from streamer.core.blend import FULL, Blend
from streamer.core.features import FeatureCache
from streamer.core.tiling import plan_tiles
from streamer.core.windower import OutputPosition
from streamer.errors import FrameError, ModelError
from streamer.frame import Colour, Hyperframe, Picture, Pixels

__all__ = [
    "CPU_PROVIDER",
    "CUDA_PROVIDER",
    "STRENGTH",
    "TENSORRT_PROVIDER",
    "Backend",
    "CachedWindow",
    "ChannelOrder",
    "Declared",
    "FeatureSpec",
    "FrameFeatures",
    "GpuWait",
    "Layout",
    "ModelInfo",
    "State",
    "StateSpec",
    "Strengths",
    "device_of",
    "on_cpu",
]

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"


class GpuWait(StrEnum):
    """How a host thread waits for the GPU at the end of a call (``model.gpu_wait``)."""

    BLOCKING = "blocking"
    """Sleep on a synchronisation primitive until the GPU is done: no core held while it works."""
    SPIN = "spin"
    """Poll the GPU: the fastest return, a core held at 100% for the whole wait."""
    AUTO = "auto"
    """CUDA's own choice: a spin unless CUDA contexts outnumber the cores."""


def on_cpu(provider: str) -> bool:
    """Whether ``provider`` is onnxruntime's CPU provider: the one answer to that question."""
    return provider == CPU_PROVIDER


def device_of(provider: str) -> str:
    """Where a provider's tensors live, as OrtValue names it: the GPU's for CUDA and TensorRT."""
    return "cuda" if provider in (CUDA_PROVIDER, TENSORRT_PROVIDER) else "cpu"


STRENGTH = "strength"
"""The optional input of a model that takes a strength: (B, 1) float32, the noise sigma in 0..255."""

State = tuple[Any, ...]
"""A recurrent model's hidden tensors, in the order of ``ModelInfo.state``; () for stateless models.
float32 host arrays, or a backend's own values in device memory where it keeps the state there
(``model.device_frames``): callers pass back what the last step returned."""

FrameFeatures = tuple[npt.NDArray[np.float32], ...]
"""One frame's feature maps from a streaming model's encoder, each (C, H/scale, W/scale), in the order
of ``ModelInfo.features``."""


@dataclass(frozen=True, slots=True)
class CachedWindow:
    """A window to enhance through its stream's cache, with ``enhance_cached``'s arguments: what a
    batch of such windows, from several streams, carries per window (``enhance_cached_batch``)."""

    window: Hyperframe
    run: int
    cache: FeatureCache[FrameFeatures]
    crop: tuple[int, int, int, int] | None = None
    guard: contextlib.AbstractContextManager[object] | None = None


class Layout(enum.Enum):
    """How the model wants a batch of hyperframes laid out."""

    NTCHW = "NTCHW"
    """(B, T, C, H, W): the hyperframe layout itself."""
    NCTHW = "NCTHW"
    """(B, C, T, H, W): what Conv3d takes."""
    STACKED = "N(T*C)HW"
    """(B, T*C, H, W): the T frames' channels stacked frame by frame, for multi-frame 2D networks."""
    NCHW = "NCHW"
    """(B, C, H, W): one frame, for per-frame 2D networks (T = 1)."""

    @property
    def rank(self) -> int:
        return 5 if self in (Layout.NTCHW, Layout.NCTHW) else 4


class ChannelOrder(enum.Enum):
    """The order of a model's three colour channels; frames travel as RGB."""

    RGB = "RGB"
    BGR = "BGR"


@dataclass(frozen=True, slots=True)
class Declared:
    """What a config says about a window model, over its metadata (a model exported without it, or
    with it wrong); None leaves the metadata's word, or what the shapes show where they are
    unambiguous."""

    layout: Layout | None = None
    channel_order: ChannelOrder | None = None
    value_range: tuple[float, float] | None = None
    scale: int | None = None

    @property
    def anything(self) -> bool:
        return any(v is not None for v in (self.layout, self.channel_order, self.value_range, self.scale))


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One hidden tensor a recurrent model reads and writes back, carried from window to window.

    Its shape is (B, channels, ceil(H / scale), ceil(W / scale)) for frames padded to H x W; zeros
    start a stream and every new run after a discontinuity.
    """

    input: str
    output: str
    channels: int
    scale: int


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """One feature map a streaming model's encoder makes per frame: (channels, H/scale, W/scale) for
    frames padded to H x W."""

    name: str
    channels: int
    scale: int


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the runtime read from the model file; the config must agree with it."""

    name: str
    t: int
    layout: Layout
    output_position: OutputPosition
    channels: int = 3
    value_range: tuple[float, float] = (0.0, 1.0)
    """The float range 0..255 pixel values are mapped to on input and from on output (float tensors
    only: a uint8 input or output carries the pixel values themselves)."""
    channel_order: ChannelOrder = ChannelOrder.RGB
    uint8_input: bool = False
    uint8_output: bool = False
    scale: int = 1
    """Output frames are this many times the input's width and height (super-resolution models)."""
    pad_multiple: int = 1
    """H and W are padded up to a multiple of this before inference and cropped back after."""
    provider: str = CPU_PROVIDER
    state: tuple[StateSpec, ...] = ()
    """Empty for stateless models; a recurrent model's windows of one stream must run in order."""
    features: tuple[FeatureSpec, ...] = ()
    """Empty unless the model streams: then each frame is encoded once and windows fuse cached maps."""
    device_frames: bool = False
    """A window model whose frames are uploaded once and kept on the device, windows made there
    (``streamer.backend.device_frames``): windows go through ``enhance_cached`` like a streaming
    model's, with the frames in the cache. A recurrent model's steps keep its state there."""
    yuv420: bool = False
    """Frames kept on the device go up as 4:2:0 planes where they come as planes, and come back as
    planes in their stream's encoder colour (``model.yuv420``; ``Hyperframe.colour`` says which),
    converted to and from RGB on the device."""
    strength: bool = False
    """The model takes a ``strength`` input: per window, the noise sigma (0..255 levels) to remove
    (``model.strength`` sets it per stream: a number, or auto from the stream's noise estimate)."""
    strength_default: float = 25.0
    """What a window without a strength of its own gets (``streamer.strength_default``)."""
    blend: Blend = FULL
    """How much of the model's change a stream gets by its quantizer and noise (``streamer.blend``,
    measured on the camera track); FULL for a model that states none."""
    strength_curve: tuple[tuple[float, float], ...] = ()
    """(noise estimate, strength) points, the estimate rising: what ``model.strength: auto`` gives
    the model for a stream's estimate, between points on a straight line, flat past the ends
    (``streamer.strength_curve``, measured by ``python -m export.calibrate_strength``). Empty: the
    estimate itself."""
    activation_bytes_per_pixel: int | None = None
    """Peak memory one call takes per pixel of its frames, measured once (``streamer bench memory``)
    and kept in the model's card; None: not measured (memory admission assumes a default)."""
    reach_px: int | None = None
    """How far an input pixel can move an output pixel, measured once (``python -m export.reach``) and
    kept in the model's card: what the tile gate's halo must cover. None: not measured."""

    @property
    def streaming(self) -> bool:
        return bool(self.features)

    def auto_strength(self, sigma: float) -> float:
        """The strength ``auto`` gives for a stream whose noise estimate is ``sigma``."""
        if not self.strength_curve:
            return sigma
        xs, ys = zip(*self.strength_curve, strict=True)
        return float(np.interp(sigma, xs, ys))

    @property
    def on_cpu(self) -> bool:
        return on_cpu(self.provider)


Strengths = Sequence[float | None] | None
"""Per window of a batch, the strength a model that takes one gets (None: its default)."""


class Backend(abc.ABC):
    """Enhances batches of hyperframes; one instance may serve several streams."""

    workers: int = 1
    """Calls it is sized to run at once, each from its own thread (its runtime's threads split
    between them); the scheduler runs that many batches, and a stream that many windows, at a time."""

    @property
    @abc.abstractmethod
    def info(self) -> ModelInfo: ...

    @abc.abstractmethod
    def infer(self, batch: npt.NDArray[np.uint8], strength: Strengths = None) -> npt.NDArray[np.uint8]:
        """(B, T, C, H, W) uint8 RGB hyperframes -> (B, C, H*scale, W*scale) uint8 enhanced target frames.

        ``strength``: per window, for a model that takes one (``ModelInfo.strength``; None, or a None
        among them: its default); ignored by others. Blocking: call it from a worker thread. Raises
        FrameError for a batch of the wrong shape or dtype, BackendError when the runtime fails on a
        valid batch.
        """

    def initial_state(self, batch: int, height: int, width: int) -> State:
        """The zero state for ``batch`` streams of frames H x W; () for stateless models."""
        return ()

    def warm_up(
        self,
        width: int,
        height: int,
        batch: int = 1,
        colour: Colour | None = None,
        planes_in: Colour | None = None,
    ) -> None:
        """Calls at this frame size on the path live frames take, so the first of them does not wait
        for the runtime's lazy work (cuDNN's algorithm search, TensorRT's engine build: seconds).
        ``batch``: the most windows a call will take. A call of one window and, where ``batch`` is
        more, one of ``batch``: TensorRT fits its engine's optimisation profile to the shapes it has
        seen and builds it again for a batch outside them, so both ends run here, not on live frames.
        ``colour`` and ``planes_in``: the stream's encoder colour and its frames', for a backend that
        makes and takes 4:2:0 planes."""
        for rows in sorted({1, max(1, batch)}):
            window = np.zeros((rows, self.info.t, 3, height, width), np.uint8)
            if self.info.state:
                self.step_streams(window, [self.initial_state(1, height, width)] * rows)
            else:
                self.infer(window)

    def step(
        self, batch: npt.NDArray[np.uint8], state: State, strength: Strengths = None
    ) -> tuple[npt.NDArray[np.uint8], State]:
        """Like ``infer``, carrying a recurrent model's state: returns the frames and the next state."""
        return self.infer(batch, strength), state

    def step_streams(
        self,
        batch: npt.NDArray[np.uint8],
        states: Sequence[State],
        strength: Strengths = None,
        colour: Colour | None = None,
    ) -> tuple[list[Picture], list[State]]:
        """One step of each of B streams: row b of ``batch`` carries ``states[b]``, a batch of one's (as
        ``initial_state(1, ...)`` makes it). Returns each stream's (H*scale, W*scale, 3) frame (or, from
        a backend that makes them, its 4:2:0 planes in ``colour``) and its next state. Here step after
        step; a backend that can join them in one call does."""
        if len(states) != len(batch):
            raise FrameError(
                f"model {self.info.name!r}: {len(states)} states for a batch of {len(batch)}, one per stream"
            )
        pictures: list[Picture] = []
        made = []
        for b, state in enumerate(states):
            out, next_state = self.step(batch[b : b + 1], state, None if strength is None else [strength[b]])
            pictures.append(np.ascontiguousarray(out[0].transpose(1, 2, 0)))
            made.append(next_state)
        return pictures, made

    def step_windows(
        self, windows: Sequence[Hyperframe], states: Sequence[State], colour: Colour | None = None
    ) -> tuple[list[Picture], list[State]]:
        """``step_streams`` on the windows of several streams (frames of one size and kind), each with
        its own strength: here their frames stacked as RGB; a backend that takes frames as they come
        (4:2:0 planes, uploaded as they are) does so."""
        if not windows:
            raise FrameError(f"model {self.info.name!r}: step_windows needs at least one window")
        batch = np.stack([window.pixels() for window in windows])
        return self.step_streams(batch, states, [window.strength for window in windows], colour)

    def encode(self, frames: npt.NDArray[np.uint8]) -> list[FrameFeatures]:
        """(N, H, W, 3) uint8 RGB frames of one size -> each frame's feature maps (streaming models)."""
        raise ModelError(f"model {self.info.name!r} is not a streaming model; it has no encoder")

    def fuse(
        self,
        windows: Sequence[Sequence[FrameFeatures]],
        targets: npt.NDArray[np.uint8],
        strength: Strengths = None,
    ) -> Pixels:
        """B windows of T frames' features, in slot order, and their (B, H, W, 3) target frames -> the
        (B, H, W, 3) enhanced target frames (streaming models)."""
        raise ModelError(f"model {self.info.name!r} is not a streaming model; it cannot fuse features")

    def encode_tiles(self, frames: npt.NDArray[np.uint8], tile: int, overlap: int) -> list[FrameFeatures]:
        """``encode`` for frames larger than ``tile``: one encoder call per overlapping tile, so its
        activations stay a tile's, written into half-precision maps of the whole frames (half the memory
        a large stream's cache holds; the fusion reads its crops back at full precision). Equal to
        ``encode`` up to that rounding when ``overlap`` covers the encoder's reach, as ``model.tile_overlap``
        must cover the model's."""
        n, h, w, _ = frames.shape
        m = self.info.pad_multiple
        hp, wp = -(-h // m) * m, -(-w // m) * m
        specs = self.info.features
        maps = [np.empty((n, s.channels, hp // s.scale, wp // s.scale), dtype=np.float16) for s in specs]
        for part in plan_tiles(h, w, tile, overlap, m):
            top, bottom, left, right = part.crop
            pt, pb, pl, pr = part.paste
            pb, pr = (hp if pb == h else pb), (wp if pr == w else pr)  # the edge tile keeps its padding
            encoded = self.encode(np.ascontiguousarray(frames[:, top:bottom, left:right]))
            for k, spec in enumerate(specs):
                s = spec.scale
                for i, features in enumerate(encoded):
                    maps[k][i, :, pt // s : pb // s, pl // s : pr // s] = features[k][
                        :, (pt - top) // s : (pb - top) // s, (pl - left) // s : (pr - left) // s
                    ]
        return [tuple(m_[i] for m_ in maps) for i in range(n)]

    def enhance_cached(
        self,
        window: Hyperframe,
        run: int,
        cache: FeatureCache[FrameFeatures],
        crop: tuple[int, int, int, int] | None = None,
        guard: contextlib.AbstractContextManager[object] | None = None,
        tiles: tuple[int, int] | None = None,
    ) -> Pixels:
        """The window's enhanced target frame, (H, W, 3): frames the cache lacks are encoded in one call
        and stored, so each frame of a run is encoded once however many windows it is part of. With
        ``crop`` (top, bottom, left, right; starting on multiples of ``pad_multiple`` and spanning
        them, or ending at the frame's edge: ``Region.aligned``), only that box is fused, from the
        whole frames' cached maps cut at the same place. ``guard`` (a lock) is held while the cache is
        read and filled, where windows of one stream run on several threads at once. ``tiles`` (size,
        overlap): frames too large for one call are encoded tile by tile (``encode_tiles``)."""
        frames = {f.index: f for f in window.frames}
        with guard if guard is not None else contextlib.nullcontext():
            missing = cache.missing(frames, run)
            if missing:
                # One new frame per window in a steady stream: a view of it, not a 1-frame copy.
                stacked = (
                    frames[missing[0]].pixels[None]
                    if len(missing) == 1
                    else np.stack([frames[i].pixels for i in missing])
                )
                encoded = self.encode(stacked) if tiles is None else self.encode_tiles(stacked, *tiles)
                for index, features in zip(missing, encoded, strict=True):
                    cache.put(index, run, features)
            window_features = [cache.get(i) for i in window.indices]
        target = window.target_frame.pixels
        if crop is not None:
            top, bottom, left, right = crop
            m = self.info.pad_multiple
            rows, cols = -(-(bottom - top) // m) * m, -(-(right - left) // m) * m
            scales = [spec.scale for spec in self.info.features]
            window_features = [
                tuple(
                    f[:, top // s : (top + rows) // s, left // s : (left + cols) // s]
                    for f, s in zip(features, scales, strict=True)
                )
                for features in window_features
            ]
            target = target[top:bottom, left:right]
        window_features = [
            tuple(f.astype(np.float32, copy=False) for f in features) for features in window_features
        ]
        enhanced: Pixels = self.fuse([window_features], target[None], [window.strength])[0]
        return enhanced

    def enhance_cached_batch(self, windows: Sequence[CachedWindow]) -> list[Picture]:
        """``enhance_cached`` of each window; a backend that can run them in one call does (and may
        give 4:2:0 planes, ``ModelInfo.yuv420``)."""
        return [self.enhance_cached(w.window, w.run, w.cache, w.crop, w.guard) for w in windows]

    @abc.abstractmethod
    def close(self) -> None:
        """Release the runtime session."""
