"""Configuration: pydantic models, loaded from YAML and overridden by ``key.path=value`` pairs.

Only the CLI calls :func:`load_config`; library code takes the validated objects. Every model forbids
unknown keys, so a typo fails loudly instead of silently running on a default.
"""

from __future__ import annotations

import difflib
import functools
import os
import posixpath
import re
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, Self, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from streamer.assets import AUTO_TIERS, DEFAULT_MODEL, resolve_shipped
from streamer.backend.base import ChannelOrder, Declared, Layout, on_cpu
from streamer.backend.cuda_runtime import GpuWait
from streamer.core.blend import FULL, Blend
from streamer.core.gate import MotionGate, SceneCutDetector, SkipAction
from streamer.core.keepalive import KeepAlive
from streamer.core.latency import LatencyBudget, MissAction
from streamer.core.windower import EdgePolicy, OutputPosition, Windower
from streamer.errors import ConfigError
from streamer.media.hwcodec import COMPRESSED_CODECS, Decode, VideoCodec
from streamer.media.samples import resolve_sample
from streamer.redact import redact_url
from streamer.serving.httpserve import HttpLimits
from streamer.sinks.file import DEFAULT_CRF
from streamer.webrtc.cors import check_origins
from streamer.webrtc.ice import IceServer, check_ice_url, is_loopback

__all__ = [
    "Config",
    "FileSinkConfig",
    "FileSourceConfig",
    "GateConfig",
    "HttpConfig",
    "IceServerConfig",
    "LatencyConfig",
    "ModelConfig",
    "NullSinkConfig",
    "RtspSinkConfig",
    "RtspSourceConfig",
    "RuntimeConfig",
    "StreamConfig",
    "SyntheticSourceConfig",
    "WebRtcConfig",
    "WhepSinkConfig",
    "WhipSourceConfig",
    "WindowConfig",
    "load_config",
    "stream_config",
]


class _Strict(BaseModel):
    # No inf or nan anywhere: an infinite timeout or backoff overflows where it is used, a nan compares false.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_control_characters(cls, data: Any) -> Any:
        """No setting holds a control character: a NUL in a path fails deep in the OS (and in a log line or
        a URL, others forge lines or headers), so each is refused here, naming the key."""
        if isinstance(data, dict):
            for key, value in data.items():
                found = _control_character(value)
                if found is not None:
                    raise PydanticCustomError(
                        "control_character",
                        "holds the control character {found}; paths, URLs and names take printable text only",
                        {"key": str(key), "found": repr(found)},
                    )
        return data


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _control_character(value: object) -> str | None:
    """The first control character in a string (or a list's strings), else None."""
    if isinstance(value, str | Path):
        found = _CONTROL.search(str(value))
        return None if found is None else found.group()
    if isinstance(value, list | tuple):
        return next((c for c in map(_control_character, value) if c is not None), None)
    return None


class FileSourceConfig(_Strict):
    kind: Literal["file"] = "file"
    path: Path
    """Any file PyAV reads (its first video stream is used), or ``sample:NAME`` for a sample clip."""
    max_frames: int | None = Field(None, ge=1, le=10**9)
    """Stop after this many frames (counted across passes with ``loop``); None reads the whole file."""
    noise_sigma: float = Field(0.0, ge=0.0, le=128.0)
    """Gaussian noise added on read (0..255 units): a known degradation for demos and benchmarks."""
    seed: int = Field(0, ge=0, le=2**32 - 1)
    realtime: bool = False
    """Release each frame at its PTS on the wall clock, as a live camera (drops its oldest, never queues)."""
    loop: bool = False
    """Start again at the end, timestamps continuing; each restart is a discontinuity. Drops the audio."""
    decode: Decode = "cpu"
    """Where the video is decoded: ``cpu``; ``nvdec``, an NVIDIA GPU's decoder (an error where it does
    not work); ``auto``, NVDEC where it works, the CPU otherwise, said once (``streamer.media.hwcodec``)."""

    @field_validator("path", mode="before")
    @classmethod
    def _sample(cls, value: Any) -> Any:
        return resolve_sample(value) if isinstance(value, str) else value


class SyntheticSourceConfig(_Strict):
    kind: Literal["synthetic"] = "synthetic"
    pattern: str = "testsrc2"
    width: int = Field(640, ge=16, le=7680)
    height: int = Field(360, ge=16, le=4320)
    fps: int = Field(30, ge=1, le=240)
    frames: int | None = Field(300, ge=1, le=10**9)
    noise_sigma: float = Field(0.0, ge=0.0, le=128.0)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    realtime: bool = False


_STREAM_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


class _Backoff(_Strict):
    reconnect: bool = True
    """Reconnect after a failure, a stall or the end; false: the first failure stops the run."""
    max_attempts: int | None = Field(None, ge=1, le=10**6)
    """Consecutive failed attempts before giving up; null retries for ever."""
    backoff_initial_s: float = Field(0.5, gt=0.0, le=3600.0)
    """First retry delay; doubles after each failure."""
    backoff_max_s: float = Field(10.0, gt=0.0, le=3600.0)
    """Cap on the retry delay."""
    jitter: float = Field(0.2, ge=0.0, lt=1.0)
    """Each delay varies by +/- this fraction, so many clients do not retry in lockstep."""

    def backoff(self) -> dict[str, Any]:
        """These settings as keyword arguments of RtspSource and RtspSink."""
        return self.model_dump(include=set(_Backoff.model_fields))


class RtspSourceConfig(_Backoff):
    kind: Literal["rtsp"] = "rtsp"
    url: str
    """rtsp:// or rtsps:// URL; inline credentials are fine, they are never logged."""
    transport: Literal["tcp", "udp"] = "tcp"
    open_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    read_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    stall_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    """No frame for this long: drop the connection and reconnect."""
    decode: Decode = "cpu"
    """Where the video is decoded: ``cpu``; ``nvdec``, an NVIDIA GPU's decoder (an error where it does
    not work); ``auto``, NVDEC where it works, the CPU otherwise, said once (``streamer.media.hwcodec``)."""


class WhipSourceConfig(_Strict):
    kind: Literal["whip"] = "whip"
    stream: str = Field("0", pattern=_STREAM_ID)
    """Publishers POST to /whip/{stream}."""
    open_timeout_s: float | None = Field(None, gt=0.0, le=86400.0)
    """How long to wait for the first publisher; None waits for ever."""
    end_on_unpublish: bool = False
    fps: int = Field(30, ge=1, le=240)
    relay_original: bool = True


class FileSinkConfig(_Strict):
    kind: Literal["file"] = "file"
    path: Path
    overwrite: bool = True
    """Replace an existing file. A stream added through the control API must set it to true itself."""
    codec: str = "libx264"
    """Any encoder PyAV has; ``auto``: h264_nvenc where NVENC works, libx264 otherwise, said once;
    h264_nvenc takes preset and crf as its nearest (``streamer.media.hwcodec``)."""
    preset: str = "veryfast"
    crf: int = Field(DEFAULT_CRF, ge=0, le=51)
    """libx264's constant quality: lower keeps more of the picture in a larger file. The default's cost
    to a camera's compressed stream is small beside what a model gains on it; 4 (near-lossless) keeps
    nearly all of it at several times the size, for recordings meant to keep what the model made; 0 is
    lossless (docs/benchmarks.md, "What a user receives")."""
    bitrate: int | None = Field(None, ge=1, le=10**9)
    gop: int | None = Field(None, ge=1, le=10**4)
    audio: Literal["keep", "drop"] = "keep"
    """``keep``: the source's first audio stream (a file's, an RTSP camera's or a WHIP publisher's) is
    written beside the video, its packets as they are (transcoded to AAC, or Opus for webm, where the
    container cannot hold the codec). A setting of the sink, since the sink is what writes it; synthetic
    sources have no audio to give. ``drop``: video only."""
    fragment_s: float | None = Field(1.0, gt=0.0, le=60.0)
    """mp4 and mov are written as fragments of at most this many seconds, each handed to the OS as it is
    made, so a process killed mid-recording (SIGKILL, power) leaves a file that plays to within about
    this and the encoder's lookahead of where it stopped. null: one index written at close, as a plain
    mp4 (a crash loses the whole file). ``.ts`` and ``.mkv`` are written as they go either way."""
    max_mb: int | None = Field(None, ge=1, le=10**8)
    """The file stops growing past this many megabytes: the output fails in one line, its file complete
    and playable, and the stream's other outputs go on. null: no limit (an output added through the
    control API gets ``http.max_output_mb`` at most)."""
    min_free_mb: int = Field(256, ge=0, le=10**9)
    """The output stops the same way when its disk's free space falls under this (checked about once
    a second), leaving room for the rest of the host."""
    encode: Literal["own", "live"] = "own"
    """``own``: the file is encoded with its own settings above. ``live``: it records the packets of the
    stream's first RTSP output (its bitrate, GOP and preset; codec, preset, crf, bitrate and gop here are
    not used), one encode for both, which saves a second encode's CPU (about half a core at 720p30).
    Needs an RTSP output in ``sinks``. Outputs with equal settings share an encode either way."""


class NullSinkConfig(_Strict):
    kind: Literal["null"] = "null"


class RtspSinkConfig(_Backoff):
    kind: Literal["rtsp"] = "rtsp"
    url: str
    """rtsp:// or rtsps:// URL to publish to (ANNOUNCE/RECORD)."""
    bitrate: int = Field(2_000_000, ge=1, le=10**9)
    gop: int = Field(30, ge=1, le=10**4)
    preset: str = "ultrafast"
    tune: str = "zerolatency"
    transport: Literal["tcp", "udp"] = "tcp"
    timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    threads: int | None = Field(None, ge=1, le=64)
    """libx264's threads; None: its own choice (about 1.5 per core), which competes with the model's."""
    codec: VideoCodec = "libx264"
    """``libx264``; ``h264_nvenc``, an NVIDIA GPU's encoder, which costs no host cores (an error where
    it does not work: the H100 and H200 have none); ``auto``, NVENC where it works, libx264 otherwise,
    said once. preset and tune are libx264's names; NVENC gets their nearest (``streamer.media.hwcodec``)."""
    audio: Literal["keep", "drop"] = "keep"
    """``keep``: the source's first audio stream (a file's, an RTSP camera's or a WHIP publisher's) is
    published as a second track, in sync with the video (AAC, G.711 and Opus as they are, other codecs
    as AAC). ``drop``: video only."""


class WhepSinkConfig(_Strict):
    kind: Literal["whep"] = "whep"
    stream: str = Field("0", pattern=_STREAM_ID)
    """Players POST to /whep/{stream}."""
    audio: Literal["keep", "drop"] = "keep"
    """``keep``: the source's first audio stream (a file's, an RTSP camera's or a WHIP publisher's) goes
    to players as Opus, in sync with the video, for players whose offer has an audio m-line. ``drop``:
    video only."""
    original: bool = True
    """Also play the unenhanced frames at /whep/{stream}.original (the viewer's left pane), each sent
    with its enhanced twin; false saves the second encode per player. A WHIP source relays its own."""


class IceServerConfig(_Strict):
    """A STUN or TURN server as browsers' ``RTCIceServer`` has it: ``urls``, ``username``, ``credential``."""

    urls: list[str] = Field(min_length=1, max_length=8)
    """stun:, stuns:, turn: or turns: URLs of one server (RFC 7064, 7065), e.g.
    ``turn:turn.example.net:3478?transport=udp``."""
    username: str | None = None
    credential: SecretStr | None = None
    """The TURN long-term password: a secret, shown nowhere (logs, errors, ``repr``) but to authorised
    clients, in the Link headers that advertise it."""

    @model_validator(mode="before")
    @classmethod
    def _credential_is_text(cls, data: Any) -> Any:
        """Refuse a credential that is not text here, where the error quotes the whole entry (which
        errors never show) rather than the field's value."""
        if isinstance(data, dict) and not isinstance(data.get("credential"), str | SecretStr | None):
            raise ValueError("the credential must be a string (quote it in YAML); the value is not shown")
        return data

    @model_validator(mode="after")
    def _usable(self) -> IceServerConfig:
        self.server()  # a ConfigError (a ValueError) naming what is wrong, never the credential
        return self

    def server(self) -> IceServer:
        """This entry for the WebRTC server, credential revealed."""
        secret = None if self.credential is None else self.credential.get_secret_value()
        return IceServer(tuple(self.urls), self.username, secret)


class _ServerLimits(_Strict):
    """Each connection's time and size on an HTTP server (``streamer.serving.httpserve.HttpLimits``)."""

    header_timeout_s: float = Field(10.0, gt=0.0, le=300.0)
    """A connection's first request headers not complete in this time get 408 and the connection closes."""
    body_timeout_s: float = Field(10.0, gt=0.0, le=300.0)
    """A request body not received in this time gets 408."""
    idle_timeout_s: float = Field(30.0, gt=0.0, le=3600.0)
    """A keep-alive connection without a request for this long is closed."""
    max_request_line: int = Field(8190, ge=256, le=65536)
    """Bytes of a request line; longer gets 414."""
    max_header_bytes: int = Field(8190, ge=256, le=65536)
    """Bytes of one header line; longer gets 431."""
    max_headers: int = Field(64, ge=8, le=1024)
    """Header lines in one request; more get 431."""
    max_connections: int = Field(256, ge=1, le=65536)
    """Connections open at once; one more is answered 503 and closed."""
    max_connections_per_client: int = Field(32, ge=1, le=65536)
    """Connections open at once from one client address; one more is answered 503 and closed."""

    def limits(self) -> HttpLimits:
        return HttpLimits(
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
            idle_timeout_s=self.idle_timeout_s,
            max_request_line=self.max_request_line,
            max_header_bytes=self.max_header_bytes,
            max_headers=self.max_headers,
            max_connections=self.max_connections,
            max_connections_per_client=self.max_connections_per_client,
        )


PLACEHOLDER_TOKEN = "change-me-to-a-long-random-token"
"""The token the compose recipe ships with: refused off loopback, where anyone could use it."""


class WebRtcConfig(_ServerLimits):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    token: str | None = Field(None, min_length=1, max_length=4096)
    ice_addresses: list[str] | None = None
    stun_servers: list[str] = Field(default_factory=list, max_length=8)
    """stun: or stuns: URLs; a STUN server needs no credential."""
    ice_servers: list[IceServerConfig] = Field(default_factory=list, max_length=8)
    """STUN and TURN servers with credentials: the server's own peers use them (aiortc takes the first
    STUN and the first TURN URL of all), and ``advertise_ice_servers`` tells clients of them."""
    advertise_ice_servers: bool | None = None
    """Send the STUN and TURN servers, credentials included, to authorised clients in ``Link: <...>;
    rel="ice-server"`` headers (RFC 9725) on the 201 answer and on OPTIONS; None: when a TURN server is
    configured."""
    cors_origins: list[str] = Field(default_factory=list, max_length=64)
    """Origins (``https://studio.example.net``) whose web pages may publish and play; ``['*']``: any
    (needs ``token``); []: the server's own pages only."""
    max_body_bytes: int = Field(64 * 1024, ge=1024, le=1024 * 1024)
    connect_timeout_s: float = Field(20.0, gt=0.0, le=600.0)
    publisher_stale_s: float = Field(3.0, gt=0.0, le=600.0)
    """A connected WHIP publisher that has sent no video for this long is replaced by a new offer for its
    stream (a browser tab closed abruptly stays 'connected' for about 30 s); before that, 409."""
    max_sessions: int = Field(64, ge=1, le=4096)
    """WHIP and WHEP sessions open at once; an offer past it gets 503 with Retry-After."""
    max_players: int = Field(16, ge=1, le=4096)
    """WHEP players of one stream at once (each has its own encoder); past it, 503 with Retry-After."""

    @field_validator("stun_servers")
    @classmethod
    def _stun_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not check_ice_url(url).startswith("stun"):
                raise ValueError(f"{url!r} is a TURN URL; list it under ice_servers with its credentials")
        return urls

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        return list(check_origins(origins))  # as browsers write them, so they compare exactly

    @model_validator(mode="after")
    def _no_placeholder_token(self) -> Self:
        if self.token == PLACEHOLDER_TOKEN and not is_loopback(self.host):
            raise ValueError(
                f"token is the recipe's placeholder {PLACEHOLDER_TOKEN!r}, and host {self.host} is reachable "
                "from other machines: set a long random token of your own (openssl rand -hex 24)"
            )
        return self


_MAX_PAD_MULTIPLE = 16
"""The largest pad multiple a model here declares is 4; tiles keep room for any up to this."""


class TensorRtConfig(_Strict):
    """What the TensorRT provider is given when it runs the model (``providers`` auto or listing it)."""

    fp16: bool = True
    """Let TensorRT build fp16 engines from the fp32 file (its accuracy checked by ``streamer bench gpu``'s
    parity row for fp16)."""
    cache_dir: Path | None = None
    """Where TensorRT keeps built engines and its timing cache, so a restart loads them instead of
    building again (minutes for a large model); None: every start builds. The config file's only: a
    stream added through the control API may not set it."""

    def provider_options(self) -> dict[str, str]:
        options = {"trt_fp16_enable": "1" if self.fp16 else "0"}
        if self.cache_dir is not None:
            cache = str(self.cache_dir)
            options |= {
                "trt_engine_cache_enable": "1",
                "trt_engine_cache_path": cache,
                "trt_timing_cache_enable": "1",
                "trt_timing_cache_path": cache,
            }
        return options


_TRITON_MODEL = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253}):[0-9]{1,5}")


class TritonModelConfig(_Strict):
    """``model.triton``: the model runs on a Triton Inference Server over gRPC (``streamer.backend.triton``),
    its contract read from the server's model configuration."""

    url: str
    """The server's gRPC endpoint as host:port (127.0.0.1:8001; no scheme)."""
    model: str
    """The Triton model's name; a streaming model's encoder is found through its parameters."""
    transport: Literal["grpc", "shm"] = "grpc"
    """grpc: tensors in the requests; shm: inputs through system shared memory, for a server on this
    host (its /dev/shm shared with this process)."""
    deadline_ms: float = Field(1000.0, gt=0.0, le=60_000.0)
    """A call not answered in this long fails and its frame passes through; left out, the stream's
    latency.budget_ms (1000 without one)."""
    failures: int = Field(3, ge=1, le=1000)
    """Failed calls in a row that open the circuit breaker: calls are then refused at once."""
    cooldown_s: float = Field(1.0, gt=0.0, le=60.0)
    """How long the breaker stays open before one call tries the server again."""
    access_token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The environment variable holding the token a server with restricted gRPC protocols (shared
    memory) expects; the token itself never sits in a config file."""

    @field_validator("url")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if not _HOST_PORT.fullmatch(value) or not 0 < int(value.rsplit(":", 1)[1]) < 65536:
            raise ValueError(
                f"model.triton.url must be host:port of the gRPC endpoint (no scheme); got {value!r}"
            )
        return value

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        if not _TRITON_MODEL.fullmatch(value) or value.startswith("."):
            raise ValueError(f"model.triton.model must be 1..128 of A-Z a-z 0-9 _ . - ; got {value!r}")
        return value

    def access_token(self) -> str | None:
        return os.environ.get(self.access_token_env) if self.access_token_env else None


Strength = Annotated[float, Field(ge=0.0, le=255.0, allow_inf_nan=False)] | Literal["auto"]
"""``model.strength``: a noise sigma in 0..255 levels, or ``auto`` (also what PATCH /streams/{id} takes)."""


class ModelConfig(_Strict):
    path: Literal["auto"] | Path | None = None
    """``auto``: once the source has opened, the shipped tier of best quality that runs ``headroom``
    times the source's frame rate on its frame size (``streamer.engine.tiers``). None: ``auto`` for a live
    source (RTSP, WHIP, or paced with ``realtime``), the shipped best-quality model (conv3d_t5) for a
    file read as fast as it can be."""
    providers: Literal["auto"] | list[str] = "auto"
    threads: int | None = Field(None, ge=1, le=1024)
    """onnxruntime intra-op threads; None: its default. More than the machine's cores only contend: a
    config file's value is cut to them (with a warning, as a config may be written for another
    machine); a stream added through the control API asking for more is refused."""
    spin: bool = False
    """Let onnxruntime's threads spin between ops: faster alone, slower beside decode and encode."""
    workers: int | None = Field(None, ge=1, le=64)
    """Model calls run at once (windows of one stream or of several), each on its own thread with the
    cores split between them where ``threads`` is unset; a recurrent model's steps still run one at a
    time per stream. None: 2 on the CPU provider (``streamer.app.CPU_WORKERS``; 1 with ``threads``
    set or on a one-core machine), 1 on a GPU's."""
    device_frames: bool | None = None
    """A window model (conv3d_t5, conv3d_t1_strength, your own) keeps each frame on the device once
    uploaded and makes its windows there, so one frame goes up and one comes down per output frame
    rather than a whole window (``streamer.backend.device_frames``). None: on for GPU providers (CUDA,
    TensorRT), off on the CPU's, where it saves nothing. A recurrent model (convlstm_strength) keeps
    its state there too, step to step: one frame up and one down per step instead of the whole state
    both ways. Streaming models keep their own path."""
    yuv420: bool | None = None
    """Frames travel between the codecs and a model on the device as 4:2:0 planes, converted to and
    from RGB on the device (``streamer.media.yuv``: once as each frame goes up, and in the model's graph on
    the way down) rather than by the host. A file or RTSP source
    hands on each decoded yuv420p frame as its planes, as they lie in the decoder's frame, and a window
    model's frames go up at half RGB's bytes; each enhanced frame (a window model's, a recurrent
    model's step) comes down as planes in the stream's encoder colour, and an H.264 encoder takes them
    as they are (libx264's host time per 1080p frame here: 8.2 ms from planes, 16.5 from RGB). The gate
    and the noise estimate read the Y plane; a stage that needs RGB (a region's paste) converts on
    first use. None: on for GPU providers, off on the CPU's, where the graph's conversions cost more
    than swscale's (about 35 against 5 ms at 1080p). Needs ``device_frames``."""
    gpu_wait: GpuWait = GpuWait.BLOCKING
    """How a thread that called the model on a GPU (CUDA, TensorRT) waits for it to finish: blocking
    sleeps until the GPU is done; spin polls it, holding a core at 100% for the whole call (CUDA's own
    choice, auto, is a spin wherever cores outnumber GPUs), cores that decode and encode the streams
    need (``streamer.backend.cuda_runtime``). One setting per GPU for the whole process. Ignored on the
    CPU provider."""
    tensorrt: TensorRtConfig = Field(default_factory=TensorRtConfig)
    warm_up: bool | None = None
    """Run the model once at a stream's frame size when its source opens, before the first live frame,
    and log how long it took: a GPU provider's first call at a size searches cuDNN's algorithms or
    builds a TensorRT engine (seconds), which would otherwise fall on live frames. None: on for GPU
    providers, off on the CPU's."""
    tile: int | None = Field(None, ge=64, le=16384)
    """Frames with a side longer than this are enhanced in overlapping tiles of about this size, so a
    large camera's activations stay bounded (window and streaming models); None: whole frames."""
    tile_overlap: int = Field(32, ge=0, le=1024)
    """Context each tile's crop adds on every side; at least the model's reach (conv3d_t5: about 26
    pixels), so tiled output equals whole-frame output."""
    headroom: float = Field(1.2, ge=1.0, le=10.0)
    """``auto``: how many times the source's frame rate a tier must run alone; decode, encode and the
    event loop share the cores with it. Measured with ``streamer bench live`` on 2 cores: tiers that
    ran 1.0x their 30 fps source alone enhanced 83% of it live, tiers at 1.2-1.5x enhanced 99.9-100%."""
    layout: Layout | None = None
    """How a model file without (or with wrong) ``streamer.layout`` metadata takes its frames: NTCHW,
    NCTHW, N(T*C)HW (channel-stacked) or NCHW (per frame, T = 1). None: the metadata, else the
    input's shape where it is unambiguous."""
    channel_order: ChannelOrder | None = None
    """RGB or BGR, over the model's ``streamer.channel_order``; None: the metadata, else RGB."""
    value_range: tuple[float, float] | None = None
    """What pixel values 0..255 map to in the model's float tensors, e.g. [0, 255] or [-1, 1], over its
    ``streamer.value_range``; None: the metadata, else [0, 1]."""
    scale: int | None = Field(None, ge=1, le=8)
    """How many times larger the model's output frames are (super-resolution), over its
    ``streamer.scale``; None: the metadata, else the static shapes' ratio, else 1."""

    triton: TritonModelConfig | None = None
    """The model runs on a Triton server instead of in this process; ``path`` stays unset."""
    strength: Strength = "auto"
    """For a model that takes a strength (an input ``strength``): the noise sigma, in 0..255 levels,
    it removes; ``auto``: the stream's own noise estimate (``streamer.core.noise``, shown in /streams as
    noise_sigma; through the model's ``streamer.strength_curve`` where it has one), the model's default
    until the first. Changed live with PATCH /streams/{id}. Models
    without the input ignore it."""
    blend: str = "auto"
    """How much of the model's change a stream gets by how damaged it is (do no harm,
    ``streamer.core.blend``): ``auto``, the ramps measured for the model (``streamer.blend``; the whole
    change for a model that states none); ``off``, the whole change always; or
    ``QP_NONE:QP_FULL,SIGMA_NONE:SIGMA_FULL``: none of the change for a stream whose decoder's mean
    H.264 quantizer and noise estimate are both at or below the first of each pair, all of it from the
    second of either (shown in /streams as quantizer, noise_sigma and blend)."""

    @field_validator("blend")
    @classmethod
    def _blend_form(cls, value: str) -> str:
        if value not in ("auto", "off"):
            Blend.parse(value, "model.blend")
        return value

    def build_blend(self) -> Blend | None:
        """The stream's blend; None: the model's own."""
        if self.blend == "auto":
            return None
        return FULL if self.blend == "off" else Blend.parse(self.blend, "model.blend")

    @model_validator(mode="after")
    def _one_place_for_the_model(self) -> ModelConfig:
        if self.triton is not None and self.path is not None:
            raise ValueError(
                "model.triton serves the model from a Triton server; remove model.path (or model.triton)"
            )
        return self

    @field_validator("path", mode="before")
    @classmethod
    def _shipped(cls, value: Any) -> Any:
        return resolve_shipped(value) if isinstance(value, str) else value

    @field_validator("value_range")
    @classmethod
    def _range_is_finite_and_ordered(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not (-1e6 <= value[0] < value[1] <= 1e6):
            raise ValueError(
                f"model.value_range must be [lo, hi] with -1e6 <= lo < hi <= 1e6; got {list(value)}"
            )
        return value

    @model_validator(mode="after")
    def _declared_for_a_file(self) -> ModelConfig:
        if self.declared().anything and not isinstance(self.path, Path):
            raise ValueError(
                "model.layout, model.channel_order, model.value_range and model.scale describe a model "
                "file of your own; set model.path to it (the shipped models and auto declare their own)"
            )
        return self

    def declared(self) -> Declared:
        """What this config says about the model over its metadata."""
        return Declared(self.layout, self.channel_order, self.value_range, self.scale)

    @model_validator(mode="after")
    def _tile_keeps_its_overlap(self) -> ModelConfig:
        if self.tile is not None and self.tile - 2 * self.tile_overlap < _MAX_PAD_MULTIPLE:
            raise ValueError(
                f"model.tile ({self.tile}) must exceed twice model.tile_overlap ({self.tile_overlap}) by at "
                f"least {_MAX_PAD_MULTIPLE}, or too little of a tile would be kept; raise tile or lower the "
                "overlap"
            )
        return self

    def file(self) -> Path:
        """The model file to load: the shipped default for None; for ``auto``, the first tier, which
        stands in until the stream's source has opened and a tier is chosen."""
        if self.path == "auto":
            return AUTO_TIERS[0]
        return DEFAULT_MODEL if self.path is None else self.path

    def session_key(self) -> str:
        """The settings a loaded model depends on (file, providers, threads, spin), as one string; how a
        stream uses it (tiles, auto's headroom, its strength) aside."""
        return self.model_dump_json(exclude={"tile", "tile_overlap", "headroom", "strength"})

    def with_file(self, path: Path) -> ModelConfig:
        """These settings with the model file ``path`` (a tier ``auto`` chose)."""
        return self.model_copy(update={"path": path})


class WindowConfig(_Strict):
    t: int | None = Field(None, ge=1, le=256)
    """None: the model's T. A number must equal it."""
    stride: int = Field(1, ge=1, le=256)
    position: OutputPosition | None = None
    """None: the model's output position."""
    edge: EdgePolicy = EdgePolicy.REPLICATE
    max_gap_s: float | None = Field(1.0, gt=0.0, le=3600.0)
    scene_cut: float | None = Field(40.0, gt=0.0, le=255.0)
    """Mean luma change (0..255) between frames that counts as an editing cut and ends the run."""

    def build(self, t: int, position: OutputPosition) -> Windower:
        return Windower(
            t=self.t if self.t is not None else t,
            stride=self.stride,
            position=self.position if self.position is not None else position,
            edge=self.edge,
            max_gap=self.max_gap_s,
        )

    def build_cuts(self) -> SceneCutDetector:
        return SceneCutDetector(self.scene_cut)


class GateConfig(_Strict):
    enabled: bool = True
    downscale_width: int = Field(160, ge=8, le=7680)
    pixel_threshold: float = Field(12.0, ge=0.0, le=255.0)
    area_on: float = Field(0.005, ge=0.0, le=1.0)
    area_off: float = Field(0.0025, ge=0.0, le=1.0)
    hold: int = Field(3, ge=1, le=10**4)
    refresh_s: float | None = Field(2.0, gt=0.0, le=86400.0)
    on_skip: SkipAction = SkipAction.REUSE
    tile: int | None = Field(None, ge=8, le=1024)
    """Decide per tile of this many pixels and enhance only the box of the changed tiles (window and
    streaming models with ``on_skip: reuse``); None: whole frames."""
    halo: int | None = Field(None, ge=0, le=512)
    """Context around the box the model also sees; at least its reach, so the box's pixels equal the
    whole frame's. None: the reach its card records (``reach_px``, ``python -m export.reach``: conv3d_t5
    27 px, the 720p tier 39) rounded up to a multiple of 4, or 32 for a model without one."""
    max_region: float = Field(0.5, gt=0.0, le=1.0)
    """A box (with its halo) covering more of the frame than this runs the whole frame instead."""
    tile_area: float = Field(0.05, gt=0.0, le=1.0)
    """Share of a tile's thumbnail samples that must move in one frame of the window for it to change."""

    @model_validator(mode="after")
    def _ordered(self) -> GateConfig:
        if self.area_off > self.area_on:
            raise ValueError(f"area_off ({self.area_off}) must not exceed area_on ({self.area_on})")
        return self

    def build(self) -> MotionGate:
        return MotionGate(
            enabled=self.enabled,
            downscale_width=self.downscale_width,
            pixel_threshold=self.pixel_threshold,
            area_on=self.area_on,
            area_off=self.area_off,
            hold=self.hold,
            refresh_s=self.refresh_s,
            tile=self.tile,
            halo=self.halo,
            max_region=self.max_region,
            tile_area=self.tile_area,
        )


class LatencyConfig(_Strict):
    budget_ms: float | None = Field(None, gt=0.0, le=60_000.0)
    on_miss: MissAction = MissAction.PASSTHROUGH

    def build(self) -> LatencyBudget:
        return LatencyBudget(self.budget_ms, self.on_miss)


class KeepAliveConfig(_Strict):
    enabled: bool = True
    """Live outputs (RTSP, WHEP) keep their clock while the source is silent (a camera stalling or
    reconnecting): the last frame again every frame period, then the no-signal card; so readers
    downstream (NVRs, players) neither time out nor reconnect. Files and the null sink never get
    fillers."""
    card_after_s: float | None = Field(10.0, ge=0.0, le=86_400.0)
    """Seconds of silence after which the no-signal card replaces the last frame; None: the last frame
    for as long as it lasts."""

    def build(self, fps: float) -> KeepAlive:
        return KeepAlive(1.0 / fps if fps > 0 else 1.0 / 30, self.card_after_s)


class RuntimeConfig(_Strict):
    max_batch: int | None = Field(None, ge=1, le=256)
    """Windows in one model call, from one stream or several that share the model; None: by provider
    (:meth:`batch_for`)."""
    max_wait_ms: float = Field(5.0, ge=0.0, le=1000.0)
    """How long a window may wait for windows of other streams to join its batch."""
    queue_size: int = Field(8, ge=1, le=1024)
    ring_capacity: int | None = Field(None, ge=1, le=1024)
    drain_timeout_s: float = Field(10.0, gt=0.0, le=600.0)
    """On SIGTERM/SIGINT or removal, how long in-flight frames may take to drain before sinks are closed."""
    stall_after_s: float = Field(5.0, gt=0.0, le=3600.0)
    """No frame from a source for this long: the stream reports ``stalled``."""
    sink_blocked_after_s: float = Field(2.0, gt=0.0, le=3600.0)
    """One sink write taking longer than this: the stream reports ``sink_blocked``."""
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    log_format: Literal["text", "json"] = "text"
    memory_budget_mb: int | None = Field(None, ge=16, le=10**8)
    """Memory the process may hold: itself (measured at start, and again as streams come and go) and its
    streams by their estimates (frames held, feature caches, model activations); a stream that does not
    fit is refused in one line. None: 80% of the container's memory limit where there is one, else half
    the machine's memory."""

    def batch_for(self, provider: str) -> int:
        """``max_batch``, or where unset 1 on the CPU provider and 8 on a GPU's.

        onnxruntime's CPU convolutions run a batch image by image with a larger working set, so a
        batch costs more than its windows one at a time (``streamer bench batching``, ``overhead``),
        and the session keeps memory for every batch size it has seen (``streamer bench soak``); a GPU
        is where one call for many windows pays.
        """
        if self.max_batch is not None:
            return self.max_batch
        return 1 if on_cpu(provider) else GPU_MAX_BATCH


GPU_MAX_BATCH = 8
"""``runtime.max_batch`` where unset and the model runs on a GPU provider (CUDA, TensorRT)."""


class HttpConfig(_ServerLimits):
    """The operations endpoint: /healthz, /readyz, /metrics, /streams (aiohttp)."""

    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=0, le=65535)
    """None: no HTTP endpoint; 0: any free port."""
    token: str | None = Field(None, min_length=1, max_length=4096)
    """Bearer token for every route (adding and removing streams included); without one, reads are open
    and only trusted loopback clients may add and remove streams."""
    read_token: str | None = Field(None, min_length=1, max_length=4096)
    """A second bearer token that reads (GET /streams, /metrics) but cannot add or remove: for monitoring."""
    token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The environment variable ``token`` is read from at start (a Kubernetes Secret given as env),
    so the token never sits in a config file; unset or empty there is an error, not an open endpoint."""
    read_token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The same for ``read_token``."""
    public_probes: bool = True
    """/healthz and /readyz answer without a token (Kubernetes probes); false: they need one too."""
    trust_loopback: bool | None = None
    """Without a token, loopback clients may add and remove streams. None: only while ``host`` is a
    loopback address (behind a proxy on the same host, every client looks local: set false)."""
    media_roots: list[Path] = Field(default_factory=list, max_length=64)
    """Directories whose files streams added through the API may read (file sources) and write (file
    sinks); empty: no file paths through the API. Sample clips are always allowed."""
    model_roots: list[Path] = Field(default_factory=list, max_length=64)
    """Directories whose ONNX files API streams may load; empty: only the shipped default model."""
    allowed_hosts: list[str] | None = Field(None, max_length=1024)
    """Hosts API streams may pull from or push to over RTSP besides loopback; ``['*']``: any. None: the
    hosts the config file's own streams use."""
    max_streams: int = Field(32, ge=1, le=4096)
    """Streams running at once, config and API together; an add past it gets 429."""
    max_output_mb: int = Field(4096, ge=1, le=10**9)
    """The largest file an output added through the API may write (its ``max_mb`` is capped to it)."""
    api_codecs: list[str] = Field(default_factory=lambda: list(COMPRESSED_CODECS), max_length=64)
    """Encoders an output added through the API may name; uncompressed ones (rawvideo: 0.7 MB a 360p
    frame) fill a disk in minutes, so they are left out unless listed here."""
    ended_retention_s: float = Field(300.0, ge=0.0, le=86400.0)
    """An ended stream's status stays in /streams this long, then it is removed with its metrics."""

    @model_validator(mode="before")
    @classmethod
    def _tokens_from_the_environment(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for key in ("token", "read_token"):
            variable = data.get(f"{key}_env")
            if variable is None:
                continue
            if data.get(key) is not None:
                raise ValueError(f"http.{key} and http.{key}_env are both set; keep one")
            value = os.environ.get(str(variable), "").strip()
            if not value:
                raise ValueError(
                    f"http.{key}_env names {variable}, which is unset or empty in this environment; set it "
                    f"(a Secret's key), or remove http.{key}_env"
                )
            data = {**data, key: value}
        return data

    def trusts_loopback(self) -> bool:
        if self.trust_loopback is not None:
            return self.trust_loopback
        return is_loopback(self.host)


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
_SHARED = ("model", "window", "gate", "latency", "keepalive")
"""Sections a stream may set for itself; the top-level ones are the defaults every stream starts from."""


class _Stream(_Strict):
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

    id: str = Field(DEFAULT_STREAM_ID, pattern=_STREAM_ID)
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
        return [StreamConfig(**{name: getattr(self, name) for name in ("source", *_SHARED)}, **outputs)]

    @model_validator(mode="before")
    @classmethod
    def _streams_inherit(cls, data: Any) -> Any:
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
            data = {**data, "streams": [_inherit(item, data) for item in streams]}
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


def _inherit(stream: Any, top: dict[str, Any]) -> Any:
    """A stream's shared sections over the top-level ones, key by key."""
    if not isinstance(stream, dict):
        return stream
    merged = dict(stream)
    for section in _SHARED:
        base, own = top.get(section), stream.get(section)
        if isinstance(base, dict) and (own is None or isinstance(own, dict)):
            merged[section] = {**base, **(own or {})}
    return merged


def stream_config(data: Any, config: Config) -> StreamConfig:
    """A stream added at run time (JSON from the control API), inheriting ``config``'s top-level
    sections like the streams of the file do. Raises ConfigError naming the bad field."""
    top = config.model_dump(mode="json", include=set(_SHARED))
    try:
        return StreamConfig.model_validate(_inherit(data, top))
    except ValidationError as exc:
        raise ConfigError(_describe(exc, lambda _: "stream")) from None


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        if node.get(key) is None:  # an absent section, or one the file left null (model.triton: null)
            node[key] = {}
        child = node[key]
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {key!r} is a value, not a section")
        node = child
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
    if isinstance(value, dict) and loc and value.get("kind") == loc[-1]:
        loc = loc[:-1]  # a source's or sink's kind, as pydantic names the member of the union
    elif first["type"] == "extra_forbidden" and len(loc) > 2 and loc[-2] in _KINDS:
        del loc[-2]  # the same, above an unknown key
    kind = first["type"]
    if kind == "control_character":
        loc.append(str(first.get("ctx", {}).get("key")))
    where = ".".join(loc)
    if kind == "extra_forbidden":
        hint = "" if (near := _nearest_key(where)) is None else f"did you mean {near!r}? "
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
