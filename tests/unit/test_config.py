from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamer.cli.demo import demo_config
from streamer.config import Config, FileSinkConfig, load_config, parse_override, stream_config
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

CONFIGS = Path(__file__).parents[2] / "configs"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_default_yaml_spells_out_the_defaults() -> None:
    assert load_config(CONFIGS / "default.yaml") == Config()


def test_demo_yaml_is_the_embedded_demo() -> None:
    assert load_config(CONFIGS / "demo.yaml") == demo_config(Path("out/demo/enhanced.mp4"))


def test_overrides_win_and_are_read_as_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "window:\n  stride: 2\n")
    config = load_config(path, dict(parse_override(o) for o in ["window.stride=3", "window.position=last"]))
    assert config.window.stride == 3
    assert config.window.position is OutputPosition.LAST


def test_source_without_kind_is_synthetic() -> None:
    assert load_config(None, {"source.frames": 5}).source.kind == "synthetic"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("window:\n  strid: 2\n", "unknown key 'window.strid'"),
        ("window:\n  stride: two\n", "window.stride"),
        ("window:\n  stride: 0\n", "window.stride"),
        ("gate:\n  area_on: 0.01\n  area_off: 0.5\n", "area_off"),
        ("source:\n  kind: file\n", "'source.file.path' is required"),
        ("source:\n  kind: camera\n", "source"),
        ("window: [1, 2\n", "YAML error at line 2"),
        ("- a\n- b\n", "top level must be a mapping"),
    ],
)
def test_bad_config_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text))
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("triton", "message"),
    [
        ({"url": "http://127.0.0.1:8001", "model": "m"}, "host:port of the gRPC endpoint"),
        ({"url": "127.0.0.1", "model": "m"}, "host:port of the gRPC endpoint"),
        ({"url": "127.0.0.1:70000", "model": "m"}, "host:port of the gRPC endpoint"),
        ({"url": "127.0.0.1:8001", "model": "../m"}, "model.triton.model must be"),
        ({"url": "127.0.0.1:8001", "model": "m", "transport": "cuda"}, "transport"),
        ({"url": "127.0.0.1:8001", "model": "m", "deadline_ms": 0}, "deadline_ms"),
        ({"url": "127.0.0.1:8001", "model": "m", "access_token_env": "A-B"}, "access_token_env"),
    ],
)
def test_model_triton_is_checked(triton: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, {"model.triton": triton})


def test_model_triton_takes_the_place_of_a_model_file(monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(
        None, {"model.triton": {"url": "[::1]:8001", "model": "stream_t5", "access_token_env": "TOK"}}
    )
    assert config.model.triton is not None
    monkeypatch.setenv("TOK", "secret")
    assert config.model.triton.access_token() == "secret"
    with pytest.raises(ConfigError, match=re.escape("remove model.path")):
        load_config(None, {"model.triton": {"url": "127.0.0.1:8001", "model": "m"}, "model.path": "auto"})


def test_http_tokens_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTROL", "control-0123\n")  # a Secret made --from-file keeps its newline
    monkeypatch.setenv("READ", "read-4567")
    http = load_config(
        None, {"http.port": 0, "http.token_env": "CONTROL", "http.read_token_env": "READ"}
    ).http
    assert (http.token, http.read_token) == ("control-0123", "read-4567")
    monkeypatch.setenv("EMPTY", " ")
    for overrides, reason in (
        ({"http.token_env": "EMPTY"}, "http.token_env names EMPTY, which is unset or empty"),
        ({"http.read_token_env": "MISSING"}, "http.read_token_env names MISSING, which is unset or empty"),
        ({"http.token_env": "CONTROL", "http.token": "x"}, "http.token and http.token_env are both set"),
        ({"http.token_env": "bad-name"}, "http.token_env"),
    ):
        with pytest.raises(ConfigError, match=re.escape(reason)):
            load_config(None, overrides)


def test_overrides_fill_a_section_the_file_leaves_null() -> None:
    config = load_config(
        CONFIGS / "default.yaml", {"model.triton.url": "127.0.0.1:8001", "model.triton.model": "conv3d_t5"}
    )
    assert config.model.triton is not None
    assert (config.model.triton.url, config.model.triton.model) == ("127.0.0.1:8001", "conv3d_t5")


def test_model_triton_deadline_is_the_streams_budget_unless_given() -> None:
    remote = {"url": "127.0.0.1:8001", "model": "m"}
    assert load_config(None, {"model.triton": remote}).model.triton.deadline_ms == 1000.0  # type: ignore[union-attr]
    budget = load_config(None, {"model.triton": remote, "latency.budget_ms": 250})
    assert budget.model.triton.deadline_ms == 250.0  # type: ignore[union-attr]
    own = load_config(None, {"model.triton": {**remote, "deadline_ms": 120}, "latency.budget_ms": 250})
    assert own.model.triton.deadline_ms == 120.0  # type: ignore[union-attr]
    streams = load_config(
        None,
        {
            "model.triton": remote,
            "latency.budget_ms": 250,
            "http.port": 0,
            "streams": [{"id": "a", "latency": {"budget_ms": 400}}, {"id": "b"}],
        },
    )
    deadlines = [s.model.triton.deadline_ms for s in streams.stream_configs()]  # type: ignore[union-attr]
    assert deadlines == [400.0, 250.0]


def test_missing_config_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml does not exist"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("text", ["stride", "=3", "window.t=[1"])
def test_bad_override(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_override(text)


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 500) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
sections = st.sampled_from(["source", "sink", "model", "window", "gate", "latency", "runtime", "other"])
keys = st.sampled_from(["kind", "path", "t", "stride", "position", "frames", "budget_ms", "enabled", "x"])


@settings(max_examples=200, deadline=None)
@given(
    tree=st.dictionaries(sections, st.dictionaries(keys, yaml_values, max_size=4) | yaml_values, max_size=4)
)
@example(tree={"source": {"\n": "\x1f"}})  # a key that is itself a control character
def test_any_yaml_either_loads_or_raises_config_error(tmp_path_factory: Any, tree: dict[str, Any]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    try:
        message = repr(load_config(path))
    except ConfigError as exc:
        message = str(exc)
    assert message
    assert "\n" not in message


def test_webrtc_example_builds_a_server_with_whip_in_and_whep_out() -> None:
    config = load_config(CONFIGS / "webrtc.yaml")
    assert (config.source.kind, config.sink.kind, config.uses_webrtc) == ("whip", "whep", True)
    assert config.webrtc.port == 8080


@pytest.mark.parametrize(
    ("overrides", "ids"),
    [
        ({}, ["0"]),
        ({"source": {"kind": "whip", "stream": "cam"}, "sink": {"kind": "whep", "stream": "cam"}}, ["cam"]),
        ({"sink": {"kind": "whep", "stream": "lobby"}}, ["lobby"]),
        (
            {
                "streams": [
                    {"source": {"kind": "whip", "stream": "door"}, "sink": {"kind": "null"}},
                    {"id": "yard", "source": {"kind": "whip", "stream": "garden"}, "sink": {"kind": "null"}},
                    {"id": "gate", "source": {"kind": "synthetic"}, "sink": {"kind": "null"}},
                ],
                "http": {"port": 0},
            },
            ["door", "yard", "gate"],
        ),
    ],
)
def test_a_stream_is_named_as_it_is_served_unless_given_an_id(
    overrides: dict[str, object], ids: list[str]
) -> None:
    assert [s.id for s in load_config(None, overrides).stream_configs()] == ids


def test_webrtc_token_may_not_be_empty(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"webrtc\.token"):
        load_config(write(tmp_path, "webrtc:\n  token: ''\n"))


def test_streams_inherit_the_top_level_sections_key_by_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
latency: {budget_ms: 250}
gate: {refresh_s: 3.0, hold: 5}
runtime: {max_batch: 8}
streams:
  - id: cam1
    source: {kind: synthetic, realtime: true}
  - id: cam2
    source: {kind: synthetic}
    sink: {kind: null}
    gate: {hold: 1}
    latency: {budget_ms: null}
""",
    )
    config = load_config(path)
    cam1, cam2 = config.stream_configs()
    assert (cam1.id, cam1.latency.budget_ms, cam1.gate.refresh_s, cam1.gate.hold) == ("cam1", 250.0, 3.0, 5)
    assert (cam2.id, cam2.latency.budget_ms, cam2.gate.refresh_s, cam2.gate.hold) == ("cam2", None, 3.0, 1)
    assert cam2.sink.kind == "null"


def test_without_streams_the_top_level_source_and_sink_are_stream_0() -> None:
    config = load_config(None, {"source.frames": 7, "window.stride": 2})
    (only,) = config.stream_configs()
    assert (only.id, only.source.frames, only.window.stride) == ("0", 7, 2)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("source: {kind: synthetic}\nstreams: [{id: a}]", "top-level source cannot stand beside 'streams'"),
        ("streams: [{id: a}, {id: a}]", "stream ids must be unique; ['a']"),
        ("streams: [{id: 'bad id'}]", "streams.0.id"),
        ("streams: [{id: a, colour: red}]", "unknown key 'streams.0.colour'"),
        ("streams: []", "nothing to run"),
        ("http: {port: 70000}", "http.port"),
        ("runtime: {log_format: xml}", "runtime.log_format"),
    ],
)
def test_bad_streams_are_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_stream_added_at_run_time_inherits_like_the_configured_ones() -> None:
    config = load_config(None, {"latency.budget_ms": 200, "gate.hold": 4})
    added = stream_config({"id": "late", "source": {"realtime": True}, "gate": {"hold": 2}}, config)
    assert (added.id, added.latency.budget_ms, added.gate.hold, added.source.kind) == (
        "late",
        200.0,
        2,
        "synthetic",
    )
    with pytest.raises(ConfigError, match="unknown key 'sorce'"):
        stream_config({"id": "x", "sorce": {}}, config)


def test_streams_example_loads_and_shares_one_model() -> None:
    config = load_config(CONFIGS / "streams.yaml")
    streams = config.stream_configs()
    assert [s.id for s in streams] == ["lobby", "street", "garage"]
    assert len({s.model.model_dump_json() for s in streams}) == 1
    assert config.http.port == 9091


def test_max_batch_left_unset_is_one_on_the_cpu_and_eight_on_a_gpu() -> None:
    runtime = load_config(None).runtime
    assert runtime.max_batch is None
    assert runtime.batch_for("CPUExecutionProvider") == 1
    assert runtime.batch_for("CUDAExecutionProvider") == 8
    assert load_config(None, {"runtime.max_batch": 3}).runtime.batch_for("CPUExecutionProvider") == 3


def _numeric_settings() -> list[tuple[str, dict[str, Any]]]:
    """Every numeric setting as a dotted key, with what its section needs besides it to validate."""
    import types
    import typing

    from streamer import config as c

    def numeric(annotation: Any) -> bool:
        args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
        return any(a in (int, float) for a in args)

    sections: list[tuple[str, type[Any], dict[str, Any]]] = [
        ("model", c.ModelConfig, {}),
        ("window", c.WindowConfig, {}),
        ("gate", c.GateConfig, {}),
        ("latency", c.LatencyConfig, {}),
        ("runtime", c.RuntimeConfig, {}),
        ("http", c.HttpConfig, {}),
        ("webrtc", c.WebRtcConfig, {}),
        ("source", c.FileSourceConfig, {"source.kind": "file", "source.path": "clip.mp4"}),
        ("source", c.SyntheticSourceConfig, {"source.kind": "synthetic"}),
        ("source", c.RtspSourceConfig, {"source.kind": "rtsp", "source.url": "rtsp://127.0.0.1/x"}),
        ("source", c.WhipSourceConfig, {"source.kind": "whip"}),
        ("sink", c.FileSinkConfig, {"sink.kind": "file", "sink.path": "out.mp4"}),
        ("sink", c.RtspSinkConfig, {"sink.kind": "rtsp", "sink.url": "rtsp://127.0.0.1/y"}),
    ]
    return [
        (f"{section}.{name}", needs)
        for section, model, needs in sections
        for name, field in model.model_fields.items()
        if numeric(field.annotation)
    ]


@pytest.mark.parametrize(("key", "needs"), _numeric_settings())
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e308, 10**12, -(10**12)])
def test_every_numeric_setting_refuses_inf_nan_and_huge_values_in_one_line(
    key: str, needs: dict[str, Any], value: float
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, {**needs, key: value})
    message = str(raised.value)
    assert key.split(".")[-1] in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"sink": {"kind": "null"}, "sinks": [{"kind": "null"}]}, "give 'sink' (one output) or 'sinks'"),
        ({"sinks": []}, "sinks"),
        ({"sinks": [{"kind": "null"}] * 9}, "sinks"),
        (
            {"sinks": [{"kind": "file", "path": "out/a.mp4"}, {"kind": "file", "path": "out/a.mp4"}]},
            "file 'out/a.mp4' and file 'out/a.mp4' are one target",
        ),
        (
            {"sinks": [{"kind": "file", "path": "out/a.mp4"}, {"kind": "file", "path": "out/sub/../a.mp4"}]},
            "file 'out/sub/../a.mp4' and file 'out/a.mp4' are one target",
        ),
        (
            {
                "sinks": [
                    {"kind": "rtsp", "url": "rtsp://user:secret@Relay.Example/cam"},
                    {"kind": "rtsp", "url": "RTSP://relay.example:554/x/../cam/"},
                ]
            },
            "RTSP URL 'rtsp://relay.example:554/x/../cam/' and RTSP URL 'rtsp://***@Relay.Example/cam'",
        ),
        ({"sinks": [{"kind": "whep", "stream": "x"}, {"kind": "whep", "stream": "x"}]}, "WHEP stream 'x'"),
    ],
)
def test_bad_sinks_are_one_line(overrides: dict[str, object], reason: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(reason)):
        load_config(None, overrides)


def test_a_file_reached_through_a_symlink_is_the_same_output(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    outputs = [{"kind": "file", "path": str(tmp_path / d / "a.mp4")} for d in ("real", "link")]
    with pytest.raises(ConfigError, match="are one target"):
        load_config(None, {"sinks": outputs})


def test_two_streams_may_not_write_one_target() -> None:
    streams = [
        {"id": "a", "source": {"kind": "synthetic"}, "sink": {"kind": "rtsp", "url": "rtsp://h:554/x"}},
        {"id": "b", "source": {"kind": "synthetic"}, "sink": {"kind": "rtsp", "url": "rtsp://H/x"}},
    ]
    with pytest.raises(ConfigError, match="stream 'b' writes RTSP URL 'rtsp://H/x', which stream 'a' writes"):
        load_config(None, {"streams": streams})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("source.path", "/media/a\x00.mp4"),
        ("sink.path", "out/x\x00.mp4"),
        ("model.path", "/models/m\x00.onnx"),
        ("source.url", "rtsp://h/cam\r\nX-Forged: 1"),
        ("sink.url", "rtsp://h/cam\x1b[2J"),
        ("http.media_roots", ["/media", "/m\x01"]),
    ],
)
def test_control_characters_in_any_setting_are_refused_naming_the_key(key: str, value: object) -> None:
    kinds = {"source.path": "file", "source.url": "rtsp", "sink.path": "file", "sink.url": "rtsp"}
    overrides: dict[str, object] = {key: value}
    if key in kinds:
        overrides[key.split(".")[0] + ".kind"] = kinds[key]
    with pytest.raises(ConfigError, match=f"^--set: {re.escape(key)}: holds the control character"):
        load_config(None, overrides)


def test_sinks_take_each_output_and_name_the_stream_by_its_whep_output() -> None:
    config = load_config(
        None,
        {"sinks": [{"kind": "rtsp", "url": "rtsp://127.0.0.1/x"}, {"stream": "lobby", "kind": "whep"}, {}]},
    )
    (stream,) = config.stream_configs()
    assert [s.kind for s in stream.outputs()] == ["rtsp", "whep", "null"]
    assert (stream.id, config.uses_webrtc) == ("lobby", True)


def test_tensorrt_options_are_the_providers_own_names() -> None:
    from streamer.config import TensorRtConfig

    assert TensorRtConfig().provider_options() == {"trt_fp16_enable": "1"}
    cached = TensorRtConfig(fp16=False, cache_dir=Path("/var/cache/trt")).provider_options()
    assert cached == {
        "trt_fp16_enable": "0",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/var/cache/trt",
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": "/var/cache/trt",
    }


def test_a_shipped_model_is_named_wherever_the_package_lies() -> None:
    from streamer.assets import ASSETS

    assert load_config(None, {"model.path": "shipped:conv3d_t1"}).model.path == ASSETS / "conv3d_t1.onnx"
    with pytest.raises(ConfigError, match=r"no shipped model 'conv3d_t9'; the package ships conv3d_t1, "):
        load_config(None, {"model.path": "shipped:conv3d_t9"})


def test_the_camera_profile_runs_the_model_that_takes_a_strength_on_the_streams_estimate() -> None:
    from streamer.assets import CAMERA_MODEL
    from streamer.backend.onnx import OnnxBackend

    config = load_config(CONFIGS / "camera.yaml")
    assert config.model.path == CAMERA_MODEL
    assert config.model.strength == "auto"
    assert OnnxBackend(config.model.file()).info.strength
    assert config.source.kind == config.sink.kind == "rtsp"


def test_the_low_latency_profile_waits_for_no_later_frame() -> None:
    from streamer.app import build_windower
    from streamer.backend.onnx import OnnxBackend

    config = load_config(CONFIGS / "low-latency.yaml")
    model = OnnxBackend(config.model.file()).info
    assert build_windower(config.window, model.t, model.output_position).lookahead == 0
    assert config.source.kind == config.sink.kind == "rtsp"


def test_the_gpu_profile_decodes_and_encodes_on_the_gpu_where_it_can() -> None:
    config = load_config(CONFIGS / "gpu.yaml")
    assert config.source.kind == config.sink.kind == "rtsp"
    assert config.source.decode == "auto"  # type: ignore[union-attr]
    assert config.sink.codec == "auto"  # type: ignore[union-attr]
    assert config.model.providers == "auto"
    assert config.runtime.batch_for("CUDAExecutionProvider") == 8
    assert config.runtime.batch_for("CPUExecutionProvider") == 1


@pytest.mark.parametrize(
    ("overrides", "suggested"),
    [
        ({"latency.budget": 100}, "latency.budget_ms"),
        ({"modle.path": "x"}, "model"),
        ({"sink.kind": "file", "sink.path": "a.mp4", "sink.crff": 3}, "sink.crf"),
        ({"sinks": [{"kind": "file", "path": "a.mp4", "crf2": 3}]}, "sinks.0.crf"),
        ({"streams": [{"id": "a", "source": {"kind": "synthetic", "widht": 3}}]}, "streams.0.source.width"),
    ],
)
def test_an_unknown_key_is_answered_with_the_nearest_known_one(
    overrides: dict[str, object], suggested: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"; did you mean {suggested!r}? check the spelling")):
        load_config(None, overrides)


def test_a_setting_of_another_kind_of_sink_says_the_kind_has_none() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, {"sink.kind": "file", "sink.path": "a.mp4", "sink.url": "rtsp://h/x"})
    assert str(raised.value) == (
        "--set: unknown key 'sink.url'; sink kind 'file' has no such setting; "
        "check the spelling against configs/default.yaml"
    )


def test_a_new_kind_starts_its_section_afresh_and_the_same_kind_keeps_its_settings(tmp_path: Path) -> None:
    # the camera profile's RTSP output (url, bitrate) written to a file instead: --output out.mp4
    camera = load_config(CONFIGS / "camera.yaml", {"sink.kind": "file", "sink.path": "out.mp4"})
    assert camera.sink == FileSinkConfig(path=Path("out.mp4"))
    path = tmp_path / "record.yaml"
    path.write_text("sink:\n  kind: file\n  path: a.mp4\n  crf: 4\n")
    kept = load_config(path, {"sink.kind": "file", "sink.path": "b.mp4"})
    assert kept.sink == FileSinkConfig(path=Path("b.mp4"), crf=4)


def test_an_unknown_key_like_no_other_gets_no_guess() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, {"zzz": 1})
    assert str(raised.value) == "--set: unknown key 'zzz'; check the spelling against configs/default.yaml"


def test_an_error_names_where_its_value_came_from_the_file_or_set(tmp_path: Path) -> None:
    path = tmp_path / "cam.yaml"
    path.write_text("latency:\n  budget: 250\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: unknown key 'latency.budget'"):
        load_config(path)
    path.write_text("latency:\n  budget_ms: 250\n")
    with pytest.raises(ConfigError, match=r"^--set: latency.budget_ms: Input should be a valid number"):
        load_config(path, {"latency.budget_ms": "abc"})
