"""Loading a config: YAML read in one place (the CLI's), ``key.path=value`` overrides applied, and a
failed validation told in one line that names the key, where its value came from, and the fix."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from streamer.config.streams import SHARED, Config, SinkConfig, SourceConfig, StreamConfig, inherit
from streamer.errors import ConfigError

__all__ = ["load_config", "parse_override", "stream_config"]


def stream_config(data: Any, config: Config) -> StreamConfig:
    """A stream added at run time (JSON from the control API), inheriting ``config``'s top-level
    sections like the streams of the file do. Raises ConfigError naming the bad field."""
    top = config.model_dump(mode="json", include=set(SHARED))
    try:
        return StreamConfig.model_validate(inherit(data, top))
    except ValidationError as exc:
        raise ConfigError(_describe(exc, lambda _: "stream")) from None


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Sets one dotted key. A new ``kind`` for a source or sink starts its section afresh: the settings
    the file gave the kind it replaces (an RTSP output's url and bitrate) are not the new kind's."""
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        if node.get(key) is None:  # an absent section, or one the file left null (model.triton: null)
            node[key] = {}
        child = node[key]
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {key!r} is a value, not a section")
        node = child
    if keys[-1] == "kind" and node.get("kind", value) != value:
        node.clear()
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``window.t=5`` -> ("window.t", 5); the value is read as YAML, so ``null``, ``true``, lists work."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like section.key=value, e.g. window.stride=2")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "invalid syntax"
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({problem})") from None
    return key.strip(), value


def _describe(error: ValidationError, origin: Callable[[str], str]) -> str:
    """The first error in one line, led by where the bad value came from (``origin`` of its key)."""
    first = error.errors()[0]
    loc = [str(p) for p in first["loc"] if not str(p).startswith(("function-after", "tagged-union"))]
    value = first.get("input")
    member = None
    if isinstance(value, dict) and loc and value.get("kind") == loc[-1]:
        loc = loc[:-1]  # a source's or sink's kind, as pydantic names the member of the union
    elif first["type"] == "extra_forbidden" and len(loc) > 2 and loc[-2] in _KINDS:
        member = loc.pop(-2)  # the same, above an unknown key
    kind = first["type"]
    if kind == "control_character":
        loc.append(str(first.get("ctx", {}).get("key")))
    where = ".".join(part if part.isprintable() else repr(part) for part in loc)  # keys shown on one line
    if kind == "extra_forbidden":
        near = _nearest_key(where)
        if near == where and member is not None:  # a setting of another kind of source or sink
            hint = f"{where.rpartition('.')[0]} kind {member!r} has no such setting; "
        else:
            hint = "" if near is None else f"did you mean {near!r}? "
        return (
            f"{origin(where)}: unknown key {where!r}; {hint}check the spelling against configs/default.yaml"
        )
    if kind == "missing":
        return f"{origin(where)}: {where!r} is required"
    shown = "" if isinstance(value, dict) else f" (got {_short(repr(value))})"
    return f"{origin(where)}: {where or 'config'}: {first['msg'].removeprefix('Value error, ')}{shown}"


def _origin(path: Path | None, overrides: Iterable[str]) -> Callable[[str], str]:
    """Where a key's value came from: ``--set`` for a dotted override (or one above or below it), else
    the config file."""
    given = list(overrides)

    def origin(where: str) -> str:
        if path is None or any(
            where == k or where.startswith(f"{k}.") or k.startswith(f"{where}.") for k in given
        ):
            return "--set"
        return str(path)

    return origin


def _nearest_key(where: str) -> str | None:
    """The known key nearest an unknown one, as the user wrote its place (a list item's index kept)."""
    general = re.sub(r"\.\d+(?=\.|$)", "", where)
    near = difflib.get_close_matches(general, _known_keys(), n=1, cutoff=0.75)
    if not near:
        return None
    parent, _, leaf = near[0].rpartition(".")
    written_parent, _, _ = where.rpartition(".")
    same_place = parent == re.sub(r"\.\d+(?=\.|$)", "", written_parent)
    return f"{written_parent}.{leaf}" if same_place and written_parent else near[0]


@functools.cache
def _known_keys() -> tuple[str, ...]:
    """Every setting's dotted key (a list's items as its own key's children), for "did you mean"."""
    keys: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            keys.append(prefix + name)
            for member in _models_in(field.annotation):
                walk(member, f"{prefix}{name}.")

    walk(Config, "")
    return tuple(dict.fromkeys(keys))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: itself, a union's members, a list's items."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


_KINDS = frozenset(
    str(m.model_fields["kind"].default) for m in [*_models_in(SourceConfig), *_models_in(SinkConfig)]
)
"""The kinds of sources and sinks, which pydantic puts in an error's location: read from their models."""


def _short(text: str, limit: int = 80) -> str:
    """A value as an error shows it: YAML aliases can expand a few lines into megabytes."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 15]}... ({len(text)} chars)"


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Read YAML (or start from defaults), apply dotted overrides, validate. Raises ConfigError."""
    tree: dict[str, Any] = {}
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist; see configs/ for examples") from None
        except OSError as exc:
            raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"config file {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8 YAML"
            ) from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or "invalid syntax"
            raise ConfigError(f"{path}: YAML error{at}: {problem}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"{path}: the top level must be a mapping of sections, got {type(loaded).__name__}"
            )
        tree = loaded
    for key, value in (overrides or {}).items():
        _set_path(tree, key, value)
    try:
        return Config.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, _origin(path, overrides or {}))) from None
