"""What a user receives: a camera's stream through streamer's own source, frames path, model and file
sink, decoded again, for the quality bench's delivered figures and export's blend calibration.

A model's gain on RGB frames before the trip back to 4:2:0 and the output's encoder is not what anyone
watches; on compressed camera video those two cost as much as a model gains. Here a stream file (what a camera
sends) goes through :class:`~streamer.engine.pipeline.Pipeline` from a :class:`~streamer.sources.FileSource`
to a :class:`~streamer.sinks.FileSink` at the settings ``streamer run`` uses by default (window defaults, gate
off), and the recording is decoded as a player reads it. Beside it stand the path's own costs: an identity
model through the same pipeline (:func:`identity_model`), and the decoded stream written by the same sink with
no model at all (:func:`reencoded`), the output encoder's own cost.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import av
import numpy as np
import onnx
from onnx import TensorProto, helper

from streamer.app import build_windower
from streamer.backend.base import Backend
from streamer.config import WindowConfig
from streamer.contract import Key
from streamer.core.blend import Blend
from streamer.engine.pipeline import Pipeline
from streamer.errors import EndOfStream
from streamer.measure.metrics import Clip
from streamer.media.colour import to_rgb
from streamer.sinks import FileSink
from streamer.sources import FileSource

__all__ = ["decoded", "delivered", "identity_model", "reencoded"]


def identity_model(path: Path) -> Path:
    """A model that changes nothing (T=1, uint8 in and out, one ``Identity`` node), written to ``path``:
    through the pipeline it shows what the frames path and the output encoder cost apart from any model."""
    image = helper.make_tensor_value_info("image", TensorProto.UINT8, ["B", 3, "H", "W"])
    out = helper.make_tensor_value_info("out", TensorProto.UINT8, ["B", 3, "H", "W"])
    graph = helper.make_graph([helper.make_node("Identity", ["image"], ["out"])], "identity", [image], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    props = {Key.NAME: "identity", Key.T: "1", Key.LAYOUT: "NCHW"}
    helper.set_model_props(model, props | {Key.OUTPUT_POSITION: "last"})
    onnx.save(model, path)
    return path


def _sink(out: Path, crf: int | None) -> FileSink:
    """The file output at ``streamer run``'s defaults, or at constant quality ``crf``."""
    return FileSink(out) if crf is None else FileSink(out, crf=crf)


def delivered(
    stream: Path, backend: Backend, out: Path, crf: int | None = None, blend: Blend | None = None
) -> Clip:
    """``stream`` enhanced file to file by ``backend`` in a pipeline as ``streamer run`` builds it (the
    default window settings for the model, no gate, no budget, the model's own blend unless ``blend``),
    written at the file output's default quality (or ``crf``) to ``out``, and decoded again."""
    info = backend.info
    windower = build_windower(WindowConfig(), info.t, info.output_position)
    pipeline = Pipeline(FileSource(stream), _sink(out, crf), backend, windower, blend=blend)
    asyncio.run(pipeline.run())
    return decoded(out)


def reencoded(stream: Path, out: Path, crf: int | None = None) -> Clip:
    """``stream``'s decoded frames (its 4:2:0 planes) written by the file output as they are, at its
    default quality (or ``crf``), and decoded again: what the output's encoder alone costs."""

    async def copy() -> None:
        source, sink = FileSource(stream), _sink(out, crf)
        try:
            await sink.open(await source.open())
            while True:
                try:
                    await sink.send(await source.recv())
                except EndOfStream:
                    break
        finally:
            await source.aclose()
            await sink.aclose()

    asyncio.run(copy())
    return decoded(out)


def decoded(path: Path) -> Clip:
    """A video file's frames as (N, H, W, 3) RGB, read with their own matrix and range as a player
    reads them."""
    with av.open(str(path)) as container:
        frames = [to_rgb(frame) for frame in container.decode(video=0)]
    return np.stack(frames)
