"""Rebuilds a ``Conv3dEnhancer`` from its exported ONNX file (``python -m export.recover MODEL --out W.pt``).

A shipped model whose training checkpoint was not kept can still be re-exported (as a streaming
model, in INT8): the graph holds every weight, most under their PyTorch names; the embedding and the
Conv3d were reshaped at export and are read back from the first two convolutions. The result is checked
against the file with onnxruntime before it is written, so a graph of another shape is refused, not
half-loaded.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError, StreamerError
from streamer.models.conv3d import Conv3dEnhancer

__all__ = ["PARITY_TOLERANCE", "conv3d_from_onnx", "main"]

PARITY_TOLERANCE = 1e-4
"""Largest |PyTorch - onnxruntime| accepted for the rebuilt module, on frames in [0, 1]."""

_BLOCK = re.compile(r"body\.(\d+)\.conv1\.weight")


def conv3d_from_onnx(path: Path) -> Conv3dEnhancer:
    """The ``Conv3dEnhancer`` whose export is ``path``; raises ModelError if the graph is not one."""
    if not path.is_file():
        raise ConfigError(f"{str(path)!r} does not exist; pass an ONNX file written by streamer export")
    try:
        graph = onnx.load(str(path))
    except Exception as err:
        raise ModelError(f"{str(path)!r} is not a readable ONNX file: {err}") from err
    meta = {p.key: p.value for p in graph.metadata_props}
    weights = {i.name: numpy_helper.to_array(i) for i in graph.graph.initializer}
    convs = [n for n in graph.graph.node if n.op_type == "Conv"]
    try:
        t = int(meta["streamer.t"])
        position = OutputPosition(meta["streamer.output_position"])
        entry, fuse = (weights[convs[k].input[1]] for k in (0, 1))
        blocks = len({int(m.group(1)) for name in weights if (m := _BLOCK.fullmatch(name))})
        module = Conv3dEnhancer(
            t=t,
            position=position,
            embed=entry.shape[0],
            features=fuse.shape[0],
            channels=weights["down.weight"].shape[0],
            blocks=blocks,
        )
        state = {k: torch.from_numpy(v.copy()) for k, v in weights.items() if k in module.state_dict()}
        state["embed.weight"] = torch.from_numpy(entry.reshape(entry.shape[0], 12, 1, 1, 1).copy())
        e = module.embed_channels
        fuse5 = fuse.reshape(fuse.shape[0], t, e, 3, 3).transpose(0, 2, 1, 3, 4)
        state["fuse.weight"] = torch.from_numpy(fuse5.copy())
        module.load_state_dict(state, strict=True)
    except (KeyError, IndexError, ValueError, RuntimeError) as err:
        raise ModelError(
            f"{str(path)!r} is not an exported Conv3dEnhancer ({type(err).__name__}: {err}); only graphs "
            "written by streamer export --arch conv3d can be rebuilt"
        ) from err
    module.eval()
    _check(module, path)
    return module


def _check(module: Conv3dEnhancer, path: Path) -> None:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    frames = np.random.default_rng(0).random((1, module.t, 3, 64, 96), dtype=np.float32)
    (expected,) = session.run(None, {session.get_inputs()[0].name: frames})
    with torch.no_grad():
        got = module(torch.from_numpy(frames)).numpy()
    error = float(np.abs(got - expected).max())
    if error > PARITY_TOLERANCE:
        raise ModelError(
            f"the module rebuilt from {str(path)!r} differs from the file by {error:.3g} "
            f"(> {PARITY_TOLERANCE}); the graph is not a plain Conv3dEnhancer export"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.recover",
        description="Write the state_dict of the Conv3dEnhancer exported as MODEL (for export --weights).",
    )
    parser.add_argument("model", type=Path, help="an ONNX file written by streamer export --arch conv3d")
    parser.add_argument("--out", type=Path, required=True, help="the state_dict .pt to write")
    args = parser.parse_args(argv)
    try:
        module = conv3d_from_onnx(args.model)
    except StreamerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.save(module.state_dict(), args.out)
    print(
        f"wrote {args.out}: Conv3dEnhancer {module.config()}, equal to {args.model} within {PARITY_TOLERANCE}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
