"""A model's variants and calls as the GPU bench and the GPU reference time them: fp16 weights, its
normalisation folded in (uint8 in and out), and a call on a window already in device memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.backend.base import STRENGTH, device_of

if TYPE_CHECKING:
    from streamer.backend.onnx import OnnxBackend

__all__ = ["fold_uint8_io", "half_precision", "on_device"]


def half_precision(model: Path, folder: Path) -> Path:
    """``model`` with fp16 weights and activations, its float32 inputs and outputs and metadata kept."""
    import onnx  # only fp16 needs it
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from streamer.backend.fold import fold_constants

    half = convert_float_to_float16(fold_constants(onnx.load(str(model))), keep_io_types=True)
    path = folder / f"{model.stem}.fp16.onnx"
    onnx.save(half, str(path))
    return path


def on_device(backend: OnnxBackend, window: npt.NDArray[np.uint8]) -> Callable[[], None]:
    """A call of ``backend``'s model on ``window`` already in device memory, its output left there
    (IO binding): the model's own speed, nothing crossing PCIe."""
    info, session = backend.info, backend.session
    where = device_of(info.provider)
    feed = backend.model_input(window)
    x = ort.OrtValue.ortvalue_from_numpy(feed, where, 0)
    # A preallocated output keeps every address fixed, as CUDA graphs need.
    shape = [window.shape[0], 3, feed.shape[-2] * info.scale, feed.shape[-1] * info.scale]
    y = ort.OrtValue.ortvalue_from_shape_and_type(
        shape, np.uint8 if info.uint8_output else np.float32, where, 0
    )
    binding = session.io_binding()
    binding.bind_ortvalue_input(session.get_inputs()[0].name, x)
    binding.bind_ortvalue_output(session.get_outputs()[0].name, y)
    b, _, _, h, w = window.shape
    for spec, zero in zip(info.state, backend.initial_state(b, h, w), strict=True):
        # a recurrent model's state stays on the device both ways, as on its frames path
        given = ort.OrtValue.ortvalue_from_numpy(zero, where, 0) if isinstance(zero, np.ndarray) else zero
        binding.bind_ortvalue_input(spec.input, given)
        binding.bind_output(spec.output, where, 0)
    if info.strength:
        binding.bind_cpu_input(STRENGTH, np.full((b, 1), info.strength_default, np.float32))

    def once() -> None:
        session.run_with_iobinding(binding)
        # a replayed CUDA graph returns before the GPU is done: wait for it, or the time is a lie
        binding.synchronize_outputs()

    return once


def fold_uint8_io(model: Path, folder: Path, value_range: tuple[float, float]) -> Path:
    """``model`` with its normalisation folded in (:func:`streamer.backend.fold.fold_uint8_io`), written to
    ``folder``."""
    import onnx  # only the uint8 variant needs it

    from streamer.backend.fold import fold_uint8_io as fold_graph

    path = folder / f"{model.stem}.uint8.onnx"
    onnx.save(fold_graph(onnx.load(str(model)), value_range), str(path))
    return path
