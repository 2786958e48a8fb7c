"""A stream (its source, its outputs and the settings of its stages) and the whole process's config:
one stream or several, each inheriting the top-level sections it leaves out."""

from __future__ import annotations

import os
import posixpath
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import Field, model_validator

from streamer.config.base import STREAM_ID, Strict
from streamer.config.model import ModelConfig
from streamer.config.servers import HttpConfig, WebRtcConfig
from streamer.config.sinks import FileSinkConfig, NullSinkConfig, RtspSinkConfig, WhepSinkConfig
from streamer.config.sources import (
    FileSourceConfig,
    RtspSourceConfig,
    SyntheticSourceConfig,
    WhipSourceConfig,
)
from streamer.config.stages import GateConfig, KeepAliveConfig, LatencyConfig, RuntimeConfig, WindowConfig
from streamer.redact import redact_url

__all__ = [
    "DEFAULT_STREAM_ID",
    "MAX_SINKS",
    "SHARED",
    "Config",
    "SinkConfig",
    "SourceConfig",
    "StreamConfig",
    "inherit",
    "webrtc_name",
]


SourceConfig = Annotated[
    FileSourceConfig | SyntheticSourceConfig | RtspSourceConfig | WhipSourceConfig,
    Field(discriminator="kind"),
]
SinkConfig = Annotated[
    FileSinkConfig | NullSinkConfig | RtspSinkConfig | WhepSinkConfig, Field(discriminator="kind")
]


def _default_kinds(data: Any) -> Any:
    """A source or sink section without ``kind`` is of the default kind (synthetic, null); so is a
    sink of ``kind: null``, which YAML reads as None rather than the string. ``sinks`` items alike."""
    if isinstance(data, dict):
        for section, kind in (("source", "synthetic"), ("sink", "null")):
            value = data.get(section)
            if isinstance(value, dict) and (
                "kind" not in value or (kind == "null" and value["kind"] is None)
            ):
                data = {**data, section: {**value, "kind": kind}}
        sinks = data.get("sinks")
        if isinstance(sinks, list):
            data = {**data, "sinks": [_sink_kind(item) for item in sinks]}
    return data


def _sink_kind(item: Any) -> Any:
    if isinstance(item, dict) and ("kind" not in item or item["kind"] is None):
        return {**item, "kind": "null"}
    return item


MAX_SINKS = 8
"""Outputs one stream may have: each runs its own encoder and queue."""


DEFAULT_STREAM_ID = "0"
SHARED = ("model", "window", "gate", "latency", "keepalive")
"""Sections a stream may set for itself; the top-level ones are the defaults every stream starts from."""


class _Stream(Strict):
    """The sections that describe one stream."""

    source: SourceConfig = Field(default_factory=SyntheticSourceConfig)
    sink: SinkConfig = Field(default_factory=NullSinkConfig)
    """The one output; ``sinks`` gives several instead."""
    sinks: list[SinkConfig] | None = Field(None, min_length=1, max_length=MAX_SINKS)
    """Several outputs of the same enhanced frames from one source connection (RTSP push, WHEP, a file
    recording, null), each with its own queue, so a slow or failed one holds up only itself."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    window: WindowConfig = Field(default_factory=WindowConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    latency: LatencyConfig = Field(default_factory=LatencyConfig)
    keepalive: KeepAliveConfig = Field(default_factory=KeepAliveConfig)

    @model_validator(mode="before")
    @classmethod
    def _deadline_from_budget(cls, data: Any) -> Any:
        """``model.triton.deadline_ms`` left out: the stream's ``latency.budget_ms`` where it has one, so a
        call that would miss the budget fails into a pass-through rather than arriving late."""
        if not isinstance(data, dict):
            return data
        model, latency = data.get("model"), data.get("latency")
        triton = model.get("triton") if isinstance(model, dict) else None
        budget = (
            latency.get("budget_ms") if isinstance(latency, dict) else getattr(latency, "budget_ms", None)
        )
        if isinstance(triton, dict) and triton.get("deadline_ms") is None and budget is not None:
            assert isinstance(model, dict)
            data = {**data, "model": {**model, "triton": {**triton, "deadline_ms": budget}}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _live_takes_auto(cls, data: Any) -> Any:
        """A live source (an RTSP camera, a WHIP publisher, a file or pattern paced to its timestamps)
        without a model named runs ``auto``, the best shipped tier that keeps up with it; a file read as
        fast as it can be keeps the best-quality model (the shipped default)."""
        if not isinstance(data, dict):
            return data
        source, model = data.get("source"), data.get("model")
        kind = source.get("kind") if isinstance(source, dict) else getattr(source, "kind", None)
        paced = source.get("realtime") if isinstance(source, dict) else getattr(source, "realtime", False)
        live = kind in ("rtsp", "whip") or paced is True
        if isinstance(model, ModelConfig):
            model = model.model_dump()
        if live and model is None:
            return {**data, "model": {"path": "auto"}}
        if live and isinstance(model, dict) and model.get("path") is None and model.get("triton") is None:
            return {**data, "model": {**model, "path": "auto"}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _kinds(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("sinks") is not None and "sink" in data:
            raise ValueError("give 'sink' (one output) or 'sinks' (several), not both")
        return _default_kinds(data)

    @model_validator(mode="after")
    def _live_recording(self) -> Self:
        outputs = self.outputs()
        following = [s for s in outputs if isinstance(s, FileSinkConfig) and s.encode == "live"]
        if following and not any(isinstance(s, RtspSinkConfig) for s in outputs):
            raise ValueError(
                f"the file output {str(following[0].path)!r} has encode: live, which records the stream's "
                "RTSP output, but the stream has none; add an rtsp output to sinks or set encode: own"
            )
        return self

    @model_validator(mode="after")
    def _distinct_outputs(self) -> Self:
        seen: dict[str, str] = {}
        for sink in self.outputs():
            target = _output_target(sink)
            if target is None:
                continue
            key, named = target
            if key in seen:
                raise ValueError(f"sinks: {named} and {seen[key]} are one target; give each output its own")
            seen[key] = named
        return self

    def targets(self) -> dict[str, str]:
        """Every output's target key (:func:`_output_target`) and how to name it."""
        found = (_output_target(sink) for sink in self.outputs())
        return dict(t for t in found if t is not None)

    def outputs(self) -> list[SinkConfig]:
        """Every sink of the stream: ``sinks``, or the one ``sink``."""
        return list(self.sinks) if self.sinks is not None else [self.sink]

    def file_output(self) -> Path | None:
        """The first file the stream writes, for the run's summary."""
        return next((s.path for s in self.outputs() if isinstance(s, FileSinkConfig)), None)


def _output_target(sink: SinkConfig) -> tuple[str, str] | None:
    """What two outputs must not share, as (key, how to name it to a user): a file by its real path
    (symlinks and ``..`` resolved, so two spellings of one file are one target), an RTSP URL normalised
    (scheme and host in lower case, the default port written out, dot segments and a trailing slash
    gone, credentials dropped), a WHEP stream by its name; None for outputs that write nowhere."""
    if isinstance(sink, FileSinkConfig):
        return f"file:{os.path.realpath(sink.path)}", f"file {str(sink.path)!r}"
    if isinstance(sink, RtspSinkConfig):
        return f"rtsp:{_normal_rtsp(sink.url)}", f"RTSP URL {redact_url(sink.url)!r}"
    if isinstance(sink, WhepSinkConfig):
        return f"whep:{sink.stream}", f"WHEP stream {sink.stream!r}"
    return None


_RTSP_PORTS = {"rtsp": 554, "rtsps": 322, "rtspt": 554}


def _normal_rtsp(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    host = (parts.hostname or "").lower()
    path = posixpath.normpath("/" + parts.path.lstrip("/")) if parts.path.strip("/") else "/"
    shown = f"[{host}]" if ":" in host else host
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{shown}:{port or _RTSP_PORTS.get(scheme, 554)}{path.rstrip('/') or '/'}{query}"


class StreamConfig(_Stream):
    """One stream of a process: its own source and sink, and its own window, gate, latency and model
    settings (each key it leaves out comes from the top-level section of the same name)."""

    id: str = Field(DEFAULT_STREAM_ID, pattern=STREAM_ID)
    """Its name in /streams, /readyz, metric labels and logs; by default its WHIP source's stream name,
    else its WHEP sink's, else "0", so a WebRTC stream has one name everywhere."""

    @property
    def uses_webrtc(self) -> bool:
        return self.source.kind == "whip" or any(s.kind == "whep" for s in self.outputs())

    @model_validator(mode="before")
    @classmethod
    def _named_as_served(cls, data: Any) -> Any:
        if isinstance(data, dict) and "id" not in data:
            given = data.get("sinks")
            sinks: list[Any] = given if isinstance(given, list) else [data.get("sink")]
            whep = (webrtc_name(s, "whep") for s in sinks)
            name = webrtc_name(data.get("source"), "whip") or next((n for n in whep if n), None)
            if name is not None:
                data = {**data, "id": name}
        return data


def webrtc_name(section: Any, kind: str) -> str | None:
    """The ``stream`` a source or sink section of ``kind`` (whip, whep) is served under, if it is one."""
    if isinstance(section, dict) and section.get("kind") == kind:
        return str(section.get("stream", DEFAULT_STREAM_ID))
    if isinstance(section, WhipSourceConfig | WhepSinkConfig) and section.kind == kind:
        return section.stream
    return None


class Config(_Stream):
    """A process: one stream (the top-level sections) or several (``streams``), and what they share."""

    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    webrtc: WebRtcConfig = Field(default_factory=WebRtcConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    streams: list[StreamConfig] | None = None
    """Several streams in one process; None: the one stream the top-level source and sink describe."""

    @property
    def uses_webrtc(self) -> bool:
        return any(s.uses_webrtc for s in self.stream_configs())

    def rtsp_hosts(self) -> set[str]:
        """The hosts of every RTSP URL the config's streams pull from or push to, in lower case."""
        urls = [getattr(s.source, "url", None) for s in self.stream_configs()]
        urls += [getattr(o, "url", None) for s in self.stream_configs() for o in s.outputs()]
        return {(urllib.parse.urlsplit(u).hostname or "").lower() for u in urls if u is not None} - {""}

    def stream_configs(self) -> list[StreamConfig]:
        """Every stream to run: ``streams``, or the single one of the top-level source and sink(s)."""
        if self.streams is not None:
            return list(self.streams)
        outputs = {"sinks": self.sinks} if self.sinks is not None else {"sink": self.sink}
        return [StreamConfig(**{name: getattr(self, name) for name in ("source", *SHARED)}, **outputs)]

    @model_validator(mode="before")
    @classmethod
    def _streamsinherit(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("streams") is None:
            return data
        given = [s for s in ("source", "sink", "sinks") if s in data]
        if given:
            raise ValueError(
                f"top-level {' and '.join(given)} cannot stand beside 'streams'; give each stream its "
                "own source and sink"
            )
        streams = data["streams"]
        if isinstance(streams, list):
            data = {**data, "streams": [inherit(item, data) for item in streams]}
        return data

    @model_validator(mode="after")
    def _unique(self) -> Config:
        ids = [s.id for s in self.stream_configs()]
        seen = sorted({i for i in ids if ids.count(i) > 1})
        if seen:
            raise ValueError(f"stream ids must be unique; {seen} appear more than once")
        writers: dict[str, str] = {}
        for stream in self.stream_configs():
            for key, named in stream.targets().items():
                if key in writers:
                    raise ValueError(
                        f"stream {stream.id!r} writes {named}, which stream {writers[key]!r} writes too; "
                        "give each output its own target"
                    )
                writers[key] = stream.id
        if self.streams is not None and not self.streams and self.http.port is None:
            raise ValueError("streams is empty and http.port is null: nothing to run and no way to add")
        if self.http.port is None:
            for stream in self.stream_configs():
                _check_loop_ends(stream, "" if self.streams is None else f"stream {stream.id!r}: ")
        return self


def _check_loop_ends(stream: StreamConfig, where: str) -> None:
    """A looped file into a file or the null sink would run until the disk is full or for ever."""
    source, kinds = stream.source, {s.kind for s in stream.outputs()}
    sink = "file" if "file" in kinds else "null"
    if (
        isinstance(source, FileSourceConfig)
        and source.loop
        and not source.max_frames
        and kinds <= {"file", "null"}
    ):
        raise ValueError(
            f"{where}source.loop: true with a {sink} sink never ends; set source.max_frames, or serve it "
            "(http.port) and stop it with DELETE /streams/{id}"
        )


def inherit(stream: Any, top: dict[str, Any]) -> Any:
    """A stream's shared sections over the top-level ones, key by key."""
    if not isinstance(stream, dict):
        return stream
    merged = dict(stream)
    for section in SHARED:
        base, own = top.get(section), stream.get(section)
        if isinstance(base, dict) and (own is None or isinstance(own, dict)):
            merged[section] = {**base, **(own or {})}
    return merged
