from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.config import Config, load_config, parse_override
from streamer.core.windower import OutputPosition
from streamer.demo import demo_config
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


def test_webrtc_token_may_not_be_empty(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"webrtc\.token"):
        load_config(write(tmp_path, "webrtc:\n  token: ''\n"))
