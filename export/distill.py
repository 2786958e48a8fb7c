"""Training a cheaper tier from a trained one: a teacher's outputs as a second target, and a warm start.

A small model trained only against clean frames learns slowly what a larger trained model already
computes; two things help it within a CPU's training budget. ``OnnxTeacher`` runs an exported window
model (onnxruntime, no gradients) on each training batch, so the student also fits the teacher's output
(knowledge distillation). ``warm_start`` copies the leading slice of every same-named weight from the
teacher's weights into the student (its first channels, its first blocks), so the student starts from
the teacher's filters rather than from noise.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

from streamer.contract import Key
from streamer.errors import ConfigError, ModelError

__all__ = ["OnnxTeacher", "init_weights", "warm_start"]


class OnnxTeacher:
    """An exported window model taking float (B, T, 3, H, W) in [0, 1] (NTCHW), run on training batches."""

    def __init__(self, path: str | Path, t: int, threads: int | None = None) -> None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(
                f"teacher {str(file)!r} does not exist; pass an ONNX file written by streamer export"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        try:
            self._session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
        except Exception as err:
            raise ModelError(f"teacher {str(file)!r} is not a readable ONNX model: {err}") from err
        inputs = self._session.get_inputs()
        meta = self._session.get_modelmeta().custom_metadata_map
        shape = inputs[0].shape if len(inputs) == 1 else []
        if (
            len(shape) != 5
            or inputs[0].type != "tensor(float)"
            or meta.get(Key.LAYOUT, "NTCHW") != "NTCHW"
            or shape[1] != t
            or shape[2] != 3
        ):
            raise ConfigError(
                f"teacher {str(file)!r} must be a window model with one float NTCHW input of T={t} RGB "
                f"frames (like conv3d_t5.onnx); its inputs are "
                f"{[(i.name, i.type, i.shape) for i in inputs]}"
            )
        self._input = inputs[0].name

    def __call__(self, window: torch.Tensor) -> torch.Tensor:
        """(B, T, 3, H, W) -> the teacher's (B, 3, H, W) output."""
        frames = window.detach().numpy().astype(np.float32, copy=False)
        (out,) = self._session.run(None, {self._input: frames})
        return torch.from_numpy(np.asarray(out))


def init_weights(path: str | Path, student: nn.Module) -> dict[str, torch.Tensor]:
    """The weights to warm-start ``student`` from: a training checkpoint's, or an exported model's
    (rebuilt by ``export.recover``; a Conv3d is split for streaming when the student is a streaming
    model)."""
    from export.models.streaming import StreamingEnhancer
    from export.recover import weights_of

    return weights_of(Path(path), streaming=isinstance(student, StreamingEnhancer))


def _separable(source: dict[str, torch.Tensor], student: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """For a student layer ``L`` that is a k x k depthwise convolution (``L.0``) then a 1x1 (``L.1``)
    where the source has one dense k x k ``L``: the best rank-1 factors of each input map's filters
    (a depthwise filter and its 1x1 weights, by SVD), the dense bias on the 1x1."""
    out: dict[str, torch.Tensor] = {}
    for name, dense in source.items():
        if not name.endswith(".weight") or dense.dim() != 4:
            continue
        layer = name.removesuffix(".weight")
        depthwise, pointwise = student.get(f"{layer}.0.weight"), student.get(f"{layer}.1.weight")
        if depthwise is None or pointwise is None or depthwise.shape[1] != 1:
            continue
        outputs, inputs, kh, kw = dense.shape
        if depthwise.shape != (inputs, 1, kh, kw) or pointwise.shape != (outputs, inputs, 1, 1):
            continue
        u, s, vh = torch.linalg.svd(dense.permute(1, 0, 2, 3).reshape(inputs, outputs, kh * kw))
        out[f"{layer}.0.weight"] = vh[:, 0].reshape(inputs, 1, kh, kw)
        out[f"{layer}.1.weight"] = (u[:, :, 0] * s[:, :1]).T.reshape(outputs, inputs, 1, 1)
        out[f"{layer}.0.bias"] = torch.zeros(inputs)
        if f"{layer}.bias" in source:
            out[f"{layer}.1.bias"] = source[f"{layer}.bias"]
    return out


def warm_start(student: nn.Module, source: dict[str, torch.Tensor]) -> list[str]:
    """Copies into each student tensor the leading slice of the same-named source tensor when the source
    is at least as large on every axis; returns the names copied. Leading output channels of a layer
    feeding depth-to-space are the first sub-pixel groups, so the slice stays consistent through it. A
    dense layer the student makes separable starts from its rank-1 factors (``_separable``)."""
    copied = []
    source = {**_separable(source, student.state_dict()), **source}
    with torch.no_grad():
        for name, tensor in student.state_dict().items():
            given = source.get(name)
            if given is None or given.dim() != tensor.dim():
                continue
            if any(s > g for s, g in zip(tensor.shape, given.shape, strict=True)):
                continue
            tensor.copy_(given[tuple(slice(0, s) for s in tensor.shape)])
            copied.append(name)
    return copied
