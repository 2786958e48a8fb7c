"""Property tests of ``--set KEY=VALUE`` overrides: the value round-trips as YAML, and any override
either loads or is a one-line ConfigError."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.config import load_config, parse_override
from streamer.errors import ConfigError

scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
dotted = st.lists(st.from_regex(r"[a-z_]{1,10}", fullmatch=True), min_size=1, max_size=3).map(".".join)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isinf(a) and a == b)
    return bool(a == b)


@settings(max_examples=200, deadline=None)
@given(key=dotted, value=values)
def test_a_value_written_as_yaml_comes_back_unchanged(key: str, value: Any) -> None:
    assert parse_override(f"{key}={yaml.safe_dump(value)}") == (key, value)
    assert parse_override(f"  {key} ={yaml.safe_dump(value)}")[0] == key


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40))
def test_any_override_text_parses_or_is_a_config_error(text: str) -> None:
    try:
        key, value = parse_override(text)
    except ConfigError as exc:
        refused = str(exc)
    else:
        refused = None
    if refused is not None:
        assert "\n" not in refused
        return
    assert key
    assert key == key.strip()
    try:
        message = repr(load_config(None, {key: value}))
    except ConfigError as exc:
        message = str(exc)
    assert message
    assert "\n" not in message


@settings(max_examples=100, deadline=None)
@given(stride=st.integers(-5, 50))
def test_a_numeric_override_is_validated_like_the_yaml_file(stride: int) -> None:
    override = dict([parse_override(f"window.stride={stride}")])
    if stride < 1:
        with pytest.raises(ConfigError, match=r"window\.stride"):
            load_config(None, override)
    else:
        assert load_config(None, override).window.stride == stride


def test_an_override_that_is_not_yaml_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_override("window.t=[1")
    assert "\n" not in str(raised.value)
