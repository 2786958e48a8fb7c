"""Writes an exported model as a Triton Inference Server model repository entry.

Triton serves ``REPO/<name>/config.pbtxt`` with the model file at ``REPO/<name>/1/model.onnx``; this
module writes that layout for a file ``streamer export`` made, so a fleet can serve the model without
this package. The config is built from the ONNX graph itself (tensor names, data types, dims), so it
cannot drift from the file, and the file's ``streamer.*`` metadata goes into the config's
``parameters`` map, where a client reads the contract (T, layout, value range, state) from Triton's
model-config endpoint instead of the file.

A streaming model is two graphs: the fusion becomes ``<name>`` and its encoder ``<name>_encoder``,
each config naming the other. A recurrent model is served stateless: its state tensors are ordinary
inputs and outputs, and the client carries them per stream as ``streamer.backend.onnx`` does.

Nothing here imports torch or touches a model's weights beyond copying the file.
"""

from __future__ import annotations

import enum
import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streamer.contract import Key
from streamer.errors import ConfigError, ModelError

if TYPE_CHECKING:  # onnx is imported where a file is read: export.cli loads this module for `streamer run`
    import onnx

__all__ = [
    "InstanceKind",
    "Precision",
    "TritonOptions",
    "check_target",
    "config_text",
    "encoder_name",
    "write_repo",
]

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_MAX_NAME = 128
"""Long enough for any real name; a name is also a directory, so it is kept well under path limits."""
_VERSION = "1"
_WRITTEN = frozenset({"config.pbtxt", _VERSION, f"{_VERSION}/model.onnx"})
"""What a model directory holds after write_repo: the only contents overwrite may replace."""

_TYPES = {
    "FLOAT": "TYPE_FP32",
    "FLOAT16": "TYPE_FP16",
    "BFLOAT16": "TYPE_BF16",
    "DOUBLE": "TYPE_FP64",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
}
"""ONNX element types to Triton's data types (model_config.proto's DataType)."""


class InstanceKind(enum.Enum):
    """Where Triton places the model's instances (instance_group kind)."""

    GPU = "gpu"
    CPU = "cpu"


class Precision(enum.Enum):
    """TensorRT's precision_mode in the ONNX Runtime backend; FP16 lets TensorRT pick half-precision
    kernels, so outputs differ slightly from the exported fp32 graph."""

    FP32 = "fp32"
    FP16 = "fp16"


@dataclass(frozen=True, slots=True)
class TritonOptions:
    """How Triton batches, places and accelerates the model; checked when made, before any export."""

    max_batch_size: int = 4
    """Largest batch Triton forms from queued requests; the graph's first axis is that batch."""
    preferred_batch_sizes: tuple[int, ...] = ()
    """Batch sizes the dynamic batcher waits for, each at most max_batch_size; empty: the maximum."""
    max_queue_delay_us: int = 100
    """How long a request may wait for others to batch with: small, since each frame has a deadline."""
    instances: int = 1
    kind: InstanceKind = InstanceKind.GPU
    tensorrt: Precision | None = None
    """Run the graph through ONNX Runtime's TensorRT provider at this precision; None: CUDA or CPU."""
    overwrite: bool = False
    """Replace a model directory this module wrote before; anything else there is still refused."""

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ConfigError(
                f"--triton-max-batch must be >= 1 (the exported graphs take a batch axis), "
                f"got {self.max_batch_size}"
            )
        bad = [size for size in self.preferred_batch_sizes if not 1 <= size <= self.max_batch_size]
        if bad:
            raise ConfigError(
                f"--triton-preferred-batch {bad} outside 1..{self.max_batch_size} (--triton-max-batch); "
                "give sizes no larger than the maximum batch"
            )
        if self.max_queue_delay_us < 0:
            raise ConfigError(f"--triton-queue-delay-us must be >= 0, got {self.max_queue_delay_us}")
        if self.instances < 1:
            raise ConfigError(f"--triton-instances must be >= 1, got {self.instances}")
        if self.tensorrt is not None and self.kind is InstanceKind.CPU:
            raise ConfigError(
                "--triton-tensorrt needs GPU instances; drop --triton-tensorrt or --triton-kind cpu"
            )

    @property
    def preferred(self) -> tuple[int, ...]:
        """The preferred batch sizes written: those given, else the maximum batch alone."""
        return self.preferred_batch_sizes or (self.max_batch_size,)


@dataclass(frozen=True, slots=True)
class _Tensor:
    name: str
    data_type: str
    dims: tuple[int, ...]
    """Without the batch axis; -1 where the graph leaves an axis dynamic."""


def encoder_name(name: str) -> str:
    """The Triton model name of a streaming model's encoder graph."""
    return f"{name}_encoder"


def write_repo(
    repo: Path, name: str, model: Path, options: TritonOptions, *, encoder: Path | None = None
) -> list[Path]:
    """Writes ``repo/name`` (and ``repo/name_encoder`` for a streaming model's ``encoder``) and returns
    the files written. Every target is checked before anything is written, so a refusal leaves the
    repository as it was."""
    check_target(repo, name, options, streaming=encoder is not None)
    graphs = [(name, model, {} if encoder is None else {Key.ENCODER_MODEL: encoder_name(name)})]
    if encoder is not None:
        graphs.append((encoder_name(name), encoder, {Key.FUSION_MODEL: name}))
    texts = [
        (graph_name, path, config_text(graph_name, _load(path), options, links))
        for graph_name, path, links in graphs
    ]
    written: list[Path] = []
    for graph_name, path, text in texts:
        folder = repo / graph_name
        (folder / _VERSION).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, folder / _VERSION / "model.onnx")
        (folder / "config.pbtxt").write_text(text, encoding="utf-8")
        written += [folder / "config.pbtxt", folder / _VERSION / "model.onnx"]
    return written


def check_target(repo: Path, name: str, options: TritonOptions, *, streaming: bool) -> None:
    """Raises ConfigError for a name Triton cannot serve or a model directory holding something else;
    the export CLI calls it before exporting, so a bad target costs no export."""
    if not _NAME.fullmatch(name) or name.startswith(".") or len(name) > _MAX_NAME:
        raise ConfigError(
            f"Triton model name {name!r} must be 1..{_MAX_NAME} of A-Z a-z 0-9 _ . - and not start with "
            "'.' (it is a directory in the repository); pass --name with such a name"
        )
    if repo.exists() and not repo.is_dir():
        raise ConfigError(f"--triton-repo {str(repo)!r} is a file; give a directory (made if missing)")
    for model_name in (name, encoder_name(name)) if streaming else (name,):
        folder = repo / model_name
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise ConfigError(
                f"{str(folder)!r} is a link or a file, not a directory; remove it or pass another --name"
            )
        if not folder.exists() or not any(folder.iterdir()):
            continue
        if not options.overwrite:
            raise ConfigError(
                f"Triton model directory {str(folder)!r} is not empty; pass --triton-overwrite to replace "
                "a model written by streamer export, or another --name"
            )
        # A link among them would have the copy write through it, outside the repository.
        entries = {p.relative_to(folder).as_posix(): p.is_symlink() for p in folder.rglob("*")}
        others = sorted(entry for entry, link in entries.items() if link or entry not in _WRITTEN)
        if others:
            raise ConfigError(
                f"Triton model directory {str(folder)!r} holds {others[:5]}, which streamer export did not "
                "write (another version would be served instead of this one); remove them or pass "
                "another --name"
            )


def _same_sizes(model: onnx.ModelProto) -> bool:
    """Whether the graph's one output takes its height and width from its first input's named axes."""
    weights = {init.name for init in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in weights]
    if not inputs or len(model.graph.output) != 1:
        return False

    def named(value: onnx.ValueInfoProto) -> list[str]:
        return [d.dim_param for d in value.type.tensor_type.shape.dim][-2:]

    sizes = named(inputs[0])
    return len(sizes) == 2 and all(sizes) and sizes == named(model.graph.output[0])


def config_text(
    name: str, model: onnx.ModelProto, options: TritonOptions, links: dict[str, str] | None = None
) -> str:
    """The config.pbtxt for ``model`` served as ``name``: its tensors, the batching, placement and
    accelerator ``options`` ask for, and its metadata_props (plus ``links``) as string parameters."""
    meta = {p.key: p.value for p in model.metadata_props} | (links or {})
    if Key.SCALE not in meta and Key.ENCODER not in meta and _same_sizes(model):
        meta[Key.SCALE] = "1"  # Triton shows dynamic axes unnamed: what their names said, said here
    where = f"model {name!r}"
    weights = {init.name for init in model.graph.initializer}
    inputs = [_tensor(v, where) for v in model.graph.input if v.name not in weights]
    outputs = [_tensor(v, where) for v in model.graph.output]
    lines = [f"# Written by streamer export: the Triton model {name}, version {_VERSION} is model.onnx."]
    if Key.STATE in meta:
        states = json.loads(meta[Key.STATE])
        pairs = ", ".join(f"{s['input']} -> {s['output']}" for s in states)
        lines += [
            f"# Recurrent: the state tensors ({pairs}) are ordinary inputs and outputs. Triton runs",
            "# the model stateless; the client carries each stream's state from one response to its next",
            "# request (zeros at a stream's start and after a cut), as the streamer runtime does.",
        ]
    lines += [
        f"name: {_quote(name)}",
        'platform: "onnxruntime_onnx"',
        f"max_batch_size: {options.max_batch_size}",
        *_tensors("input", inputs),
        *_tensors("output", outputs),
        "dynamic_batching {",
    ]
    lines += [
        f"  preferred_batch_size: {_list(options.preferred)}",
        f"  max_queue_delay_microseconds: {options.max_queue_delay_us}",
        "}",
        "instance_group [",
        "  {",
        f"    count: {options.instances}",
        f"    kind: KIND_{options.kind.name}",
        "  }",
        "]",
    ]
    if options.tensorrt is not None:
        lines += [
            "optimization {",
            "  execution_accelerators {",
            "    gpu_execution_accelerator: [",
            "      {",
            '        name: "tensorrt"',
            f'        parameters {{ key: "precision_mode" value: "{options.tensorrt.name}" }}',
            "      }",
            "    ]",
            "  }",
            "}",
        ]
    for key in sorted(meta):
        lines += [
            "parameters {",
            f"  key: {_quote(key)}",
            f"  value: {{ string_value: {_quote(meta[key])} }}",
            "}",
        ]
    return "\n".join(lines) + "\n"


def _load(path: Path) -> onnx.ModelProto:
    """The graph without its weights' external files; a model that has any is refused, since only
    model.onnx is copied."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # OSError, or protobuf's DecodeError (a module without type stubs here)
        raise ModelError(f"cannot read ONNX file {str(path)!r}: {err}") from err
    if any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer):
        raise ModelError(
            f"{str(path)!r} keeps weights in external data files; Triton's model.onnx here is one file, "
            "so re-save it with the weights inside (onnx.save(..., save_as_external_data=False))"
        )
    return model


def _tensor(value: onnx.ValueInfoProto, where: str) -> _Tensor:
    from onnx import TensorProto

    kind = value.type.tensor_type
    onnx_type = TensorProto.DataType.Name(kind.elem_type)
    if not value.type.HasField("tensor_type") or onnx_type not in _TYPES:
        raise ModelError(
            f"{where}: tensor {value.name!r} has element type {onnx_type}, which has no Triton data type "
            f"here; export it as one of {sorted(_TYPES)}"
        )
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in kind.shape.dim]
    if not kind.HasField("shape") or len(dims) < 2 or dims[0] != -1:
        raise ModelError(
            f"{where}: tensor {value.name!r} has shape {dims or 'unknown'}; Triton's batching needs a "
            "dynamic first (batch) axis and at least one more, as streamer export writes them"
        )
    return _Tensor(value.name, _TYPES[onnx_type], tuple(dims[1:]))


def _tensors(field: str, tensors: Sequence[_Tensor]) -> list[str]:
    lines = [f"{field} ["]
    for i, tensor in enumerate(tensors):
        lines += [
            "  {",
            f"    name: {_quote(tensor.name)}",
            f"    data_type: {tensor.data_type}",
            f"    dims: {_list(tensor.dims)}",
            "  }" + ("," if i < len(tensors) - 1 else ""),
        ]
    return [*lines, "]"]


def _list(values: Sequence[int]) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def _quote(text: str) -> str:
    """A protobuf text-format string: UTF-8 bytes outside printable ASCII, quotes and backslashes
    escaped in octal or with a backslash, so any tensor name or metadata value round-trips."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'
