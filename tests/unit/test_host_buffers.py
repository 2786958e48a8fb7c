"""Host buffers for frames crossing to a GPU: reused only once nobody holds them, pinned within a budget.

CUDA cannot run here, so the runtime library that pins is a stand-in recording its calls; the pool
itself is the real one.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np

from streamer.backend.host_buffers import PAGE, BufferPool, CudaHostMemory


def test_a_buffer_serves_again_only_once_neither_it_nor_a_view_of_it_is_held() -> None:
    pool = BufferPool((2, 8, 8, 3), cap=4)
    first = pool.take()
    address = first.ctypes.data
    assert address % PAGE == 0
    assert first.shape == (2, 8, 8, 3)
    assert first.dtype == np.uint8
    assert pool.take().ctypes.data != address  # held: never handed out twice
    row = first[1]
    del first
    assert pool.take().ctypes.data != address  # a view still holds it
    del row
    assert pool.take().ctypes.data == address
    assert pool.kept == 2


def test_past_its_cap_the_pool_gives_plain_arrays_it_does_not_keep() -> None:
    pool = BufferPool((4,), cap=2)
    held = [pool.take() for _ in range(5)]
    assert pool.kept == 2
    assert len({a.ctypes.data for a in held}) == 5
    spare = held.pop()
    del held
    assert pool.take().ctypes.data != spare.ctypes.data  # only kept buffers come back


class FakeCudart:
    """cudaHostRegister/cudaHostUnregister as the CUDA runtime answers them, recorded."""

    def __init__(self, code: int = 0) -> None:
        self.registered: dict[int, int] = {}
        self.code = code

        def register(address: int, size: int, flags: int) -> int:
            if self.code == 0:
                self.registered[address] = size
            return self.code

        def unregister(address: int) -> int:
            self.registered.pop(address)
            return 0

        self.cudaHostRegister: Any = register
        self.cudaHostUnregister: Any = unregister


def test_pinned_buffers_are_unpinned_before_their_memory_is_freed_and_the_budget_holds() -> None:
    cudart = FakeCudart()
    memory = CudaHostMemory(cudart, budget=3 * 1000)  # type: ignore[arg-type]
    pool = BufferPool((1000,), cap=8, pin=memory.pin)
    held = [pool.take() for _ in range(4)]
    assert pool.pinned == 3
    assert memory.pinned == 3000
    assert set(cudart.registered) == {a.ctypes.data for a in held[:3]}
    del held, pool
    gc.collect()
    assert cudart.registered == {}
    assert memory.pinned == 0
    assert memory.peak == 3000


def test_a_refusal_from_cuda_is_said_once_and_buffers_stay_plain(caplog: Any) -> None:
    memory = CudaHostMemory(FakeCudart(code=2), budget=1 << 20)  # type: ignore[arg-type]
    pool = BufferPool((64,), cap=4, pin=memory.pin)
    held = [pool.take() for _ in range(3)]
    assert pool.pinned == 0
    assert len(held) == 3
    assert memory.failed
    said = [r.getMessage() for r in caplog.records if "cudaHostRegister" in r.getMessage()]
    assert said == [
        "cudaHostRegister refused 64 bytes (CUDA error 2): frames cross to the GPU from pageable memory, "
        "more slowly"
    ]


def test_threads_taking_and_letting_go_never_share_a_buffer() -> None:
    pool = BufferPool((64,), cap=4)
    clashes: list[int] = []

    def work(mark: int) -> None:
        for _ in range(500):
            buffer = pool.take()
            buffer[:] = mark
            if not (buffer == mark).all():  # another holder wrote into it meanwhile
                clashes.append(mark)
            del buffer

    threads = [threading.Thread(target=work, args=(mark,)) for mark in range(1, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clashes == []
    assert 1 <= pool.kept <= 4  # never more kept than the cap, however many threads asked
