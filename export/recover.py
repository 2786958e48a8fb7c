"""Rebuilds a model from its exported ONNX file (``python -m export.recover MODEL --out W.pt``).

A shipped model whose training checkpoint was not kept can still be re-exported (as a streaming
model, in INT8, in a newer graph form) or fine-tuned (``streamer train --init MODEL.onnx``).
A ``Conv3dEnhancer``'s graph holds every weight, most under their PyTorch names; the embedding and the
Conv3d were reshaped at export and are read back from the Einsum that composes them into the entry's
one convolution (from the first two convolutions of files exported before that), and ``up`` from the
transposed convolution it runs as (files exported before that keep it by name). A
``StreamingEnhancer``'s two graphs hold every weight under its name; its constructor's arguments are in
the fusion graph's ``streamer.architecture`` metadata, or in the model card beside files exported
before that was written. A ``ConvLSTMEnhancer``'s graph holds most weights by name; the tensors its
forward reshapes (the embeddings with their centring folded in, the fusion, ``up``, and ``head`` and
``blend`` run as one convolution) are read back from the nodes that use them, its arguments from the
model card beside it. The result is checked against the file with onnxruntime before it is used, so
a graph of another shape is refused, not half-loaded.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

from export.checkpoint import load_checkpoint
from export.models.conv3d import Conv3dEnhancer
from export.models.convlstm import ConvLSTMEnhancer
from export.models.streaming import StreamingEnhancer
from export.objective import zero_states
from streamer.contract import STRENGTH, Key
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError, StreamerError

__all__ = [
    "PARITY_TOLERANCE",
    "conv3d_from_onnx",
    "convlstm_from_onnx",
    "main",
    "rebuild",
    "streaming_from_onnx",
    "weights_of",
]

PARITY_TOLERANCE = 1e-4
"""Largest |PyTorch - onnxruntime| accepted for the rebuilt module, on frames in [0, 1]."""

_BLOCK = re.compile(r"(body|fine)\.(\d+)\.conv1\.weight")


def conv3d_from_onnx(path: Path) -> Conv3dEnhancer:
    """The ``Conv3dEnhancer`` whose export is ``path``; raises ModelError if the graph is not one."""
    return _conv3d(path, _load(path))


def _conv3d(path: Path, graph: onnx.ModelProto) -> Conv3dEnhancer:
    meta = {p.key: p.value for p in graph.metadata_props}
    weights = _initializers(graph)
    try:
        t = int(meta[Key.T])
        position = OutputPosition(meta[Key.OUTPUT_POSITION])
        entry, fuse5 = _entry(graph, weights, t)
        found = [m.group(1) for name in weights if (m := _BLOCK.fullmatch(name))]
        module = Conv3dEnhancer(
            t=t,
            position=position,
            embed=entry.shape[0],
            features=fuse5.shape[0],
            channels=weights["down.weight"].shape[0],
            blocks=found.count("body"),
            strength=any(i.name == STRENGTH for i in graph.graph.input),
            fine=found.count("fine"),
        )
        state = {k: torch.from_numpy(v.copy()) for k, v in weights.items() if k in module.state_dict()}
        if "up.weight" not in state:  # exported since ``up`` runs as a transposed convolution
            state |= _up_from_transposed(weights, graph, module.features)
        state["embed.weight"] = torch.from_numpy(entry.reshape(entry.shape[0], 12, 1, 1, 1).copy())
        state["fuse.weight"] = torch.from_numpy(fuse5.transpose(0, 2, 1, 3, 4).copy())
        module.load_state_dict(state, strict=True)
    except (KeyError, IndexError, ValueError, RuntimeError) as err:
        raise ModelError(
            f"{str(path)!r} is not an exported Conv3dEnhancer ({type(err).__name__}: {err}); only graphs "
            "written by streamer export --arch conv3d can be rebuilt"
        ) from err
    module.eval()
    _check(module, path)
    return module


def _entry(graph: onnx.ModelProto, weights: dict[str, np.ndarray], t: int) -> tuple[np.ndarray, np.ndarray]:
    """The embedding's (E, 3, 2, 2) kernel and the fusion's (F, T, E, 3, 3) one. Since the entry runs
    as one convolution (``Conv3dEnhancer.entry``) the graph composes them in an Einsum of the two, which
    onnxruntime folds at load; files exported before that apply them as its first two convolutions."""
    kernels = [n for n in graph.graph.node if n.op_type == "Einsum" and all(i in weights for i in n.input)]
    if kernels:  # the other Einsum composes the fusion with the embedding's bias, computed in the graph
        fuse5, entry = (weights[name] for name in kernels[0].input)
        return entry, fuse5
    convs = [n for n in graph.graph.node if n.op_type == "Conv"]
    entry, fuse = (weights[convs[k].input[1]] for k in (0, 1))
    return entry, fuse.reshape(fuse.shape[0], t, entry.shape[0], 3, 3)


def _up_from_transposed(
    weights: dict[str, np.ndarray], graph: onnx.ModelProto, features: int
) -> dict[str, torch.Tensor]:
    """``up``'s 1x1 weight and bias from the transposed convolution ``up_transposed`` exported: its
    kernel (C + 1, F, 2, 2) holds the four taps of each of the F maps, the bias in the last row."""
    (node,) = (n for n in graph.graph.node if n.op_type == "ConvTranspose")
    kernel = weights[node.input[1]]
    taps = kernel[:-1].transpose(1, 2, 3, 0).reshape(4 * features, -1)
    return {
        "up.weight": torch.from_numpy(np.ascontiguousarray(taps)[:, :, None, None]),
        "up.bias": torch.from_numpy(kernel[-1].reshape(4 * features).copy()),
    }


def streaming_from_onnx(path: Path) -> StreamingEnhancer:
    """The ``StreamingEnhancer`` whose fusion graph is ``path`` (its encoder beside it); raises
    ModelError if the graphs are not one, or ConfigError when nothing says its shape."""
    return _streaming(path, _load(path))


def _streaming(path: Path, fusion: onnx.ModelProto) -> StreamingEnhancer:
    graphs = [fusion]
    meta = {p.key: p.value for p in fusion.metadata_props}
    if Key.ENCODER not in meta:
        raise ModelError(f"{str(path)!r} is not a streaming model (no streamer.encoder metadata)")
    encoder = path.with_name(Path(meta[Key.ENCODER]).name)
    graphs.append(_load(encoder))
    config = _arguments(path, meta, "StreamingEnhancer")
    state: dict[str, torch.Tensor] = {}
    for graph in graphs:
        weights = _initializers(graph)
        for node in graph.graph.node:  # the exporter shares equal tensors through Identity
            if node.op_type == "Identity" and node.input[0] in weights:
                weights[node.output[0]] = weights[node.input[0]]
        state |= {
            name.removeprefix("module."): torch.from_numpy(value.copy())
            for name, value in weights.items()
            if name.startswith("module.")
        }
    try:
        config["position"] = OutputPosition(config["position"])
        module = StreamingEnhancer(**config)
        module.load_state_dict(state, strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise ModelError(
            f"{str(path)!r} is not a StreamingEnhancer export that keeps its weights by name "
            f"({type(err).__name__}: {err})"
        ) from err
    module.eval()
    _check_streaming(module, path, encoder)
    return module


def convlstm_from_onnx(path: Path) -> ConvLSTMEnhancer:
    """The ``ConvLSTMEnhancer`` exported as ``path``; raises ModelError if the graph is not one, or
    ConfigError when nothing says its arguments."""
    return _convlstm(path, _load(path))


def _convlstm(path: Path, graph: onnx.ModelProto) -> ConvLSTMEnhancer:
    meta = {p.key: p.value for p in graph.metadata_props}
    config = _arguments(path, meta, "ConvLSTMEnhancer")
    weights = _initializers(graph)
    nodes = list(graph.graph.node)
    try:
        module = ConvLSTMEnhancer(**config)
        state = {k: torch.from_numpy(v.copy()) for k, v in weights.items() if k in module.state_dict()}
        state |= _up_from_transposed(weights, graph, module.features)
        convs = [n for n in nodes if n.op_type == "Conv"]
        embed = weights[convs[0].input[1]]  # the frame's 2x2 stride-2 embedding, the graph's first Conv
        state["embed.weight"] = torch.from_numpy(embed.reshape(embed.shape[0], 12, 1, 1, 1).copy())
        (fuse,) = (n for n in convs if n.input[2:] == ["fuse.bias"])
        state["fuse.weight"] = torch.from_numpy(weights[fuse.input[1]][:, :, None].copy())
        # The previous frame's embedding: its colour taps as they are, its valid plane's through a Sub
        # that folds the centring in (the Concat joins the two).
        (join,) = (n for n in nodes if n.op_type == "Concat" and n.input[0] in weights)
        (valid,) = (n for n in nodes if n.op_type == "Sub" and n.output[0] == join.input[1])
        previous = np.concatenate([weights[join.input[0]], weights[valid.input[0]]], axis=1)
        state["embed_previous.weight"] = torch.from_numpy(previous)
        both, bias = weights[convs[-1].input[1]], weights[convs[-1].input[2]]  # head's 12 maps, blend's 4
        state |= {
            "head.weight": torch.from_numpy(both[:12].copy()),
            "head.bias": torch.from_numpy(bias[:12].copy()),
            "blend.weight": torch.from_numpy(both[12:].copy()),
            "blend.bias": torch.from_numpy(bias[12:].copy()),
        }
        module.load_state_dict(state, strict=True)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as err:
        raise ModelError(
            f"{str(path)!r} is not an exported ConvLSTMEnhancer ({type(err).__name__}: {err}); only graphs "
            "written by streamer export --arch convlstm can be rebuilt"
        ) from err
    module.eval()
    _check_convlstm(module, path)
    return module


def _arguments(path: Path, meta: dict[str, str], what: str) -> dict[str, Any]:
    """The module's constructor arguments: the graph's ``streamer.architecture`` metadata, else the
    ``parameters`` of the model card beside it."""
    card = path.with_suffix(".json")
    if Key.ARCHITECTURE in meta:
        config = json.loads(meta[Key.ARCHITECTURE])
    elif card.is_file():
        config = json.loads(card.read_text()).get("parameters")
    else:
        config = None
    if not isinstance(config, dict):
        raise ConfigError(
            f"{str(path)!r} does not say its {what} arguments (streamer.architecture) and has no "
            f"model card {card.name} with 'parameters' beside it"
        )
    return config


def rebuild(path: Path) -> Conv3dEnhancer | StreamingEnhancer | ConvLSTMEnhancer:
    """The module exported as ``path``: a streaming model's fusion graph, a ConvLSTM's file (it carries
    states) or a Conv3d's file."""
    graph = _load(path)
    keys = {p.key for p in graph.metadata_props}
    if Key.ENCODER in keys:
        return _streaming(path, graph)
    return _convlstm(path, graph) if Key.STATE in keys else _conv3d(path, graph)


def weights_of(path: Path, streaming: bool = False) -> dict[str, torch.Tensor]:
    """The state_dict of a training checkpoint, or of an exported model rebuilt from its graph; with
    ``streaming``, a rebuilt Conv3d is split into its streaming form first (to warm-start a streaming
    model from it)."""
    if path.suffix != ".onnx":
        state: dict[str, torch.Tensor] = load_checkpoint(path)["model"]
        return state
    model: torch.nn.Module = rebuild(path)
    if streaming and isinstance(model, Conv3dEnhancer):
        model = StreamingEnhancer.from_conv3d(model)
    return dict(model.state_dict())


def _initializers(graph: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The graph's stored tensors by name."""
    return {i.name: numpy_helper.to_array(i) for i in graph.graph.initializer}


def _load(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise ConfigError(f"{str(path)!r} does not exist; pass an ONNX file written by streamer export")
    try:
        return onnx.load(str(path))
    except Exception as err:
        raise ModelError(f"{str(path)!r} is not a readable ONNX file: {err}") from err


def _check_streaming(module: StreamingEnhancer, path: Path, encoder_path: Path) -> None:
    """The files' uint8 output on one random window within one level of the module's, rounded."""
    m, t = module.pad_multiple, module.t
    frames = np.random.default_rng(0).integers(0, 256, (t, 4 * m, 6 * m, 3), dtype=np.uint8)
    encoder = ort.InferenceSession(str(encoder_path), providers=["CPUExecutionProvider"])
    fusion = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    maps = encoder.run(list(module.feature_names), {"frame": frames})
    feeds = {
        f"{name}_{s}": maps[k][s : s + 1] for k, name in enumerate(module.feature_names) for s in range(t)
    }
    (got,) = fusion.run(None, feeds | {"target": frames[module.slot][None]})
    window = torch.from_numpy(frames).permute(0, 3, 1, 2)[None].float() / 255.0
    with torch.no_grad():
        expected = (module(window)[0] * 255.0).round().clamp(0, 255).permute(1, 2, 0).numpy()
    error = float(np.abs(got[0].astype(np.float32) - expected).max())
    if error > 1:
        raise ModelError(
            f"the module rebuilt from {str(path)!r} differs from the files by {error:g} levels (> 1); "
            "the graphs are not a plain StreamingEnhancer export"
        )


def _check_convlstm(module: ConvLSTMEnhancer, path: Path) -> None:
    """The file's outputs and states over a few steps from the zero state, against the module's."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    frames = [rng.random((1, 1, 3, 32, 48), dtype=np.float32) for _ in range(3)]
    strength = (torch.full((1, 1), 20.0),) if module.takes_strength else ()
    states = zero_states(module, torch.from_numpy(frames[0]))
    theirs = [s.numpy() for s in states]
    error = 0.0
    for x in frames:
        feeds = {"frames": x} | {spec.input: s for spec, s in zip(module.state_specs, theirs, strict=True)}
        if strength:
            feeds[STRENGTH] = strength[0].numpy()
        expected, *theirs = session.run(None, feeds)
        with torch.no_grad():
            got, *states = module(torch.from_numpy(x), *states, *strength)
        error = max(error, float(np.abs(got.numpy() - expected).max()))
    _refuse_apart(error, path, "ConvLSTMEnhancer")


def _check(module: Conv3dEnhancer, path: Path) -> None:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    frames = np.random.default_rng(0).random((1, module.t, 3, 64, 96), dtype=np.float32)
    feeds = {session.get_inputs()[0].name: frames}
    strength = (torch.full((1, 1), 20.0),) if module.takes_strength else ()
    if strength:
        feeds[STRENGTH] = strength[0].numpy()
    (expected,) = session.run(None, feeds)
    with torch.no_grad():
        got = module(torch.from_numpy(frames), *strength).numpy()
    error = float(np.abs(got - expected).max())
    _refuse_apart(error, path, "Conv3dEnhancer")


def _refuse_apart(error: float, path: Path, what: str) -> None:
    """ModelError when the module rebuilt from ``path`` and the file differ by more than the tolerance."""
    if error > PARITY_TOLERANCE:
        raise ModelError(
            f"the module rebuilt from {str(path)!r} differs from the file by {error:.3g} "
            f"(> {PARITY_TOLERANCE}); the graph is not a plain {what} export"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.recover",
        description="Write the state_dict of the Conv3dEnhancer, StreamingEnhancer or ConvLSTMEnhancer "
        "exported as MODEL (for export --weights).",
    )
    parser.add_argument(
        "model", type=Path, help="an ONNX file written by streamer export (a streaming model's fusion graph)"
    )
    parser.add_argument("--out", type=Path, required=True, help="the state_dict .pt to write")
    args = parser.parse_args(argv)
    try:
        module = rebuild(args.model)
    except StreamerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.save(module.state_dict(), args.out)
    print(f"wrote {args.out}: {type(module).__name__} {module.config()}, equal to {args.model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
