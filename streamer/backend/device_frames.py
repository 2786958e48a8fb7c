"""A window model run on frames that stay on the device: each frame uploaded once, windows made there.

Built for a GPU: the host path hands onnxruntime a whole T-frame window for every output frame (at 720p
and T=5, 13.8 MB of uint8 up per frame, 55 MB as float32), although each frame belongs to T windows.
Here each frame goes up once, as its own uint8 bytes (``upload``), into device memory that the
stream's :class:`~streamer.core.features.FeatureCache` keeps for the T windows it belongs to, as a
streaming model's feature maps are kept; one graph takes the window's T frames, arranges them as the
model wants (``streamer.layout.to_model_nodes``, the layout's graph form), scales them, runs the model
and hands back the uint8 frame (``run``), through IO binding, so nothing but one frame comes down.

The same graph runs on the CPU provider, where device memory is host memory: CI tests this path
against the host path (``OnnxBackend(device_frames=True)``). Making the graph needs the onnx package
(in the CUDA image; the CPU image, which has no use for this path, leaves it out), imported only here.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.backend.base import ModelInfo
from streamer.errors import BackendError, ModelError
from streamer.layout import from_model_nodes, to_model_nodes

if TYPE_CHECKING:
    import onnx

__all__ = ["DeviceFrames", "Transfers", "device_of", "graph_tools_missing", "window_graph"]

_PIXELS = "streamer.pixels"
_FRAME = "streamer.frame_{}"


def device_of(provider: str) -> str:
    """Where a provider's tensors live, as OrtValue names it."""
    return "cuda" if provider in ("CUDAExecutionProvider", "TensorrtExecutionProvider") else "cpu"


def graph_tools_missing() -> bool:
    """Whether the onnx package, which makes the window graph, is absent (the CPU image)."""
    return importlib.util.find_spec("onnx") is None


def window_graph(model: onnx.ModelProto, info: ModelInfo) -> onnx.ModelProto:
    """``model`` taking its window as T frames (``streamer.frame_0`` ...), each (1, H, W, 3) uint8
    RGB, and giving the (1, H*scale, W*scale, 3) uint8 RGB frame ``streamer.pixels``; normalisation
    folded in where the model takes floats. Changed in place and returned."""
    from onnx import TensorProto, helper

    from streamer.fold import fold_uint8_io

    graph = model.graph
    if info.uint8_input != info.uint8_output:
        raise ModelError(
            f"model {info.name} takes {'uint8' if info.uint8_input else 'float'} and gives "
            f"{'uint8' if info.uint8_output else 'float'}: frames kept on the device need both alike"
        )
    if not info.uint8_input:
        fold_uint8_io(model, info.value_range)
    window, made = graph.input[0], graph.output[0]
    frames = [_FRAME.format(k) for k in range(info.t)]
    head, head_consts = to_model_nodes(frames, info.layout, info.channel_order, window.name)
    tail, tail_consts = from_model_nodes(made.name, info.channel_order, _PIXELS)
    nodes = [*head, *graph.node, *tail]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend([*head_consts, *tail_consts])
    graph.input.remove(window)
    for k, name in enumerate(frames):
        graph.input.insert(k, helper.make_tensor_value_info(name, TensorProto.UINT8, [1, "H", "W", 3]))
    graph.output.remove(made)
    graph.output.insert(0, helper.make_tensor_value_info(_PIXELS, TensorProto.UINT8, [1, "OH", "OW", 3]))
    return model


@dataclass(frozen=True, slots=True)
class Transfers:
    """Bytes between host and device since the backend started, and the frames they carried."""

    uploads: int
    uploaded_bytes: int
    downloads: int
    downloaded_bytes: int


class DeviceFrames:
    """The window graph of one model in its own session, and the frames' trips to and from it."""

    def __init__(
        self,
        path: Path,
        info: ModelInfo,
        options: ort.SessionOptions,
        providers: list[str],
        provider_options: Mapping[str, Mapping[str, str]],
    ) -> None:
        import onnx

        try:
            model = onnx.load(str(path))
        except (OSError, ValueError) as err:
            raise ModelError(f"cannot read {str(path)!r} to keep its frames on the device: {err}") from err
        graph = window_graph(model, info)
        settings = [dict(provider_options.get(p, {})) for p in providers]
        try:
            self._session = ort.InferenceSession(
                graph.SerializeToString(),
                sess_options=options,
                providers=providers,
                provider_options=settings,
            )
        except Exception as err:
            raise ModelError(
                f"onnxruntime cannot load {info.name} with its window made on the device: {err}; set "
                "model.device_frames: false to run it on host-made windows"
            ) from err
        self._info = info
        self.device = device_of(self._session.get_providers()[0])
        self._lock = threading.Lock()
        self._uploads = self._uploaded = self._downloads = self._downloaded = 0

    def transfers(self) -> Transfers:
        with self._lock:
            return Transfers(self._uploads, self._uploaded, self._downloads, self._downloaded)

    def upload(self, frame: npt.NDArray[np.uint8]) -> ort.OrtValue:
        """One (H, W, 3) uint8 frame, padded to the model's multiple, copied into device memory."""
        value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(frame[None]), self.device, 0)
        with self._lock:
            self._uploads += 1
            self._uploaded += frame.nbytes
        return value

    def run(self, frames: Sequence[ort.OrtValue]) -> npt.NDArray[np.uint8]:
        """The enhanced (H*scale, W*scale, 3) frame of the window of ``frames``, in slot order."""
        binding = self._session.io_binding()
        for k, value in enumerate(frames):
            binding.bind_ortvalue_input(_FRAME.format(k), value)
        binding.bind_output(_PIXELS, "cpu")
        try:
            self._session.run_with_iobinding(binding)
        except Exception as err:
            shape = frames[0].shape() if frames else None
            raise BackendError(
                f"onnxruntime failed running {self._info.name} on a window of frames {shape} kept on the "
                f"device: {err}"
            ) from err
        (out,) = binding.copy_outputs_to_cpu()
        pixels: npt.NDArray[np.uint8] = out[0]
        with self._lock:
            self._downloads += 1
            self._downloaded += pixels.nbytes
        return pixels
