"""Giving memory back once a stream has gone, so a sidecar's RSS follows its streams down.

A stream's objects refer to each other (pipeline, source, hooks, metrics), so after it is removed its
frames, ring buffer and histograms wait for Python's cyclic collector, whose oldest generation runs
rarely: a process that added and removed streams kept growing in steps. ``release_memory`` collects
them at once, then asks glibc to return freed heap pages to the system (``malloc_trim``; a no-op
where the C library has none).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import os
from collections.abc import Callable

__all__ = ["default_budget_bytes", "process_rss", "release_memory"]

_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] | None = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None
    return trim


def release_memory() -> None:
    """Blocking (a full collection: milliseconds to tens of them); call it when a stream has ended."""
    collected = gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    log.debug("released memory: %d objects collected", collected)


def process_rss() -> int | None:
    """This process's resident memory in bytes (``/proc/self/statm``); None where there is no procfs."""
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _cgroup_limit() -> int | None:
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # cgroup v1 writes a huge number for "no limit"
            return int(text)
    return None


def default_budget_bytes() -> int:
    """For the process: 80% of the container's memory limit where there is one, else half the machine's
    memory (the rest for whatever shares the machine, and the allocator's slack)."""
    limit = _cgroup_limit()
    if limit is not None:
        return int(limit * 0.8)
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * 0.5)
