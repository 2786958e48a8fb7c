"""Host buffers for frames crossing to and from a GPU: reused, and page-locked where CUDA allows.

A crossing from or to fresh pageable memory is slow, and slower the larger the batch: CUDA copies
pageable memory through a bounce buffer, and a fresh array of a batch's output (50 MB at 1080p, batch
8) is mapped page by page by the kernel as the copy first touches it. Buffers that stay (a pool) are
touched once; page-locked ("pinned") ones are copied by the GPU's DMA engine directly, without the
bounce. ``bench gpu``'s ``frames_fresh`` path, a fresh array for every frame, is the comparison.

A buffer goes back into use once nothing outside the pool refers to it: an output frame lives on in
the pipeline (queued for the encoder, kept as the last enhanced frame) for as long as it is needed,
and the pool only hands out buffers nobody holds. Pinning is done through the CUDA runtime that
onnxruntime's CUDA provider loaded (``cudaHostRegister``); where it is absent (the CPU provider, no
CUDA), buffers are still reused, unpinned. Page-locked memory is memory the OS cannot swap or move, so
what a process pins is capped (``PINNED_BYTES``); past it, buffers are plain.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import threading
import weakref
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from streamer.backend.cuda_runtime import cuda_runtime

__all__ = ["PINNED_BYTES", "BufferPool", "CudaHostMemory", "cuda_host_memory"]

log = logging.getLogger(__name__)

PINNED_BYTES = 1 << 30
"""The most host memory one process pins for frames (1 GiB: 170 frames of 1080p)."""
PAGE = 4096


class CudaHostMemory:
    """Pins and unpins host memory through the CUDA runtime library, within a byte budget."""

    def __init__(self, library: ctypes.CDLL, budget: int = PINNED_BYTES) -> None:
        self._register = library.cudaHostRegister
        self._register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        self._register.restype = ctypes.c_int
        self._unregister = library.cudaHostUnregister
        self._unregister.argtypes = [ctypes.c_void_p]
        self._unregister.restype = ctypes.c_int
        self.budget = budget
        self.pinned = 0
        self.peak = 0
        """The most bytes pinned at once, for reports."""
        self._lock = threading.Lock()
        self._failed = False

    def pin(self, array: npt.NDArray[np.uint8]) -> bool:
        """Page-locks ``array``'s memory until it is freed; False where the budget or CUDA refuses."""
        size = array.nbytes
        with self._lock:
            if self._failed or self.pinned + size > self.budget:
                return False
            code = self._register(array.ctypes.data, size, 0)
            if code != 0:
                self._failed = True
                log.warning(
                    "cudaHostRegister refused %d bytes (CUDA error %d): frames cross to the GPU from "
                    "pageable memory, more slowly",
                    size,
                    code,
                )
                return False
            self.pinned += size
            self.peak = max(self.peak, self.pinned)
        # Unpinned before numpy frees the memory: a freed range left registered would refuse the next.
        owner = array.base if array.base is not None else array
        weakref.finalize(owner, self._release, array.ctypes.data, size)
        return True

    @property
    def failed(self) -> bool:
        """CUDA refused to pin once, and nothing has been pinned since."""
        return self._failed

    def _release(self, address: int, size: int) -> None:
        self._unregister(address)
        with self._lock:
            self.pinned -= size


_host_memory: CudaHostMemory | None = None
_looked = False
_looking = threading.Lock()


def cuda_host_memory() -> CudaHostMemory | None:
    """The process's pinning, through the CUDA runtime already loaded (by onnxruntime's CUDA
    provider); None where there is none."""
    global _host_memory, _looked
    with _looking:
        if not _looked:
            _looked = True
            library = cuda_runtime()
            if library is not None and hasattr(library, "cudaHostRegister"):
                _host_memory = CudaHostMemory(library)
        return _host_memory


def _aligned(shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
    """A uint8 array of ``shape`` starting on a page boundary, as pinning whole pages wants."""
    size = int(np.prod(shape))
    raw = np.empty(size + PAGE, np.uint8)
    start = -raw.ctypes.data % PAGE
    return raw[start : start + size].reshape(shape)


class _Lease:
    """What a handed-out array's memory belongs to while it is out. numpy makes an array (and every view
    of it) keep the object its memory came from, so this lives exactly as long as the last of them,
    and its end gives the buffer back (``weakref.finalize``): no reference counting by hand."""

    __slots__ = ("__array_interface__", "__weakref__", "buffer")

    def __init__(self, buffer: npt.NDArray[np.uint8]) -> None:
        self.buffer = buffer
        self.__array_interface__ = buffer.__array_interface__


class BufferPool:
    """Host arrays of one shape, handed out again once nothing holds them (or a view of them) any
    more; at most ``cap`` kept, past which ``take`` gives plain fresh arrays."""

    def __init__(
        self,
        shape: tuple[int, ...],
        cap: int,
        pin: Callable[[npt.NDArray[np.uint8]], bool] | None = None,
    ) -> None:
        self.shape = shape
        self.cap = cap
        self._pin = pin
        self._free: collections.deque[npt.NDArray[np.uint8]] = collections.deque()
        """Buffers nobody holds: appended by the finalizers (on whichever thread let go last; a
        deque's append and pop need no lock)."""
        self._made = 0
        self._lock = threading.Lock()
        self.pinned = 0
        """How many of the kept buffers are page-locked."""

    def take(self) -> npt.NDArray[np.uint8]:
        """A buffer nobody else holds: a kept one, else a new one (kept while under ``cap``)."""
        try:
            buffer = self._free.pop()
        except IndexError:
            with self._lock:
                if self._made >= self.cap:
                    return np.empty(self.shape, np.uint8)
                self._made += 1
            buffer = _aligned(self.shape)
            if self._pin is not None and self._pin(buffer):
                with self._lock:
                    self.pinned += 1
        lease = _Lease(buffer)
        weakref.finalize(lease, self._free.append, buffer)
        handed: npt.NDArray[np.uint8] = np.asarray(lease)
        return handed

    @property
    def kept(self) -> int:
        return self._made
