"""What a stream added through the control API may touch: files under the roots, nothing else."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from streamer.config import HttpConfig, StreamConfig
from streamer.errors import AccessError
from streamer.serving.confine import ApiPolicy


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    media, models, outside = tmp_path / "media", tmp_path / "models", tmp_path / "outside"
    for d in (media, models, outside):
        d.mkdir()
    (media / "clip.mp4").write_bytes(b"x")
    (outside / "secret.mp4").write_bytes(b"x")
    (models / "m.onnx").write_bytes(b"x")
    (outside / "m.onnx").write_bytes(b"x")
    (media / "link.mp4").symlink_to(outside / "secret.mp4")
    (media / "dirlink").symlink_to(outside)
    return {"media": media, "models": models, "outside": outside}


def _policy(roots: dict[str, Path], **extra: Any) -> ApiPolicy:
    return ApiPolicy.from_config(
        HttpConfig(media_roots=[roots["media"]], model_roots=[roots["models"]], **extra)
    )


def _check(policy: ApiPolicy, body: dict[str, Any]) -> None:
    policy.check(StreamConfig.model_validate(body), body)


def test_files_under_the_roots_are_allowed(roots: dict[str, Path]) -> None:
    policy = _policy(roots)
    _check(policy, {"source": {"kind": "file", "path": str(roots["media"] / "clip.mp4")}})
    _check(policy, {"sink": {"kind": "file", "path": str(roots["media"] / "new.mp4")}})
    _check(policy, {"model": {"path": str(roots["models"] / "m.onnx")}})
    _check(policy, {"source": {"kind": "file", "path": "sample:bikes"}})  # shipped with the package
    _check(policy, {"model": {"path": "shipped:conv3d_t1"}})  # so is every model of streamer/assets
    _check(ApiPolicy.from_config(HttpConfig()), {"model": {"path": "shipped:stream_t5_lite"}})  # no roots
    _check(policy, {"sink": {"kind": "file", "path": str(roots["media"] / "clip.mp4"), "overwrite": True}})
    # each of several outputs is checked, and only the request's own overwrite counts, output by output
    clip = str(roots["media"] / "clip.mp4")
    _check(policy, {"sinks": [{"kind": "null"}, {"kind": "file", "path": clip, "overwrite": True}]})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"source": {"kind": "file", "path": "/etc/passwd"}}, "outside http.media_roots"),
        ({"source": {"kind": "file", "path": "{media}/../outside/secret.mp4"}}, "outside http.media_roots"),
        ({"source": {"kind": "file", "path": "{media}/link.mp4"}}, "outside http.media_roots"),
        ({"source": {"kind": "file", "path": "{media}/dirlink/secret.mp4"}}, "outside http.media_roots"),
        ({"source": {"kind": "file", "path": "{media}/missing.mp4"}}, "cannot be resolved"),
        ({"source": {"kind": "file", "path": "{media}"}}, "not a regular file"),
        ({"source": {"kind": "file", "path": "clip.mp4"}}, "must be an absolute path"),
        ({"source": {"kind": "file", "path": "{media}/" + "a" * 5000}}, "cannot be resolved"),
        ({"sink": {"kind": "file", "path": "{outside}/x.mp4"}}, "outside http.media_roots"),
        ({"sink": {"kind": "file", "path": "{media}/../outside/x.mp4"}}, "outside http.media_roots"),
        ({"sink": {"kind": "file", "path": "{media}/dirlink/x.mp4"}}, "outside http.media_roots"),
        ({"sink": {"kind": "file", "path": "{media}/clip.mp4"}}, "exists; pick a new name"),
        ({"sink": {"kind": "file", "path": "{media}/link.mp4", "overwrite": True}}, "not a regular file"),
        (
            {
                "sinks": [
                    {"kind": "file", "path": "{media}/ok.mp4"},
                    {"kind": "file", "path": "{outside}/x.mp4"},
                ]
            },
            "outside http.media_roots",
        ),
        (
            {"sinks": [{"kind": "null"}, {"kind": "file", "path": "{media}/clip.mp4", "overwrite": False}]},
            "exists; pick a new name",
        ),
        ({"model": {"path": "{outside}/m.onnx"}}, "outside http.model_roots"),
        ({"model": {"path": "{media}/clip.mp4"}}, "outside http.model_roots"),
        ({"model": {"tensorrt": {"cache_dir": "{media}/engines"}}}, "only the config file may set it"),
        ({"model": {"triton": {"url": "10.0.0.9:8001", "model": "m"}}}, "model.triton connects this process"),
    ],
)
def test_anything_else_is_refused_naming_the_field(
    roots: dict[str, Path], body: dict[str, Any], reason: str
) -> None:
    def fill(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, str):
            return value.replace("{media}", str(roots["media"])).replace("{outside}", str(roots["outside"]))
        return value

    with pytest.raises(AccessError, match=re.escape(reason)):
        _check(_policy(roots), fill(body))


def test_no_roots_means_no_file_paths_through_the_api(roots: dict[str, Path]) -> None:
    policy = ApiPolicy.from_config(HttpConfig())
    with pytest.raises(AccessError, match=re.escape("http.media_roots is empty")):
        _check(policy, {"source": {"kind": "file", "path": str(roots["media"] / "clip.mp4")}})
    with pytest.raises(AccessError, match=re.escape("http.model_roots is empty")):
        _check(policy, {"model": {"path": str(roots["models"] / "m.onnx")}})
    _check(policy, {"source": {"kind": "synthetic"}, "sink": {"kind": "null"}})
    _check(policy, {"model": {"path": "auto"}})  # the shipped tiers: no file named by the client


def test_rtsp_hosts_can_be_limited() -> None:
    policy = ApiPolicy.from_config(HttpConfig(allowed_hosts=["cam.local", "127.0.0.1"]))
    _check(policy, {"source": {"kind": "rtsp", "url": "rtsp://u:p@CAM.local:554/x"}})
    with pytest.raises(AccessError, match=re.escape("sink.url names a host outside http.allowed_hosts")):
        _check(policy, {"sink": {"kind": "rtsp", "url": "rtsp://203.0.113.9/push"}})
    with pytest.raises(AccessError, match=re.escape("source.url")):
        _check(policy, {"source": {"kind": "rtsp", "url": "rtsp://cam.local.evil.example/x"}})
    push = [{"kind": "rtsp", "url": "rtsp://cam.local/a"}, {"kind": "rtsp", "url": "rtsp://203.0.113.9/b"}]
    with pytest.raises(AccessError, match=re.escape("sink.url names a host outside http.allowed_hosts")):
        _check(policy, {"sinks": push})


def test_by_default_api_streams_reach_loopback_and_the_config_files_own_hosts_only() -> None:
    policy = ApiPolicy.from_config(HttpConfig(), {"cam.local"})
    _check(policy, {"source": {"kind": "rtsp", "url": "rtsp://CAM.local/x"}})
    _check(policy, {"sink": {"kind": "rtsp", "url": "rtsp://127.0.0.1:8554/out"}})
    _check(policy, {"sink": {"kind": "rtsp", "url": "rtsp://[::1]:8554/out"}})
    with pytest.raises(AccessError, match=re.escape("list more there, or '*' for any")):
        _check(policy, {"sink": {"kind": "rtsp", "url": "rtsp://203.0.113.9/push"}})
    anywhere = ApiPolicy.from_config(HttpConfig(allowed_hosts=["*"]))
    _check(anywhere, {"sink": {"kind": "rtsp", "url": "rtsp://203.0.113.9/push"}})


def test_api_outputs_take_compressed_codecs_and_a_capped_size(roots: dict[str, Path]) -> None:
    policy = _policy(roots)
    out = str(roots["media"] / "new.mp4")
    with pytest.raises(AccessError, match=re.escape("sink.codec 'rawvideo' is not among the encoders")):
        _check(policy, {"sink": {"kind": "file", "path": out, "codec": "rawvideo"}})
    _check(
        _policy(roots, api_codecs=["rawvideo"]), {"sink": {"kind": "file", "path": out, "codec": "rawvideo"}}
    )
    stream = StreamConfig.model_validate({"sinks": [{"kind": "file", "path": out}, {"kind": "null"}]})
    bounded = policy.bounded(stream)
    assert [getattr(s, "max_mb", None) for s in bounded.outputs()] == [4096, None]
    asked = StreamConfig.model_validate({"sink": {"kind": "file", "path": out, "max_mb": 10}})
    assert [getattr(s, "max_mb", None) for s in policy.bounded(asked).outputs()] == [10]


@pytest.mark.parametrize("field", ["threads", "workers"])
def test_model_threads_or_workers_past_the_cores_are_refused(roots: dict[str, Path], field: str) -> None:
    cores = os.cpu_count() or 1
    _check(_policy(roots), {"model": {field: cores}})
    with pytest.raises(
        AccessError, match=re.escape(f"model.{field} {cores + 1} is more than this machine's")
    ):
        _check(_policy(roots), {"model": {field: cores + 1}})
