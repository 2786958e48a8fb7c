"""The execution providers ``streamer bench gpu`` measures: the chain each runs in, the options each
gets (TensorRT's fp16 engines and caches), and which of them really load a model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from streamer.backend.cuda_runtime import GpuWait
from streamer.backend.onnx import OnnxBackend
from streamer.errors import StreamerError

__all__ = ["CPU", "CUDA", "GPU_PROVIDERS", "TENSORRT", "chain", "loaded_providers", "provider_options"]

TENSORRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
GPU_PROVIDERS = (TENSORRT, CUDA)


def provider_options(provider: str, precision: str, cache: Path) -> dict[str, dict[str, str]]:
    """TensorRT builds fp16 engines itself from the fp32 file and caches engines and timings."""
    if provider != TENSORRT:
        return {}
    trt = {
        "trt_fp16_enable": "1" if precision == "fp16" else "0",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": str(cache / f"trt-{precision}"),
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": str(cache),
    }
    return {provider: trt}


def chain(provider: str) -> list[str]:
    if provider == CPU:
        return [CPU]
    if provider == TENSORRT:
        return [provider, CUDA, CPU]
    return [provider, CPU]


def _loads(provider: str, model: Path, cache: Path, gpu_wait: GpuWait) -> str | None:
    """None where ``provider`` runs ``model``; else why not (a listed provider whose libraries are
    missing falls back to the next one, which onnxruntime only logs)."""
    try:
        backend = OnnxBackend(
            model,
            providers=chain(provider),
            provider_options=provider_options(provider, "fp32", cache),
            gpu_wait=gpu_wait,
        )
    except StreamerError as err:
        return str(err)
    if backend.info.provider != provider:
        return (
            f"listed by this onnxruntime build, but the session fell back to {backend.info.provider} "
            "(its libraries did not load; onnxruntime's verbose log names which)"
        )
    return None


def loaded_providers(
    providers: Sequence[str],
    available: Sequence[str],
    model: Path,
    cache: Path,
    gpu_wait: GpuWait,
    skipped: list[str],
) -> list[str]:
    """Those of ``providers`` that run ``model``, in order; each of the others is added to ``skipped``
    with why not."""
    loaded: list[str] = []
    for provider in providers:
        if provider not in available:
            skipped.append(f"{provider}: not in this onnxruntime build (pip install onnxruntime-gpu)")
            continue
        why = _loads(provider, model, cache, gpu_wait)
        if why is None:
            loaded.append(provider)
        else:
            skipped.append(f"{provider}: {why}")
    return loaded
