"""The model a stream runs: its file (or ``auto``, or a Triton server), where and how it runs
(providers, threads, TensorRT, the device path), and how much of its change a stream gets."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from streamer.assets import AUTO_TIERS, DEFAULT_MODEL, resolve_shipped
from streamer.backend.base import ChannelOrder, Declared, GpuWait, Layout
from streamer.config.base import Strict
from streamer.core.blend import Blend

__all__ = ["GpuWait", "ModelConfig", "Strength", "TensorRtConfig", "TritonModelConfig"]


_MAX_PAD_MULTIPLE = 16
"""The largest pad multiple a model here declares is 4; tiles keep room for any up to this."""


class TensorRtConfig(Strict):
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


class TritonModelConfig(Strict):
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


class ModelConfig(Strict):
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
    the way down) rather than by the host. A file or RTSP source hands on each decoded yuv420p frame as
    its planes, as they lie in the decoder's frame, and a window model's frames go up at half RGB's
    bytes; each enhanced frame (a window model's, a recurrent model's step) comes down as planes in the
    stream's encoder colour, and an H.264 encoder takes them as they are, sparing the host a colour
    conversion each way. The gate and the noise estimate read the Y plane; a stage that needs RGB (a
    region's paste) converts on first use. None: on for GPU providers, off on the CPU's, where the
    graph's conversions cost more than swscale's (docs/benchmarks.md). Needs ``device_frames``."""
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
    headroom: float = Field(1.1, ge=1.0, le=10.0)
    """``auto``: how many times the source's frame rate a tier must serve, once its streams' decode and
    encode (``streamer.engine.tiers.HOST_FPS``, more with every stream and every pixel) have their share
    of the cores: the margin for the event loop, the players and a moment's load (``streamer bench
    live`` measures how far a tier that only just keeps up falls behind)."""
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
