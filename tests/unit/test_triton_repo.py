"""`streamer export --triton-repo`: Triton's layout, a config.pbtxt read back from the ONNX graph it
describes, the streaming pair as two models, and refusals that leave the repository as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
import torch
from google.protobuf import text_format

from export.cli import main
from export.models import ConvGRUEnhancer, StreamingEnhancer
from export.onnx_export import export_onnx
from export.streaming_export import export_streaming
from export.triton_repo import InstanceKind, Precision, TritonOptions, write_repo
from streamer.errors import ConfigError, ModelError

TINY_GRU = {"features": 8, "channels": 8, "hidden": 6, "blocks": 1}
TINY_STREAM = {"half": 4, "quarter": 8, "fused": 8, "refine": 4}
TRITON_TYPES = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.UINT8: "TYPE_UINT8"}


def parse(text: str) -> dict[str, list[Any]]:
    """protobuf text format read generically (Triton's model_config proto is not installed): each field
    name to its values, a message as such a dict; protobuf's own tokenizer does the lexing, so what it
    accepts is valid text format, strings unescaped as Triton's parser reads them."""
    tokens = text_format.Tokenizer(text.splitlines())
    return _fields(tokens, None)


def _fields(tokens: Any, closing: str | None) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    while not (tokens.AtEnd() if closing is None else tokens.TryConsume(closing)):
        key = tokens.ConsumeIdentifier()
        tokens.TryConsume(":")
        if tokens.TryConsume("["):
            values = []
            while not tokens.TryConsume("]"):
                values.append(_value(tokens))
                tokens.TryConsume(",")
            out.setdefault(key, []).extend(values)
        else:
            out.setdefault(key, []).append(_value(tokens))
    return out


def _value(tokens: Any) -> Any:
    if tokens.TryConsume("{"):
        return _fields(tokens, "}")
    if tokens.token[:1] in ("'", '"'):
        return tokens.ConsumeString()
    if tokens.token[:1] == "-" or tokens.token[:1].isdigit():
        return tokens.ConsumeInteger()
    return tokens.ConsumeIdentifier()


def _read(repo: Path, name: str) -> dict[str, list[Any]]:
    return parse((repo / name / "config.pbtxt").read_text(encoding="utf-8"))


def _params(config: dict[str, list[Any]]) -> dict[str, str]:
    return {p["key"][0]: p["value"][0]["string_value"][0] for p in config["parameters"]}


def _assert_tensors_match(config: dict[str, list[Any]], model_path: Path) -> None:
    """Every graph input and output, in order, with its Triton type and its dims past the batch axis."""
    graph = onnx.load(model_path).graph
    for field, values in (("input", graph.input), ("output", graph.output)):
        expected = [
            (
                v.name,
                TRITON_TYPES[v.type.tensor_type.elem_type],
                [d.dim_value or -1 for d in v.type.tensor_type.shape.dim][1:],
            )
            for v in values
        ]
        got = [(t["name"][0], t["data_type"][0], t["dims"]) for t in config[field]]
        assert got == expected


@pytest.fixture(scope="module")
def recurrent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gru") / "g.onnx"
    return export_onnx(ConvGRUEnhancer(**TINY_GRU), path, name="g", real_frames=False).path


def test_a_recurrent_model_is_a_stateless_triton_model_with_its_contract_in_parameters(
    recurrent: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    written = write_repo(repo, "denoise_v1.2", recurrent, TritonOptions())
    folder = repo / "denoise_v1.2"
    assert written == [folder / "config.pbtxt", folder / "1" / "model.onnx"]
    assert (folder / "1" / "model.onnx").read_bytes() == recurrent.read_bytes()
    text = (folder / "config.pbtxt").read_text()
    assert "state -> state_next" in text  # the comment saying the client carries the state
    config = parse(text)
    assert config["name"] == ["denoise_v1.2"]
    assert config["platform"] == ["onnxruntime_onnx"]
    assert config["max_batch_size"] == [4]
    assert config["dynamic_batching"] == [
        {"preferred_batch_size": [4], "max_queue_delay_microseconds": [100]}
    ]
    assert config["instance_group"] == [{"count": [1], "kind": ["KIND_GPU"]}]
    assert "optimization" not in config
    _assert_tensors_match(config, recurrent)
    assert [t["name"][0] for t in config["input"]] == ["frames", "state"]
    assert config["input"][0]["dims"] == [1, 3, -1, -1]  # T, C fixed; H, W dynamic; no batch axis
    meta = {p.key: p.value for p in onnx.load(recurrent).metadata_props}
    assert _params(config) == meta  # streamer.t, layout, value range, state JSON (quotes escaped)
    assert json.loads(_params(config)["streamer.state"])[0]["output"] == "state_next"


def test_the_knobs_reach_the_config(recurrent: Path, tmp_path: Path) -> None:
    options = TritonOptions(
        max_batch_size=8,
        preferred_batch_sizes=(2, 8),
        max_queue_delay_us=250,
        instances=2,
        tensorrt=Precision.FP16,
    )
    write_repo(tmp_path, "g", recurrent, options)
    config = _read(tmp_path, "g")
    assert config["max_batch_size"] == [8]
    assert config["dynamic_batching"] == [
        {"preferred_batch_size": [2, 8], "max_queue_delay_microseconds": [250]}
    ]
    assert config["instance_group"] == [{"count": [2], "kind": ["KIND_GPU"]}]
    (accelerator,) = config["optimization"][0]["execution_accelerators"][0]["gpu_execution_accelerator"]
    assert accelerator["name"] == ["tensorrt"]
    assert accelerator["parameters"] == [{"key": ["precision_mode"], "value": ["FP16"]}]
    write_repo(tmp_path, "cpu", recurrent, TritonOptions(kind=InstanceKind.CPU))
    assert _read(tmp_path, "cpu")["instance_group"] == [{"count": [1], "kind": ["KIND_CPU"]}]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_batch_size": 0}, "--triton-max-batch"),
        ({"max_batch_size": 4, "preferred_batch_sizes": (8,)}, "--triton-preferred-batch"),
        ({"max_queue_delay_us": -1}, "--triton-queue-delay-us"),
        ({"instances": 0}, "--triton-instances"),
        ({"kind": InstanceKind.CPU, "tensorrt": Precision.FP32}, "--triton-tensorrt"),
    ],
)
def test_bad_options_are_config_errors_naming_the_flag(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        TritonOptions(**options)


@pytest.mark.parametrize("name", ["../escape", ".hidden", "a/b", "with space", "", "é", "x" * 129])
def test_a_name_triton_cannot_serve_is_refused_before_anything_is_written(
    recurrent: Path, tmp_path: Path, name: str
) -> None:
    with pytest.raises(ConfigError, match="Triton model name"):
        write_repo(tmp_path / "repo", name, recurrent, TritonOptions())
    assert not (tmp_path / "repo").exists()


def test_an_existing_model_directory_is_replaced_only_when_asked_and_only_if_export_wrote_it(
    recurrent: Path, tmp_path: Path
) -> None:
    write_repo(tmp_path, "g", recurrent, TritonOptions(max_batch_size=2))
    with pytest.raises(ConfigError, match="--triton-overwrite"):
        write_repo(tmp_path, "g", recurrent, TritonOptions())
    write_repo(tmp_path, "g", recurrent, TritonOptions(overwrite=True))
    assert _read(tmp_path, "g")["max_batch_size"] == [4]
    (tmp_path / "g" / "2").mkdir()  # another version, which Triton would serve instead
    with pytest.raises(ConfigError, match=r"holds \['2'\]"):
        write_repo(tmp_path, "g", recurrent, TritonOptions(overwrite=True))
    (tmp_path / "g" / "2").rmdir()
    (tmp_path / "g" / "1" / "model.onnx").unlink()
    (tmp_path / "g" / "1" / "model.onnx").symlink_to(tmp_path / "elsewhere.onnx")
    with pytest.raises(ConfigError, match=r"holds \['1/model.onnx'\]"):
        write_repo(tmp_path, "g", recurrent, TritonOptions(overwrite=True))
    assert not (tmp_path / "elsewhere.onnx").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        write_repo(tmp_path, "file", recurrent, TritonOptions())
    with pytest.raises(ConfigError, match="is a file"):
        write_repo(tmp_path / "file", "g", recurrent, TritonOptions())


def test_a_file_triton_cannot_batch_is_a_model_error(tmp_path: Path) -> None:
    fixed = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "g", [fixed], [])
    graph.output.append(onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8]))
    path = tmp_path / "fixed.onnx"
    onnx.save(onnx.helper.make_model(graph), path)
    with pytest.raises(ModelError, match=r"'x' has shape \[1, 3, 8, 8\]"):
        write_repo(tmp_path / "repo", "fixed", path, TritonOptions())
    assert not (tmp_path / "repo").exists()


def test_a_streaming_model_is_two_triton_models_naming_each_other(tmp_path: Path) -> None:
    torch.manual_seed(0)
    graphs = export_streaming(
        StreamingEnhancer(**TINY_STREAM).eval(), tmp_path / "s.onnx", name="s", real_frames=False
    )
    repo = tmp_path / "repo"
    write_repo(repo, "s", graphs.report.path, TritonOptions(), encoder=graphs.encoder_path)
    fusion, encoder = _read(repo, "s"), _read(repo, "s_encoder")
    assert (repo / "s_encoder" / "1" / "model.onnx").read_bytes() == graphs.encoder_path.read_bytes()
    _assert_tensors_match(fusion, graphs.report.path)
    _assert_tensors_match(encoder, graphs.encoder_path)
    assert encoder["input"] == [{"name": ["frame"], "data_type": ["TYPE_UINT8"], "dims": [-1, -1, 3]}]
    assert _params(fusion)["streamer.encoder_model"] == "s_encoder"
    assert _params(fusion)["streamer.t"] == "5"
    assert _params(encoder)["streamer.fusion_model"] == "s"
    # An encoder directory in the way refuses the pair, leaving the fusion unwritten too.
    (tmp_path / "other" / "t_encoder").mkdir(parents=True)
    (tmp_path / "other" / "t_encoder" / "x").write_text("")
    with pytest.raises(ConfigError, match="t_encoder"):
        write_repo(tmp_path / "other", "t", graphs.report.path, TritonOptions(), encoder=graphs.encoder_path)
    assert not (tmp_path / "other" / "t").exists()


def test_the_cli_writes_the_repository_and_checks_the_target_before_exporting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, out = tmp_path / "repo", tmp_path / "f.onnx"
    argv = [
        "export",
        "--arch",
        "temporal_filter",
        "--out",
        str(out),
        "--no-bench",
        "--triton-repo",
        str(repo),
    ]
    assert main([*argv, "--name", "bad name"]) == 2
    assert "Triton model name 'bad name'" in capsys.readouterr().err
    assert not out.exists()  # refused before the export ran
    assert main([*argv, "--triton-kind", "cpu", "--triton-max-batch", "2"]) == 0
    assert f"wrote {repo / 'f' / 'config.pbtxt'}" in capsys.readouterr().out
    config = _read(repo, "f")
    assert config["instance_group"] == [{"count": [1], "kind": ["KIND_CPU"]}]
    assert config["dynamic_batching"][0]["preferred_batch_size"] == [2]
    _assert_tensors_match(config, repo / "f" / "1" / "model.onnx")
    assert main(["export", "--arch", "temporal_filter", "--out", str(out), "--triton-kind", "cpu"]) == 2
    assert "add --triton-repo" in capsys.readouterr().err
