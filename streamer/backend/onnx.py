"""The onnxruntime backend: loads an exported model, checks it keeps the runtime's contract, runs batches.

The contract a model file keeps (``export.onnx_export`` writes models that do):

- one image input, float32 or uint8, laid out as ``streamer.layout`` says: NTCHW (B, T, C, H, W), NCTHW
  (B, C, T, H, W), N(T*C)HW (B, T*C, H, W: the frames' channels stacked frame by frame) or NCHW
  (B, C, H, W: one frame, T = 1), C = 3 in ``streamer.channel_order`` (RGB | BGR; RGB without it).
  Without ``streamer.layout`` the input's shape decides where it can: rank 5 with exactly one of
  axes 1 and 2 a static 3, or rank 4 with a static channel count 3T;
- one output, float32 or uint8, (B, 3, H*scale, W*scale): the target slot's frame at the input's
  (padded) size times ``streamer.scale`` (1 without it);
- metadata_props ``streamer.name``, ``streamer.t``, ``streamer.output_position`` (center | last),
  ``streamer.value_range`` ("lo,hi": what 0..255 maps to in a float tensor; uint8 tensors carry the
  pixel values), ``streamer.pad_multiple``. Without ``streamer.t`` the input's static T stands in.
  A config's ``model.layout``, ``model.channel_order``, ``model.value_range`` and ``model.scale``
  (``Declared``) take precedence over the metadata, for models exported without it;
- recurrent models add one float32 input and one output per hidden tensor, declared in
  ``streamer.state`` as a JSON list of {"input", "output", "channels", "scale"}.

A streaming model (``export.streaming_export`` writes them) is two files and keeps another contract:

- the file named is the *fusion* graph; metadata ``streamer.encoder`` names its *encoder* graph, a file
  in the same folder, and ``streamer.features`` lists the maps the encoder makes per frame as JSON
  [{"name", "channels", "scale"}]; ``streamer.t``, ``streamer.output_position`` and
  ``streamer.pad_multiple`` as above;
- the encoder takes ``frame``, uint8 (N, H, W, 3) RGB, and outputs one float32 (N, channels, H/scale,
  W/scale) tensor per feature, named as the feature;
- the fusion graph takes ``{feature}_{slot}`` for every feature and slot 0..T-1 (one frame's map each,
  (B, channels, H/scale, W/scale)) and ``target``, uint8 (B, H, W, 3), and outputs the enhanced target
  frame, uint8 (B, H, W, 3). Casts, scaling, rounding and clipping all happen inside the graphs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.backend.base import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    STRENGTH,
    TENSORRT_PROVIDER,
    Backend,
    CachedWindow,
    Declared,
    FrameFeatures,
    ModelInfo,
    State,
    Strengths,
    device_of,
)
from streamer.backend.cuda_runtime import GpuWait, set_gpu_wait
from streamer.backend.device_frames import (
    DeviceFrames,
    Transfers,
    graph_tools_missing,
)
from streamer.contract import (
    CARD_BYTES_KEY,
    FRAME_INPUT,
    TARGET_INPUT,
    Key,
    Session,
    card_bytes_per_pixel,
    card_reach,
    encoder_path,
    read_contract,
    read_streaming_contract,
)
from streamer.contract.layout import from_model_channels, to_model_layout
from streamer.core.features import FeatureCache
from streamer.errors import BackendError, ConfigError, FrameError, ModelError, ModelUnavailableError
from streamer.frame import Colour, Frame, Hyperframe, Picture, Pixels, Yuv420

__all__ = [
    "CARD_BYTES_KEY",
    "PROVIDER_PREFERENCE",
    "STRENGTH",
    "OnnxBackend",
    "provider_fallback",
    "resolve_providers",
]

logger = logging.getLogger(__name__)


_OUT_OF_MEMORY = re.compile(
    r"out of memory|Failed to allocate memory|cudaErrorMemoryAllocation|CUDNN_STATUS_ALLOC_FAILED"
    r"|CUBLAS_STATUS_ALLOC_FAILED|bad_alloc",
    re.IGNORECASE,
)
"""How onnxruntime's CPU, CUDA and TensorRT providers word an allocation that failed."""


PROVIDER_PREFERENCE = (TENSORRT_PROVIDER, CUDA_PROVIDER, CPU_PROVIDER)
"""What ``providers="auto"`` tries, fastest first; CPU always ends the list as the fallback."""

_PROBE_SIDE = 32
"""The probe that tells a model's scale runs it on frames about this small (a multiple of its padding;
one wider than tall, so a transposed output does not pass)."""


def resolve_providers(providers: str | Sequence[str]) -> list[str]:
    """The execution providers to ask onnxruntime for, in order, all of them available in this build."""
    available = ort.get_available_providers()
    if isinstance(providers, str):
        if providers != "auto":
            raise ConfigError(
                f"backend providers must be 'auto' or a list of provider names, got {providers!r}; "
                f"available here: {available}"
            )
        return [p for p in PROVIDER_PREFERENCE if p in available and p != CPU_PROVIDER] + [CPU_PROVIDER]
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

    _session: Session | None
    _encoder: Session | None
    _device: DeviceFrames | None
    _info: ModelInfo

    def __init__(
        self,
        path: str | os.PathLike[str],
        providers: str | Sequence[str] = "auto",
        threads: int | None = None,
        spin: bool = False,
        workers: int = 1,
        declared: Declared | None = None,
        profile: Path | None = None,
        provider_options: Mapping[str, Mapping[str, str]] | None = None,
        device_frames: bool | None = None,
        yuv420: bool | None = None,
        gpu_wait: GpuWait = GpuWait.BLOCKING,
    ) -> None:
        """``profile``: a folder where onnxruntime writes each session's per-operator profile
        (``streamer bench profile``); :meth:`end_profiling` closes them. ``provider_options``: by
        provider name, the options onnxruntime passes it (TensorRT's fp16 and engine cache, say).
        ``device_frames``: a window model's frames kept on the device (:mod:`.device_frames`); None: on
        a GPU provider. ``yuv420``: frames to and from the device as 4:2:0 planes (``model.yuv420``);
        None: on a GPU provider. ``gpu_wait``: how a caller waits for a GPU provider's call to finish
        (``model.gpu_wait``), set on its GPU for the whole process."""
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
        if workers < 1:
            raise ConfigError(f"backend workers must be at least 1; got {workers}")
        self.workers = workers
        requested = resolve_providers(providers)

        def options(graph: str) -> ort.SessionOptions:
            made = ort.SessionOptions()
            # Spinning intra-op threads wait faster between ops but burn the cores that decode and encode
            # threads need: on for a process that only infers, off (the default) inside a pipeline.
            made.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
            if threads is not None:
                made.intra_op_num_threads = threads
            if profile is not None:
                made.enable_profiling = True
                made.profile_file_prefix = str(profile / graph)
            return made

        session = _load(self.path, options("model"), requested, provider_options or {})

        def open_encoder(name: str) -> tuple[Session, Path]:
            path = encoder_path(self.path, name)
            return _load(path, options("encoder"), requested, provider_options or {}), path

        self._adopt(session, open_encoder, declared)
        self._info = dataclasses.replace(
            self._info,
            activation_bytes_per_pixel=card_bytes_per_pixel(self.path),
            reach_px=card_reach(self.path),
        )
        if device_of(self._info.provider) == "cuda":
            chosen = (provider_options or {}).get(self._info.provider, {})
            set_gpu_wait(gpu_wait, int(chosen.get("device_id", 0)))
        wanted = device_frames if device_frames is not None else device_of(self._info.provider) != "cpu"
        if wanted and self._info.streaming:
            if device_frames:
                raise ConfigError(
                    f"model {self._info.name} is a streaming model: model.device_frames is for window and "
                    "recurrent models; remove it"
                )
        elif wanted and graph_tools_missing():
            if device_frames:
                raise ConfigError(
                    "model.device_frames needs the onnx package to make the window graph; install it "
                    "(pip install onnx) or remove the setting"
                )
            logger.warning(
                "model %s: frames stay on the host (windows uploaded whole): keeping them on the device "
                "needs the onnx package, which is not installed",
                self._info.name,
            )
        elif wanted:
            self._device = DeviceFrames(
                self.path,
                self._info,
                options("device"),
                requested,
                provider_options or {},
                self._raise_if_out_of_memory,
            )
            self._info = dataclasses.replace(self._info, device_frames=True)
        planes = yuv420 if yuv420 is not None else device_of(self._info.provider) != "cpu"
        if yuv420 and self._device is None:
            raise ConfigError(
                f"model.yuv420 needs the frames on the device; model {self._info.name} runs without "
                "model.device_frames: set it, or remove model.yuv420"
            )
        if planes and self._device is not None:
            self._info = dataclasses.replace(self._info, yuv420=True)
        logger.info(
            "model %s runs on %s (asked for %s)", self._info.name, self._info.provider, ", ".join(requested)
        )

    def _adopt(
        self,
        session: Session,
        open_encoder: Callable[[str], tuple[Session, Path]],
        declared: Declared | None,
    ) -> None:
        """Reads the contract of the model ``session`` runs (and of its encoder, for a streaming model,
        opened by the name its metadata gives) and takes the sessions on: whatever runs the graphs,
        onnxruntime here or a Triton server (``streamer.backend.triton``), the same checks hold."""
        self._session = session
        self._encoder = None
        self._device = None
        meta: Mapping[str, str] = session.get_modelmeta().custom_metadata_map
        self.metadata = dict(meta)
        """The model's metadata_props, as written at export."""
        declared = declared or Declared()
        if Key.ENCODER in meta:
            if declared.anything:
                raise ConfigError(
                    f"model {str(self.path)!r} is a streaming model, whose graphs fix their own layout, "
                    "colour order, range and size; remove model.layout, model.channel_order, "
                    "model.value_range and model.scale"
                )
            self._encoder, encoder_path = open_encoder(meta[Key.ENCODER])
            self._info = read_streaming_contract(session, self._encoder, self.path, encoder_path)
            self._input, self._output = TARGET_INPUT, session.get_outputs()[0].name
        else:
            self._info, self._input, self._output = read_contract(session, self.path, declared)
        lo, hi = self._info.value_range
        self._lo = np.float32(lo)
        self._to_model = np.float32((hi - lo) / 255.0)
        self._to_pixels = np.float32(255.0 / (hi - lo))
        self.inferred: frozenset[str] = frozenset()
        """Parts of the contract neither declared nor read from the graph's shapes but seen in a probe."""
        if not self._info.scale:  # dynamic sizes, no metadata, no model.scale: the output says it
            self._info = dataclasses.replace(self._info, scale=self._probed_scale())
            self.inferred = frozenset({"scale"})

    @property
    def info(self) -> ModelInfo:
        return self._info

    def infer(self, batch: npt.NDArray[np.uint8], strength: Strengths = None) -> npt.NDArray[np.uint8]:
        """Stateless models as they are; a recurrent one starts from zeros (a one-window stream); a
        streaming one encodes every frame of every window (no cache: the full-window computation)."""
        self._check_batch(batch)
        b, t, c, h, w = batch.shape
        if self._info.streaming:
            frames = np.ascontiguousarray(batch.transpose(0, 1, 3, 4, 2)).reshape(b * t, h, w, c)
            features = self.encode(frames)
            windows = [features[i * t : (i + 1) * t] for i in range(b)]
            targets = frames[self._info.output_position.slot(t) :: t]
            return self.fuse(windows, targets, strength).transpose(0, 3, 1, 2)
        return self._run(batch, self._zero_state(b, h, w), strength)[0]

    def _probed_scale(self) -> int:
        """The model's scale, from one call on a small black window: its output's size over its input's,
        the same whole number on both sides; a ModelError naming what to declare where it is not."""
        info, session = self._info, self._session
        assert session is not None
        m = info.pad_multiple
        side = m * -(-_PROBE_SIDE // m)
        x = self.model_input(np.zeros((1, info.t, 3, side, side + m), np.uint8))
        feeds = {
            self._input: x,
            **{
                s.input: np.zeros((1, s.channels, -(-side // s.scale), -(-(side + m) // s.scale)), np.float32)
                for s in info.state
            },
            **self._strength(1, None),
        }
        where = f"model {str(self.path)!r}"
        try:
            (y,) = session.run([self._output], feeds)
        except Exception as err:
            raise ModelError(
                f"{where} failed a probe at {side + m}x{side} ({err}); declare its scale (metadata "
                f"{Key.SCALE} or model.scale) and check its layout and input type"
            ) from err
        shape: tuple[int, ...] = tuple(getattr(y, "shape", ()))
        h, w = side, side + m
        if (
            len(shape) == 4
            and shape[2] % h == 0
            and shape[3] % w == 0
            and shape[2] // h == shape[3] // w >= 1
        ):
            scale = int(shape[2] // h)
            logger.info("model %s: scale %d, seen in a probe (its metadata states none)", info.name, scale)
            return scale
        raise ModelError(
            f"{where} returned {tuple(shape)} for {w}x{h} frames ({tuple(x.shape)}); the runtime takes "
            f"(B, 3, H*scale, W*scale) with one whole-number scale: declare it (metadata {Key.SCALE} or "
            "model.scale), or export the model so that it holds"
        )

    def _strength(self, rows: int, strength: Strengths) -> dict[str, npt.NDArray[np.float32]]:
        """The ``strength`` feed of a model that takes one, (B, 1) float32; nothing for others."""
        if not self._info.strength:
            return {}
        default = self._info.strength_default
        values = [default] * rows if strength is None else [default if v is None else v for v in strength]
        if len(values) != rows:
            raise FrameError(f"model {self._info.name}: {len(values)} strengths for a batch of {rows}")
        return {STRENGTH: np.asarray(values, dtype=np.float32).reshape(rows, 1)}

    def enhance_cached(
        self,
        window: Hyperframe,
        run: int,
        cache: FeatureCache[FrameFeatures],
        crop: tuple[int, int, int, int] | None = None,
        guard: contextlib.AbstractContextManager[object] | None = None,
        tiles: tuple[int, int] | None = None,
    ) -> Pixels:
        """With frames on the device, the cache holds each frame's device copy instead of feature maps."""
        device = self._device
        if device is None or tiles is not None:
            return super().enhance_cached(window, run, cache, crop, guard, tiles)
        values = self._device_window(device, window, run, cache, guard)
        return self._cropped(device.run(values, window.strength), window, crop)

    def _device_window(
        self,
        device: DeviceFrames,
        window: Hyperframe,
        run: int,
        cache: FeatureCache[FrameFeatures],
        guard: contextlib.AbstractContextManager[object] | None,
    ) -> list[ort.OrtValue]:
        """The window's frames in device memory, uploading those its stream's cache lacks: as their
        4:2:0 planes where they come as planes and this backend takes them (``model.yuv420``), else as
        RGB; made RGB on the device either way, so one window may hold both."""
        frames = {f.index: f for f in window.frames}
        with guard if guard is not None else contextlib.nullcontext():
            for index in cache.missing(frames, run):
                # The cache is the stream's and holds what its model makes per frame: here, device frames.
                cache.put(index, run, cast(FrameFeatures, (self._upload(device, frames[index]),)))
            return [cast(ort.OrtValue, cache.get(i)[0]) for i in window.indices]

    def _upload(self, device: DeviceFrames, frame: Frame) -> ort.OrtValue:
        picture = frame.picture
        if isinstance(picture, Yuv420) and self._info.yuv420 and self._planes_fit(frame.height, frame.width):
            m = self._info.pad_multiple
            ph, pw = -frame.height % m, -frame.width % m
            y, u, v = picture.y, picture.u, picture.v  # the decoder's own, copied once on the way up
            if ph or pw:
                y = _pad(y, ((0, ph), (0, pw)))
                u, v = (_pad(c, ((0, ph // 2), (0, pw // 2))) for c in (u, v))
            return device.upload_planes(y, u, v, picture.colour)
        return device.upload(self._pad_frames(frame.pixels[None])[0])

    def _cropped(
        self, out: npt.NDArray[np.uint8], window: Hyperframe, crop: tuple[int, int, int, int] | None
    ) -> Pixels:
        """The part of a whole (padded) frame's output that the window asked for."""
        target, s = window.target_frame, self._info.scale
        top, bottom, left, right = crop if crop is not None else (0, target.height, 0, target.width)
        return np.ascontiguousarray(out[top * s : bottom * s, left * s : right * s])

    def enhance_cached_batch(self, windows: Sequence[CachedWindow]) -> list[Picture]:
        """With frames on the device, windows of several streams (of one size) in one call: each
        stream's new frames uploaded into its own cache, the windows made and run together, their frames
        back as 4:2:0 planes where ``model.yuv420`` is on and the windows allow."""
        device = self._device
        if device is None:
            return super().enhance_cached_batch(windows)
        values = [self._device_window(device, w.window, w.run, w.cache, w.guard) for w in windows]
        strengths = [w.window.strength for w in windows]
        colour = self._planes_colour(windows)
        if colour is not None:
            planes = device.run_batch_yuv(values, strengths, colour)
            target = windows[0].window.target_frame
            return [self._yuv420(y, uv, target.height, target.width, colour) for y, uv in planes]
        out = device.run_batch(values, strengths)
        return [self._cropped(pixels, w.window, w.crop) for pixels, w in zip(out, windows, strict=True)]

    def _planes_colour(self, windows: Sequence[CachedWindow]) -> Colour | None:
        """The colour to make 4:2:0 planes in, where this batch can come down as planes: whole frames
        of an even size, padded and not, all of one stream colour."""
        colour = windows[0].window.colour
        if not self._info.yuv420 or colour is None:
            return None
        target = windows[0].window.target_frame
        if not self._planes_fit(target.height, target.width):
            return None
        if any(w.crop is not None or w.window.colour != colour for w in windows):
            return None
        return colour

    def _planes_fit(self, height: int, width: int) -> bool:
        """Whether frames of this size come out even, padded and not, as 4:2:0 planes need."""
        s, m = self._info.scale, self._info.pad_multiple
        return not any(n * s % 2 for n in (height, width, height + -height % m, width + -width % m))

    def _yuv420(
        self, y: npt.NDArray[np.uint8], uv: npt.NDArray[np.uint8], height: int, width: int, colour: Colour
    ) -> Yuv420:
        """The planes of a (padded) whole frame's output, cut to a ``height`` x ``width`` frame's:
        views, no copy."""
        h, w = height * self._info.scale, width * self._info.scale
        return Yuv420(y[:h, :w], uv[0, : h // 2, : w // 2], uv[1, : h // 2, : w // 2], colour)

    def warm_up(
        self,
        width: int,
        height: int,
        batch: int = 1,
        colour: Colour | None = None,
        planes_in: Colour | None = None,
    ) -> None:
        """With frames on the device, its graphs too (one per batch size up to ``batch``, making 4:2:0
        planes in ``colour`` where this backend does, and the upload graphs of RGB frames and of planes
        in ``planes_in``); a window model's host path as well, one window at a time, as its tiles take
        it."""
        device = self._device
        if device is None or not self._info.state:
            super().warm_up(width, height, batch if device is None else 1)
        if device is None:
            return
        m = self._info.pad_multiple
        hp, wp = height + -height % m, width + -width % m
        fit = self._info.yuv420 and self._planes_fit(height, width)
        frame = device.upload(np.zeros((hp, wp, 3), np.uint8))
        if fit and planes_in is not None:  # the upload graph of its planes; windows take either alike
            half = np.zeros((hp // 2, wp // 2), np.uint8)
            device.upload_planes(np.zeros((hp, wp), np.uint8), half, half, planes_in)
        state = self.state_shapes(1, height, width)
        device.warm(frame, batch, device.zero_state(state) if state else None, colour if fit else None)

    @property
    def device_frames(self) -> DeviceFrames | None:
        """The window graph on frames kept on the device, where this backend has one."""
        return self._device

    def transfers(self) -> Transfers | None:
        """Bytes to and from the device of a model with frames kept there; None otherwise."""
        return None if self._device is None else self._device.transfers()

    def encode(self, frames: npt.NDArray[np.uint8]) -> list[FrameFeatures]:
        encoder = self._encoder
        if encoder is None or self._session is None:
            return super().encode(frames)
        _check_frames(frames, self._info.name, "encode")
        n, h, w, _ = frames.shape
        padded = self._pad_frames(frames)
        hp, wp = padded.shape[1:3]
        try:
            maps = encoder.run([f.name for f in self._info.features], {FRAME_INPUT: padded})
        except ModelUnavailableError:  # a remote model's outage: the pipeline passes frames through
            raise
        except Exception as err:
            self._raise_if_out_of_memory(err, f"encoding {n} frames of {w}x{h}")
            raise BackendError(
                f"onnxruntime failed encoding {n} frames of {w}x{h} with {self._info.name}: {err}"
            ) from err
        for spec, got in zip(self._info.features, maps, strict=True):
            expected = (n, spec.channels, math.ceil(hp / spec.scale), math.ceil(wp / spec.scale))
            if not isinstance(got, np.ndarray) or got.shape != expected:
                raise BackendError(
                    f"encoder of {self._info.name} returned {getattr(got, 'shape', got)} for feature "
                    f"{spec.name!r}; streamer.features promises {expected} for frames padded to {wp}x{hp}"
                )
        return [tuple(m[i] for m in maps) for i in range(n)]

    def fuse(
        self,
        windows: Sequence[Sequence[FrameFeatures]],
        targets: npt.NDArray[np.uint8],
        strength: Strengths = None,
    ) -> Pixels:
        session = self._session
        if self._encoder is None or session is None:
            return super().fuse(windows, targets, strength)
        _check_frames(targets, self._info.name, "fuse")
        t = self._info.t
        if len(windows) != targets.shape[0] or any(len(window) != t for window in windows):
            raise FrameError(
                f"model {self._info.name} fuses windows of T={t} frames' features, one per target frame; "
                f"got {[len(window) for window in windows]} for {targets.shape[0]} targets"
            )
        _, h, w, _ = targets.shape
        feeds: dict[str, npt.NDArray[np.generic]] = {
            TARGET_INPUT: self._pad_frames(targets),
            **self._strength(len(windows), strength),
        }
        for k, spec in enumerate(self._info.features):
            for slot in range(t):
                maps = [window[slot][k] for window in windows]
                feeds[f"{spec.name}_{slot}"] = maps[0][None] if len(maps) == 1 else np.stack(maps)
        try:
            (out,) = session.run([self._output], feeds)
        except ModelUnavailableError:  # a remote model's outage: the pipeline passes frames through
            raise
        except Exception as err:
            self._raise_if_out_of_memory(err, f"fusing {len(windows)} windows of {w}x{h}")
            raise BackendError(
                f"onnxruntime failed fusing {len(windows)} windows of {w}x{h} with {self._info.name}: "
                f"{err}; were the features encoded from frames of this size?"
            ) from err
        if out.shape[1:3] == (h, w):
            return cast(Pixels, out)
        return np.ascontiguousarray(out[:, :h, :w])

    def _pad_frames(self, frames: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        m = self._info.pad_multiple
        h, w = frames.shape[1:3]
        ph, pw = -h % m, -w % m
        if not ph and not pw:
            return frames
        return _pad(frames, ((0, 0), (0, ph), (0, pw), (0, 0)))

    def state_shapes(self, batch: int, height: int, width: int) -> list[tuple[int, ...]]:
        """The shape of each of a recurrent model's state tensors for ``batch`` streams of frames
        ``height`` x ``width`` (padded to the model's multiple); none for other models."""
        m = self._info.pad_multiple
        hp, wp = height + -height % m, width + -width % m
        return [
            (batch, s.channels, math.ceil(hp / s.scale), math.ceil(wp / s.scale)) for s in self._info.state
        ]

    def _zero_state(self, batch: int, height: int, width: int) -> State:
        return tuple(np.zeros(shape, np.float32) for shape in self.state_shapes(batch, height, width))

    def initial_state(self, batch: int, height: int, width: int) -> State:
        """With frames on the device, the state is there too: values only ``step`` reads."""
        if self._device is not None and self._info.state:
            return self._device.zero_state(self.state_shapes(batch, height, width))
        return self._zero_state(batch, height, width)

    def step(
        self, batch: npt.NDArray[np.uint8], state: State, strength: Strengths = None
    ) -> tuple[npt.NDArray[np.uint8], State]:
        self._check_batch(batch)
        b, _, _, h, w = batch.shape
        self._check_state(state, b, h, w)
        if not self._info.state:  # stateless, a streaming model included: ``infer``, as the port says
            return self.infer(batch, strength), state
        if self._device is not None:
            if b != 1:
                raise FrameError(
                    f"model {self._info.name} keeps each stream's state on the device: a batch of 1, got "
                    f"{b}; step several streams with step_streams, or set model.device_frames: false"
                )
            (rgb,), (next_state,) = self._device_steps(self._device, batch, [state], strength)
            assert isinstance(rgb, np.ndarray)  # no colour asked: RGB
            return rgb.transpose(2, 0, 1)[None], next_state
        return self._run(batch, state, strength)

    def step_streams(
        self,
        batch: npt.NDArray[np.uint8],
        states: Sequence[State],
        strength: Strengths = None,
        colour: Colour | None = None,
    ) -> tuple[list[Picture], list[State]]:
        """In one call: with the state on the device, each stream's state is its own row of the batched
        graph and stays there (and with ``model.yuv420``, each frame comes down as 4:2:0 planes in
        ``colour`` where given and the size allows); on the host, the states are joined along the batch
        axis and split after."""
        self._check_batch(batch)
        b, _, _, h, w = batch.shape
        self._check_states(states, f"a batch of {b}", b, h, w)
        if self._device is not None and self._info.state:
            return self._device_steps(self._device, batch, states, strength, self._planes_out(colour, h, w))
        if not self._info.state:
            out, made = self.infer(batch, strength), list(states)
        else:
            joined = tuple(np.concatenate(parts) for parts in zip(*states, strict=True))
            out, joint = self._run(batch, joined, strength)
            made = [tuple(m[r : r + 1] for m in joint) for r in range(b)]
        return [np.ascontiguousarray(o.transpose(1, 2, 0)) for o in out], made

    def step_windows(
        self, windows: Sequence[Hyperframe], states: Sequence[State], colour: Colour | None = None
    ) -> tuple[list[Picture], list[State]]:
        """With the state on the device, each window's frames go up as they come: a decoder's 4:2:0
        planes as they are where ``model.yuv420`` takes them (half the bytes of RGB, made RGB in the
        graph), so no step converts a frame on the host."""
        device = self._device
        if device is None or not self._info.state or not windows:
            return super().step_windows(windows, states, colour)
        first = windows[0].target_frame
        h, w = first.height, first.width
        for window in windows:
            frame = window.target_frame
            if window.t != self._info.t or (frame.height, frame.width) != (h, w):
                raise FrameError(
                    f"model {self._info.name} steps windows of T={self._info.t} frames of one size "
                    f"({w}x{h} here); got T={window.t} of {frame.width}x{frame.height}"
                )
        self._check_states(states, f"{len(windows)} windows", len(windows), h, w)
        uploaded = [[self._upload(device, frame) for frame in window.frames] for window in windows]
        strengths = [window.strength for window in windows]
        planes = self._planes_out(colour, h, w)
        return self._steps_on_device(device, uploaded, (h, w), states, strengths, planes)

    def _check_states(self, states: Sequence[State], given: str, rows: int, h: int, w: int) -> None:
        """One state per stream of ``given``, each a batch of one's for frames ``h`` x ``w``."""
        if len(states) != rows:
            raise FrameError(f"model {self._info.name}: {len(states)} states for {given}, one per stream")
        for state in states:
            self._check_state(state, 1, h, w)

    def _planes_out(self, colour: Colour | None, h: int, w: int) -> Colour | None:
        """``colour`` where this backend makes 4:2:0 planes and frames ``h`` x ``w`` allow them; else
        None (RGB)."""
        return colour if self._info.yuv420 and self._planes_fit(h, w) else None

    def _check_state(self, state: State, b: int, h: int, w: int) -> None:
        shapes = self.state_shapes(b, h, w)
        if len(state) != len(shapes):
            raise FrameError(
                f"model {self._info.name} carries {len(shapes)} state tensors, got {len(state)}; "
                "start from initial_state()"
            )
        for spec, given, shape in zip(self._info.state, state, shapes, strict=True):
            seen = _tensor_of(given)
            if seen != (shape, "float32"):
                raise FrameError(
                    f"state {spec.input!r} of model {self._info.name} is {seen[0]} {seen[1]}; frames "
                    f"of {h}x{w} need {shape} float32: start from initial_state({b}, {h}, {w})"
                )

    def _device_steps(
        self,
        device: DeviceFrames,
        batch: npt.NDArray[np.uint8],
        states: Sequence[State],
        strength: Strengths,
        colour: Colour | None = None,
    ) -> tuple[list[Picture], list[State]]:
        """Each stream's step with its state in device memory, in one call: the frames go up as RGB."""
        b, _, _, h, w = batch.shape
        if strength is not None and len(strength) != b:
            raise FrameError(f"model {self._info.name}: {len(strength)} strengths for a batch of {b}")
        windows = []
        for row in batch:
            frames = self._pad_frames(np.ascontiguousarray(row.transpose(0, 2, 3, 1)))
            windows.append([device.upload(frame) for frame in frames])
        return self._steps_on_device(device, windows, (h, w), states, strength, colour)

    def _steps_on_device(
        self,
        device: DeviceFrames,
        windows: Sequence[Sequence[ort.OrtValue]],
        size: tuple[int, int],
        states: Sequence[State],
        strength: Strengths,
        colour: Colour | None,
    ) -> tuple[list[Picture], list[State]]:
        """Each stream's step of its frames in device memory (frames ``size`` before padding), in one
        call: the frames come down (as 4:2:0 planes in ``colour`` where given), the next states stay (a
        host array given as a state goes up once)."""
        h, w = size
        kept = [tuple(device.to_device(v) if isinstance(v, np.ndarray) else v for v in s) for s in states]
        if colour is not None:
            planes, made = device.step_batch_yuv(windows, kept, strength, colour)
            return [self._yuv420(y, uv, h, w, colour) for y, uv in planes], list(made)
        outs, made = device.step_batch(windows, kept, strength)
        s = self._info.scale
        return [out[: h * s, : w * s] for out in outs], list(made)

    @property
    def session(self) -> ort.InferenceSession:
        """The model's onnxruntime session, for a caller that binds device memory itself (``bench gpu``)."""
        if self._session is None:
            raise BackendError(f"backend for {str(self.path)!r} is closed; create a new OnnxBackend")
        return cast(ort.InferenceSession, self._session)

    def model_input(self, batch: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8] | npt.NDArray[np.float32]:
        """The model's input for a (B, T, C, H, W) uint8 batch: padded to the model's multiple, in its
        layout, colour order and value range."""
        m = self._info.pad_multiple
        h, w = batch.shape[3:]
        ph, pw = -h % m, -w % m
        if ph or pw:
            batch = _pad(batch, ((0, 0), (0, 0), (0, 0), (0, ph), (0, pw)))
        view = to_model_layout(batch, self._info.layout, self._info.channel_order)
        if self._info.uint8_input:
            return np.ascontiguousarray(view)
        # One copy: the dtype conversion also makes the layout view contiguous; the scaling in place.
        scaled = view.astype(np.float32, order="C")
        scaled *= self._to_model
        if self._lo:
            scaled += self._lo
        return scaled

    def _run(
        self, batch: npt.NDArray[np.uint8], state: State, strength: Strengths = None
    ) -> tuple[npt.NDArray[np.uint8], State]:
        session = self._session
        if session is None:
            raise BackendError(f"backend for {str(self.path)!r} is closed; create a new OnnxBackend")
        info = self._info
        b, _, _, h, w = batch.shape
        m = info.pad_multiple
        ph, pw = -h % m, -w % m
        x = self.model_input(batch)
        feeds = {
            self._input: x,
            **{s.input: v for s, v in zip(info.state, state, strict=True)},
            **self._strength(b, strength),
        }
        names = [self._output, *(s.output for s in info.state)]
        try:
            y, *next_state = session.run(names, feeds)
        except ModelUnavailableError:  # a remote model's outage: the pipeline passes frames through
            raise
        except Exception as err:
            self._raise_if_out_of_memory(err, f"a batch of shape {x.shape}")
            raise BackendError(
                f"onnxruntime failed running {info.name} on a batch of shape {x.shape}: {err}"
            ) from err
        s = info.scale
        expected = (b, 3, (h + ph) * s, (w + pw) * s)
        if not isinstance(y, np.ndarray) or y.shape != expected:
            seen = y.shape if isinstance(y, np.ndarray) else type(y).__name__
            raise BackendError(
                f"model {info.name} returned {seen} for an input of {x.shape}; the runtime expects "
                f"(B, 3, H*scale, W*scale) = {expected} (scale {s}), the target frame at the input's size "
                "times streamer.scale (model.scale)"
            )
        out = from_model_channels(y[:, :, : h * s, : w * s], info.channel_order)
        if info.uint8_output:
            return np.ascontiguousarray(out), tuple(next_state)
        if self._lo:
            out -= self._lo
        out *= self._to_pixels
        np.clip(out, 0.0, 255.0, out=out)
        np.rint(out, out=out)
        return out.astype(np.uint8), tuple(next_state)

    def _raise_if_out_of_memory(self, err: Exception, what: str) -> None:
        """A call the device (or host) had no memory for fails alone: ModelUnavailableError, so the
        pipeline passes the frame through and this stream and the others go on; where memory frees up
        (another stream ends, a smaller batch) later calls succeed again."""
        if _OUT_OF_MEMORY.search(str(err)):
            starved = ModelUnavailableError(
                f"{self._info.provider} ran out of memory for {self._info.name} on {what}: the frame passes "
                "through; lower the stream's resolution, runtime.max_batch or the streams on this device "
                f"({str(err).strip().splitlines()[0][:200]})"
            )
            starved.batch_bound = True
            raise starved from err

    def end_profiling(self) -> dict[str, Path]:
        """The profile files of a backend made with ``profile``, by graph (``model``, and ``encoder`` for
        a streaming model); profiling stops."""
        sessions = {"model": self._session, "encoder": self._encoder}
        return {
            graph: Path(cast(ort.InferenceSession, s).end_profiling())
            for graph, s in sessions.items()
            if s is not None
        }

    def close(self) -> None:
        self._session = None
        self._encoder = None

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


def _tensor_of(value: npt.NDArray[Any] | ort.OrtValue) -> tuple[tuple[int, ...], str]:
    """The shape and element type of a host array or a device value."""
    if isinstance(value, np.ndarray):
        return value.shape, str(value.dtype)
    kind = value.data_type()
    return tuple(value.shape()), "float32" if kind == "tensor(float)" else kind


def _pad(batch: npt.NDArray[np.uint8], widths: tuple[tuple[int, int], ...]) -> npt.NDArray[np.uint8]:
    """Pads at the bottom and right; reflect keeps edges natural, edge covers tiny frames."""
    if all(after < size for (_, after), size in zip(widths, batch.shape, strict=True)):
        return np.pad(batch, widths, mode="reflect")
    return np.pad(batch, widths, mode="edge")


def _check_frames(frames: npt.NDArray[np.uint8], name: str, what: str) -> None:
    ok = isinstance(frames, np.ndarray) and frames.dtype == np.uint8 and frames.ndim == 4
    if not ok or frames.shape[0] < 1 or frames.shape[3] != 3 or 0 in frames.shape:
        raise FrameError(
            f"{what} of model {name} takes frames shaped (N>=1, H, W, 3) uint8 RGB; got shape "
            f"{getattr(frames, 'shape', None)} dtype {getattr(frames, 'dtype', None)}"
        )


def _load(
    path: Path,
    options: ort.SessionOptions,
    providers: list[str],
    provider_options: Mapping[str, Mapping[str, str]],
) -> ort.InferenceSession:
    settings = [dict(provider_options.get(p, {})) for p in providers]
    try:
        session = ort.InferenceSession(
            str(path), sess_options=options, providers=providers, provider_options=settings
        )
    except Exception as err:
        raise ModelError(f"onnxruntime cannot load model {str(path)!r}: {err}") from err
    fallback = provider_fallback(providers, session.get_providers())
    if fallback is not None and fallback not in _fallbacks_said:
        _fallbacks_said.add(fallback)
        logger.warning("%s", fallback)
    return session


_fallbacks_said: set[str] = set()
"""Fallback lines already logged: a process says each once, not once per graph or stream."""


def provider_fallback(requested: Sequence[str], running: Sequence[str]) -> str | None:
    """The line to log when onnxruntime dropped providers it lists (a GPU build on a machine without
    the NVIDIA driver or device, or without the CUDA, cuDNN or TensorRT libraries it loads at run time):
    it falls back silently apart from its own error text, and the stream runs many times slower."""
    dropped = [p for p in requested if p not in running and p != CPU_PROVIDER]
    if not dropped:
        return None
    return (
        f"{', '.join(dropped)} listed by this onnxruntime build but did not start (no NVIDIA driver or GPU "
        f"visible, or its CUDA/cuDNN/TensorRT libraries missing: onnxruntime's own error is above); "
        f"running on {', '.join(running) or 'nothing'}. Check nvidia-smi, or set model.providers: "
        f"[{CPU_PROVIDER}] to silence this"
    )
