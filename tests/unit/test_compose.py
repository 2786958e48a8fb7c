"""deploy/compose: the Compose file is valid against the Compose Specification's schema (bundled in
check-jsonschema's wheel: no network), and its parts agree: streamer's config loads, reads and
publishes MediaMTX's paths on its port, its health check asks the port the config serves, and Frigate
records the path streamer publishes."""

from __future__ import annotations

import importlib.resources
import json
import urllib.parse
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from streamer.config import FileSinkConfig, RtspSinkConfig, RtspSourceConfig, WhepSinkConfig, load_config
from streamer.errors import ConfigError

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose"


def read(name: str) -> Any:
    return yaml.safe_load((COMPOSE / name).read_text())


def test_the_compose_file_is_valid_compose() -> None:
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(read("docker-compose.yml"))]
    assert errors == []
    bad = {"services": {"streamer": {"image": "x", "network_mode": "host", "portz": ["1:1"]}}}
    assert list(validator.iter_errors(bad))  # the schema refuses what is not Compose


OWN_TOKEN = {"webrtc.token": "a-token-of-the-users-own-making-0123456789"}
"""What a user sets before starting the recipe (its own token is a placeholder, refused off loopback)."""


def test_the_recipe_refuses_its_own_placeholder_token_in_one_line() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(COMPOSE / "streamer.yaml")
    text = str(refused.value)
    assert "\n" not in text
    assert "token is the recipe's placeholder" in text
    assert "host 0.0.0.0" in text


def test_streamer_reads_and_publishes_mediamtx_paths_and_is_checked_on_its_port() -> None:
    compose, mediamtx = read("docker-compose.yml"), read("mediamtx.yml")
    streamer = compose["services"]["streamer"]
    mount = next(v for v in streamer["volumes"] if v.startswith("./streamer.yaml:"))
    assert mount.split(":")[1] == streamer["command"][-1]
    config = load_config(COMPOSE / "streamer.yaml", OWN_TOKEN)
    (stream,) = config.stream_configs()
    assert stream.id == "cam"
    rtsp_port = compose["services"]["mediamtx"]["ports"][0].split(":")[0]
    assert mediamtx["rtspAddress"] == f":{rtsp_port}"
    source = stream.source
    assert isinstance(source, RtspSourceConfig)
    outputs = stream.outputs()
    pushed = [s for s in outputs if isinstance(s, RtspSinkConfig)]
    assert len(pushed) == 1
    for url in (source.url, pushed[0].url):
        parts = urllib.parse.urlsplit(url)
        assert str(parts.port) == rtsp_port
        assert parts.path.lstrip("/") in mediamtx["paths"]
    assert any(isinstance(s, WhepSinkConfig) and s.stream == "cam" for s in outputs)
    assert not any(isinstance(s, FileSinkConfig) for s in outputs)
    assert f"127.0.0.1:{config.http.port}/healthz" in " ".join(streamer["healthcheck"]["test"])
    assert config.http.port != 9090  # Prometheus's own port, on the same host network


def test_frigate_records_what_streamer_publishes() -> None:
    frigate = read("frigate.yml")
    config = load_config(COMPOSE / "streamer.yaml", OWN_TOKEN)
    (pushed,) = [s for s in config.stream_configs()[0].outputs() if isinstance(s, RtspSinkConfig)]
    (camera,) = frigate["cameras"].values()
    path = urllib.parse.urlsplit(camera["ffmpeg"]["inputs"][0]["path"])
    assert (path.hostname, path.path) == ("mediamtx", urllib.parse.urlsplit(pushed.url).path)
    assert "frigate" in read("docker-compose.yml")["services"]["frigate"]["profiles"]
