"""The busy CPU seconds model auto reads to tell a neighbour's load from its own stream's."""

from __future__ import annotations

import sys

import pytest

from streamer.measure.machine import host_busy_s, process_busy_s


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_the_host_counts_this_process_s_busy_time_among_its_own() -> None:
    host, own = host_busy_s(), process_busy_s()
    assert host is not None
    assert host >= own > 0.0  # the host's busy time since boot includes this process's
    sum(i * i for i in range(200_000))
    assert process_busy_s() >= own
    later = host_busy_s()
    assert later is not None
    assert later >= host
