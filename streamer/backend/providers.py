"""Which onnxruntime execution providers a model runs on, the options its sessions open with, and how
a provider's failures read.

Every graph a backend opens (the model, a streaming model's encoder, the graphs of frames kept on the
device) opens with one :class:`SessionSettings`, so all of them run on the same providers with the same
threads, profiling and provider options.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from streamer.backend.base import CPU_PROVIDER, CUDA_PROVIDER, TENSORRT_PROVIDER
from streamer.errors import ConfigError, ModelUnavailableError

__all__ = [
    "PROVIDER_PREFERENCE",
    "SessionSettings",
    "provider_fallback",
    "raise_if_out_of_memory",
    "resolve_providers",
]

PROVIDER_PREFERENCE = (TENSORRT_PROVIDER, CUDA_PROVIDER, CPU_PROVIDER)
"""What ``providers="auto"`` tries, fastest first; CPU always ends the list as the fallback."""

_OUT_OF_MEMORY = re.compile(
    r"out of memory|Failed to allocate memory|cudaErrorMemoryAllocation|CUDNN_STATUS_ALLOC_FAILED"
    r"|CUBLAS_STATUS_ALLOC_FAILED|bad_alloc",
    re.IGNORECASE,
)
"""How onnxruntime's CPU, CUDA and TensorRT providers word an allocation that failed."""


def resolve_providers(providers: str | Sequence[str]) -> list[str]:
    """The execution providers to ask onnxruntime for, in order, all of them available in this build."""
    available = ort.get_available_providers()
    if isinstance(providers, str):
        if providers != "auto":
            raise ConfigError(
                f"backend providers must be 'auto' or a list of provider names, got {providers!r}; "
                f"available here: {available}"
            )
        return [p for p in PROVIDER_PREFERENCE if p in available and p != CPU_PROVIDER] + [CPU_PROVIDER]
    wanted = list(providers)
    if not wanted:
        raise ConfigError(f"backend providers is an empty list; use 'auto' or name some of {available}")
    missing = [p for p in wanted if p not in available]
    if missing:
        raise ConfigError(
            f"execution providers {missing} are not available in this onnxruntime build; available: "
            f"{available}. Install onnxruntime-gpu for CUDA/TensorRT, or use providers: auto"
        )
    return wanted


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """How a backend's sessions open: on ``providers`` (resolved, in order) with each one's
    ``provider_options`` (TensorRT's fp16 and engine cache, say), ``threads`` intra-op threads (None:
    onnxruntime decides), spinning threads or not, and each graph's profile written under ``profile``
    where given."""

    providers: list[str]
    provider_options: Mapping[str, Mapping[str, str]]
    threads: int | None = None
    spin: bool = False
    profile: Path | None = None

    def options(self, graph: str) -> ort.SessionOptions:
        """The session options of the graph named ``graph`` (``model``, ``encoder``, ``device``), whose
        profile, where one is asked for, carries that name."""
        made = ort.SessionOptions()
        # Spinning intra-op threads wait faster between ops but burn the cores that decode and encode
        # threads need: on for a process that only infers, off (the default) inside a pipeline.
        made.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spin else "0")
        if self.threads is not None:
            made.intra_op_num_threads = self.threads
        if self.profile is not None:
            made.enable_profiling = True
            made.profile_file_prefix = str(self.profile / graph)
        return made

    def device_id(self, provider: str) -> int:
        """The GPU that ``provider`` runs on, as its options name it (0 unless they say)."""
        return int(self.provider_options.get(provider, {}).get("device_id", 0))


def provider_fallback(requested: Sequence[str], running: Sequence[str]) -> str | None:
    """The line to log when onnxruntime dropped providers it lists (a GPU build on a machine without
    the NVIDIA driver or device, or without the CUDA, cuDNN or TensorRT libraries it loads at run time):
    it falls back silently apart from its own error text, and the stream runs many times slower."""
    dropped = [p for p in requested if p not in running and p != CPU_PROVIDER]
    if not dropped:
        return None
    return (
        f"{', '.join(dropped)} listed by this onnxruntime build but did not start (no NVIDIA driver or GPU "
        f"visible, or its CUDA/cuDNN/TensorRT libraries missing: onnxruntime's own error is above); "
        f"running on {', '.join(running) or 'nothing'}. Check nvidia-smi, or set model.providers: "
        f"[{CPU_PROVIDER}] to silence this"
    )


def raise_if_out_of_memory(err: Exception, provider: str, model: str, what: str) -> None:
    """A call the device (or host) had no memory for fails alone: ModelUnavailableError, so the
    pipeline passes the frame through and this stream and the others go on; where memory frees up
    (another stream ends, a smaller batch) later calls succeed again. Other errors pass."""
    if _OUT_OF_MEMORY.search(str(err)):
        starved = ModelUnavailableError(
            f"{provider} ran out of memory for {model} on {what}: the frame passes "
            "through; lower the stream's resolution, runtime.max_batch or the streams on this device "
            f"({str(err).strip().splitlines()[0][:200]})"
        )
        starved.batch_bound = True
        raise starved from err
