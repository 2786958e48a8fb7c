"""The CUDA runtime that onnxruntime's CUDA provider loaded, for what onnxruntime does not expose:
page-locking host memory (``streamer.backend.host_buffers``) and how a host thread waits for the GPU
(:func:`set_gpu_wait`).

onnxruntime ends every call on a GPU provider by waiting for the GPU (``cudaStreamSynchronize``, its copies of
outputs to host memory too). CUDA's default wait on a machine with more cores than CUDA contexts is a spin:
the calling thread holds a core at 100% for as long as the GPU works, so the device path's host CPU time per
frame follows the GPU's own time per frame. Those are the cores that decode and encode every stream; a thread
that blocks on a synchronisation primitive gives them back and is woken when the GPU is done (TensorRT's
``trtexec`` waits so by default; spinning is its ``--useSpinWait``).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

from streamer.backend.base import GpuWait

__all__ = ["GpuWait", "cuda_runtime", "set_gpu_wait"]

log = logging.getLogger(__name__)

_CUDART = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")
_SCHEDULE_MASK = 0x07


_FLAGS = {GpuWait.AUTO: 0x00, GpuWait.SPIN: 0x01, GpuWait.BLOCKING: 0x04}
"""cudaDeviceScheduleAuto, cudaDeviceScheduleSpin and cudaDeviceScheduleBlockingSync."""

_library: Any = None
_looked = False
_looking = threading.Lock()
_setting = threading.Lock()
_asked: dict[int, tuple[GpuWait, bool]] = {}
"""By device: the wait last asked for, and whether CUDA took it."""


def cuda_runtime() -> Any:
    """The CUDA runtime library already loaded in this process (by onnxruntime's CUDA provider), as a
    ctypes library; None where there is none."""
    global _library, _looked
    with _looking:
        if not _looked:
            _looked = True
            for name in _CUDART:
                try:
                    _library = ctypes.CDLL(name)
                    break
                except OSError:
                    continue
        return _library


def set_gpu_wait(wait: GpuWait, device: int = 0, library: Any = None) -> bool:
    """Makes host threads wait for GPU ``device`` as ``wait`` says, for the whole process (CUDA keeps
    one setting per device; the last asked for holds). Other device flags are kept. Logs what it set,
    or why it could not, once per change asked for (every model on a GPU asks); True where the device
    now waits so. ``library``: the CUDA runtime (None: :func:`cuda_runtime`)."""
    with _setting:
        last = _asked.get(device)
        if last is not None and last[0] is wait:
            return last[1]
        taken = _set(wait, device, library if library is not None else cuda_runtime())
        _asked[device] = (wait, taken)
        return taken


def _set(wait: GpuWait, device: int, cudart: Any) -> bool:
    if cudart is None:
        log.warning("model.gpu_wait %s not set: no CUDA runtime library is loaded in this process", wait)
        return False
    flags = ctypes.c_uint(0)
    code = cudart.cudaSetDevice(ctypes.c_int(device))
    if code == 0:
        code = cudart.cudaGetDeviceFlags(ctypes.byref(flags))
    if code == 0:
        wanted = (flags.value & ~_SCHEDULE_MASK) | _FLAGS[wait]
        code = cudart.cudaSetDeviceFlags(ctypes.c_uint(wanted))
    if code == 0:
        code = cudart.cudaGetDeviceFlags(ctypes.byref(flags))
    # auto's own bits read back as CUDA resolved them, which need not be 0
    if code != 0 or (wait is not GpuWait.AUTO and flags.value & _SCHEDULE_MASK != _FLAGS[wait]):
        log.warning(
            "model.gpu_wait %s not set on GPU %d (CUDA error %d, device flags 0x%x): host threads wait "
            "for it as CUDA chose",
            wait,
            device,
            code,
            flags.value,
        )
        return False
    log.info("GPU %d: host threads wait for it by %s (device flags 0x%x)", device, wait, flags.value)
    return True
