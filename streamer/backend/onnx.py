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

The backend reads the contract and chooses where frames go once, when it is made; the parts it runs
live beside it: ``streamer.backend.providers`` (which providers, the sessions' options),
``streamer.backend.tensors`` (on the host, a batch made into the model's input and its output into
frames again), ``streamer.backend.streaming`` (a streaming model's encoder and fusion calls) and,
where a model's frames stay on the device, ``streamer.backend.device_windows`` on
``streamer.backend.device_frames``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.backend.base import (
    STRENGTH,
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
from streamer.backend.device_frames import DeviceFrames, Transfers
from streamer.backend.device_graphs import graph_tools_missing
from streamer.backend.device_windows import DeviceWindows
from streamer.backend.providers import (
    PROVIDER_PREFERENCE,
    SessionSettings,
    provider_fallback,
    raise_if_out_of_memory,
    resolve_providers,
)
from streamer.backend.streaming import encode, fuse
from streamer.backend.tensors import (
    check_batch,
    check_state,
    check_states,
    model_input,
    model_output,
    state_shapes,
    strength_feed,
    zero_state,
)
from streamer.contract import (
    CARD_BYTES_KEY,
    TARGET_INPUT,
    Key,
    Session,
    card_bytes_per_pixel,
    card_reach,
    encoder_path,
    read_contract,
    read_streaming_contract,
)
from streamer.core.features import FeatureCache
from streamer.errors import BackendError, ConfigError, ModelError, ModelUnavailableError
from streamer.frame import Colour, Hyperframe, Picture, Pixels

__all__ = [
    "CARD_BYTES_KEY",
    "PROVIDER_PREFERENCE",
    "STRENGTH",
    "OnnxBackend",
    "provider_fallback",
    "resolve_providers",
]

logger = logging.getLogger(__name__)

_PROBE_SIDE = 32
"""The probe that tells a model's scale runs it on frames about this small (a multiple of its padding;
one wider than tall, so a transposed output does not pass)."""


class OnnxBackend(Backend):
    """Runs one ONNX model with onnxruntime; one instance may serve several streams.

    Thread-safe: ``infer`` keeps no state between calls and onnxruntime's ``InferenceSession.run`` may
    be called from several threads at once, so a pool of workers can share one backend (and one copy
    of the weights on the device).
    """

    _session: Session | None
    _encoder: Session | None
    _device: DeviceWindows | None
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
        _check_arguments(self.path, threads, workers)
        self.workers = workers
        settings = SessionSettings(
            resolve_providers(providers), provider_options or {}, threads, spin, profile
        )
        session = _open(self.path, "model", settings)

        def open_encoder(name: str) -> tuple[Session, Path]:
            path = encoder_path(self.path, name)
            return _open(path, "encoder", settings), path

        self._adopt(session, open_encoder, declared)
        self._info = dataclasses.replace(
            self._info,
            activation_bytes_per_pixel=card_bytes_per_pixel(self.path),
            reach_px=card_reach(self.path),
        )
        if device_of(self._info.provider) == "cuda":
            set_gpu_wait(gpu_wait, settings.device_id(self._info.provider))
        self._device = self._device_windows(device_frames, yuv420, settings)
        logger.info(
            "model %s runs on %s (asked for %s)",
            self._info.name,
            self._info.provider,
            ", ".join(settings.providers),
        )

    def _device_windows(
        self, device_frames: bool | None, yuv420: bool | None, settings: SessionSettings
    ) -> DeviceWindows | None:
        """The path of frames kept on the device where ``device_frames`` asks for it (None: on a GPU
        provider) and the model and this image allow it, its frames crossing as 4:2:0 planes where
        ``yuv420`` asks (None: on a GPU provider); None: the frames stay on the host."""
        frames = self._device_frames(device_frames, settings)
        if yuv420 and frames is None:
            raise ConfigError(
                f"model.yuv420 needs the frames on the device; model {self._info.name} runs without "
                "model.device_frames: set it, or remove model.yuv420"
            )
        if frames is None:
            return None
        self._info = dataclasses.replace(self._info, device_frames=True)
        if yuv420 if yuv420 is not None else device_of(self._info.provider) != "cpu":
            self._info = dataclasses.replace(self._info, yuv420=True)
        return DeviceWindows(frames, self._info)

    def _device_frames(self, asked: bool | None, settings: SessionSettings) -> DeviceFrames | None:
        """The model's graphs on frames kept on the device, where ``asked`` (None: on a GPU provider);
        a streaming model, or an image without the onnx package, keeps them on the host: an error where
        asked for, else a warning for the missing package."""
        wanted = asked if asked is not None else device_of(self._info.provider) != "cpu"
        if not wanted:
            return None
        if self._info.streaming:
            if asked:
                raise ConfigError(
                    f"model {self._info.name} is a streaming model: model.device_frames is for window and "
                    "recurrent models; remove it"
                )
            return None
        if graph_tools_missing():
            if asked:
                raise ConfigError(
                    "model.device_frames needs the onnx package to make the window graph; install it "
                    "(pip install onnx) or remove the setting"
                )
            logger.warning(
                "model %s: frames stay on the host (windows uploaded whole): keeping them on the device "
                "needs the onnx package, which is not installed",
                self._info.name,
            )
            return None
        return DeviceFrames(
            self.path,
            self._info,
            settings.options("device"),
            settings.providers,
            settings.provider_options,
            self._raise_if_out_of_memory,
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
        check_batch(self._info, batch)
        b, t, c, h, w = batch.shape
        if self._info.streaming:
            frames = np.ascontiguousarray(batch.transpose(0, 1, 3, 4, 2)).reshape(b * t, h, w, c)
            features = self.encode(frames)
            windows = [features[i * t : (i + 1) * t] for i in range(b)]
            targets = frames[self._info.output_position.slot(t) :: t]
            return self.fuse(windows, targets, strength).transpose(0, 3, 1, 2)
        return self._run(batch, zero_state(self._info, b, h, w), strength)[0]

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
            **strength_feed(info, 1, None),
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
        if self._device is None or tiles is not None:
            return super().enhance_cached(window, run, cache, crop, guard, tiles)
        return self._device.enhance(window, run, cache, crop, guard)

    def enhance_cached_batch(self, windows: Sequence[CachedWindow]) -> list[Picture]:
        """With frames on the device, windows of several streams (of one size) in one call: each
        stream's new frames uploaded into its own cache, the windows made and run together, their frames
        back as 4:2:0 planes where ``model.yuv420`` is on and the windows allow."""
        if self._device is None:
            return super().enhance_cached_batch(windows)
        return self._device.enhance_batch(windows)

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
        if device is not None:
            device.warm_up(width, height, batch, colour, planes_in)

    @property
    def device_frames(self) -> DeviceFrames | None:
        """The window graph on frames kept on the device, where this backend has one."""
        return None if self._device is None else self._device.frames

    def transfers(self) -> Transfers | None:
        """Bytes to and from the device of a model with frames kept there; None otherwise."""
        return None if self._device is None else self._device.frames.transfers()

    def encode(self, frames: npt.NDArray[np.uint8]) -> list[FrameFeatures]:
        encoder = self._encoder
        if encoder is None or self._session is None:
            return super().encode(frames)
        return encode(encoder, self._info, frames, self._raise_if_out_of_memory)

    def fuse(
        self,
        windows: Sequence[Sequence[FrameFeatures]],
        targets: npt.NDArray[np.uint8],
        strength: Strengths = None,
    ) -> Pixels:
        session = self._session
        if self._encoder is None or session is None:
            return super().fuse(windows, targets, strength)
        return fuse(
            session, self._output, self._info, windows, targets, strength, self._raise_if_out_of_memory
        )

    def state_shapes(self, batch: int, height: int, width: int) -> list[tuple[int, ...]]:
        """The shape of each of a recurrent model's state tensors for ``batch`` streams of frames
        ``height`` x ``width`` (padded to the model's multiple); none for other models."""
        return state_shapes(self._info, batch, height, width)

    def initial_state(self, batch: int, height: int, width: int) -> State:
        """With frames on the device, the state is there too: values only ``step`` reads."""
        if self._device is not None and self._info.state:
            return self._device.initial_state(batch, height, width)
        return zero_state(self._info, batch, height, width)

    def step(
        self, batch: npt.NDArray[np.uint8], state: State, strength: Strengths = None
    ) -> tuple[npt.NDArray[np.uint8], State]:
        check_batch(self._info, batch)
        b, _, _, h, w = batch.shape
        check_state(self._info, state, b, h, w)
        if not self._info.state:  # stateless, a streaming model included: ``infer``, as the port says
            return self.infer(batch, strength), state
        if self._device is not None:
            return self._device.step(batch, state, strength)
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
        check_batch(self._info, batch)
        b, _, _, h, w = batch.shape
        check_states(self._info, states, f"a batch of {b}", b, h, w)
        if self._device is not None and self._info.state:
            return self._device.steps(batch, states, strength, self._device.planes_out(colour, h, w))
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
        if self._device is None or not self._info.state or not windows:
            return super().step_windows(windows, states, colour)
        return self._device.step_windows(windows, states, colour)

    @property
    def session(self) -> ort.InferenceSession:
        """The model's onnxruntime session, for a caller that binds device memory itself (``bench gpu``)."""
        if self._session is None:
            raise BackendError(f"backend for {str(self.path)!r} is closed; create a new OnnxBackend")
        return cast(ort.InferenceSession, self._session)

    def model_input(self, batch: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8] | npt.NDArray[np.float32]:
        """The model's input for a (B, T, C, H, W) uint8 batch: padded to the model's multiple, in its
        layout, colour order and value range."""
        return model_input(batch, self._info)

    def _run(
        self, batch: npt.NDArray[np.uint8], state: State, strength: Strengths = None
    ) -> tuple[npt.NDArray[np.uint8], State]:
        session = self._session
        if session is None:
            raise BackendError(f"backend for {str(self.path)!r} is closed; create a new OnnxBackend")
        info = self._info
        x = self.model_input(batch)
        feeds = {
            self._input: x,
            **{s.input: v for s, v in zip(info.state, state, strict=True)},
            **strength_feed(info, batch.shape[0], strength),
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
        return model_output(y, info, batch.shape, x.shape), tuple(next_state)

    def _raise_if_out_of_memory(self, err: Exception, what: str) -> None:
        """ModelUnavailableError where ``err`` says the device (or host) had no memory for ``what``, so
        that call fails alone (:func:`~streamer.backend.providers.raise_if_out_of_memory`)."""
        raise_if_out_of_memory(err, self._info.provider, self._info.name, what)

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


def _check_arguments(path: Path, threads: int | None, workers: int) -> None:
    """The model file exists, and the thread and worker counts are ones a backend can run with."""
    if not path.is_file():
        raise ModelError(
            f"model file {str(path)!r} does not exist or is not a file; pass the path of an "
            f".onnx file (streamer.assets.DEFAULT_MODEL is the shipped default)"
        )
    if threads is not None and threads < 1:
        raise ConfigError(
            f"backend threads must be at least 1, or null to let onnxruntime decide; got {threads}"
        )
    if workers < 1:
        raise ConfigError(f"backend workers must be at least 1; got {workers}")


def _open(path: Path, graph: str, settings: SessionSettings) -> ort.InferenceSession:
    """The session of the graph named ``graph`` in the file ``path``, opened as ``settings`` say."""
    return _load(path, settings.options(graph), settings.providers, settings.provider_options)


def _load(
    path: Path,
    options: ort.SessionOptions,
    providers: list[str],
    provider_options: Mapping[str, Mapping[str, str]],
) -> ort.InferenceSession:
    """The session of the model file ``path``; a provider onnxruntime lists but could not start is
    said once per process (:func:`~streamer.backend.providers.provider_fallback`)."""
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
