"""How a host thread waits for the GPU (``model.gpu_wait``), set through the CUDA runtime.

No CUDA device is here (a CUDA runtime may be installed, but with no driver its calls fail), so a
stand-in keeps one device's flags as the runtime does; the GPU lease's ``bench gpu --gpu-wait`` rows
measure what the setting is worth.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import pytest

import streamer.backend.cuda_runtime as cuda_runtime
from streamer.assets import DEFAULT_MODEL
from streamer.backend.cuda_runtime import GpuWait, set_gpu_wait
from streamer.backend.onnx import OnnxBackend
from streamer.config import load_config
from streamer.errors import ConfigError

MAP_HOST = 0x08


class StandInRuntime:
    """libcudart's three calls used, over one device's flags; ``refuse``: the error code that
    cudaSetDeviceFlags returns (0: it takes them)."""

    def __init__(self, flags: int = MAP_HOST, refuse: int = 0) -> None:
        self.flags = flags
        self.refuse = refuse
        self.devices: list[int] = []
        self.sets = 0

    def cudaSetDevice(self, device: ctypes.c_int) -> int:  # noqa: N802 (the C name)
        self.devices.append(device.value)
        return 0

    def cudaGetDeviceFlags(self, pointer: Any) -> int:  # noqa: N802
        pointer._obj.value = self.flags
        return 0

    def cudaSetDeviceFlags(self, flags: ctypes.c_uint) -> int:  # noqa: N802
        self.sets += 1
        if self.refuse:
            return self.refuse
        self.flags = flags.value
        return 0


@pytest.fixture(autouse=True)
def nothing_set_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_runtime, "_asked", {})


def test_each_wait_sets_the_devices_scheduling_bits_and_keeps_its_other_flags() -> None:
    runtime = StandInRuntime()
    assert set_gpu_wait(GpuWait.BLOCKING, device=1, library=runtime)
    assert runtime.flags == MAP_HOST | 0x04  # cudaDeviceScheduleBlockingSync
    assert runtime.devices == [1]
    assert set_gpu_wait(GpuWait.SPIN, device=1, library=runtime)
    assert runtime.flags == MAP_HOST | 0x01
    assert set_gpu_wait(GpuWait.AUTO, device=1, library=runtime)
    assert runtime.flags == MAP_HOST


def test_the_same_wait_asked_again_is_not_set_again() -> None:
    """Every backend on a GPU asks (a tier probe, each stream's model): the process sets it once."""
    runtime = StandInRuntime()
    for _ in range(3):
        assert set_gpu_wait(GpuWait.BLOCKING, library=runtime)
    assert runtime.sets == 1


def test_a_runtime_that_refuses_is_said_once_with_its_error_and_nothing_is_assumed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = StandInRuntime(refuse=708)
    with caplog.at_level(logging.WARNING, logger="streamer.backend.cuda_runtime"):
        assert not set_gpu_wait(GpuWait.BLOCKING, library=runtime)
        assert not set_gpu_wait(GpuWait.BLOCKING, library=runtime)  # each stream's model asks
    assert runtime.flags == MAP_HOST
    assert runtime.sets == 1
    assert caplog.text.count("model.gpu_wait blocking not set on GPU 0 (CUDA error 708") == 1


def test_without_a_cuda_runtime_it_says_so_and_sets_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cuda_runtime, "cuda_runtime", lambda: None)
    with caplog.at_level(logging.WARNING, logger="streamer.backend.cuda_runtime"):
        assert not set_gpu_wait(GpuWait.SPIN)
    assert "no CUDA runtime library is loaded" in caplog.text


def test_this_machines_own_cuda_runtime_or_its_absence_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """The lookup and the calls run for real: here a CUDA runtime without a driver or GPU (CUDA error
    35), or none at all; either way the wait is not set, and it is said once, not per model."""
    with caplog.at_level(logging.INFO, logger="streamer.backend.cuda_runtime"):
        first = set_gpu_wait(GpuWait.BLOCKING)
        assert set_gpu_wait(GpuWait.BLOCKING) is first
    said = [r for r in caplog.records if r.name == "streamer.backend.cuda_runtime"]
    assert len(said) == 1
    if not first:  # no GPU here, as in CI
        assert said[0].levelno == logging.WARNING
        assert "model.gpu_wait blocking not set" in said[0].getMessage()


def test_the_config_takes_the_three_waits_and_refuses_others() -> None:
    assert load_config(None, {}).model.gpu_wait is GpuWait.BLOCKING
    assert load_config(None, {"model.gpu_wait": "spin"}).model.gpu_wait is GpuWait.SPIN
    with pytest.raises(ConfigError, match="gpu_wait"):
        load_config(None, {"model.gpu_wait": "busy"})


def test_a_model_on_the_cpu_provider_sets_no_gpu_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[GpuWait] = []
    monkeypatch.setattr("streamer.backend.onnx.set_gpu_wait", lambda wait, device=0: asked.append(wait))
    OnnxBackend(DEFAULT_MODEL, providers=["CPUExecutionProvider"], gpu_wait=GpuWait.SPIN)
    assert asked == []
