"""The machine a figure was measured on: its CPU, the instruction sets its kernels use, onnxruntime and
its providers, and how busy the machine was.

CPU inference speed, fp32 and INT8, follows the instruction sets onnxruntime's kernels dispatch to, and
a machine other people use runs slower while they do; so every benchmark's table and every model card
says both beside its figures. ``streamer bench --isa`` can hide the newer instruction sets from CPUID
(:mod:`streamer.bench.isa` builds and loads the shim); what this process runs under is read here, so
the description says when the figures are a masked CPU's. Only :class:`LoadWatch` loads onnxruntime,
when it describes the machine, so building the ``streamer`` command line loads no runtime library.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HIDDEN",
    "ISA_FLAGS",
    "MASKED_ENV",
    "LoadWatch",
    "Machine",
    "busy_s",
    "cpu_isa",
    "cpu_name",
    "host_busy_s",
    "isa_caption",
    "isa_text",
    "load_average",
    "masked_isa",
    "process_busy_s",
]

ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16")
"""The CPU features CPU inference speed follows, fp32 and INT8: what every CPU figure is read beside."""

MASKED_ENV = "STREAMER_CPUID_MASKED"
"""Set by the shim itself once CPUID faulting is on: proof, inside the process, that the mask holds."""

HIDDEN = {"avx2": ("avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16")}
"""Which of ``ISA_FLAGS`` each cap hides."""


def masked_isa() -> str | None:
    """The cap this process runs under, or None when CPUID is not masked."""
    cap = os.environ.get(MASKED_ENV)
    return cap if cap in HIDDEN else None


def _cpuinfo(key: str) -> str | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_isa() -> tuple[str, ...]:
    """Which of ``ISA_FLAGS`` this process's kernels can use (empty where /proc/cpuinfo cannot tell):
    the CPU's, less those ``bench --isa`` hides from CPUID."""
    flags = set((_cpuinfo("flags") or "").split())
    cap = masked_isa()
    hidden = set(HIDDEN[cap]) if cap else set()
    return tuple(f for f in ISA_FLAGS if f in flags and f not in hidden)


def isa_caption(isa: Sequence[str], cap: str | None) -> str:
    """ISA flags for a figure's caption, saying so when ``bench --isa`` masked CPUID to ``cap``."""
    masked = f"; CPUID masked to {cap}, this core's clocks and caches" if cap else ""
    return f"{', '.join(isa) or 'none of ' + '/'.join(ISA_FLAGS)}{masked}"


def isa_text() -> str:
    """This process's ``isa_caption``."""
    return isa_caption(cpu_isa(), masked_isa())


def load_average() -> float:
    return os.getloadavg()[0]


def host_busy_s() -> float | None:
    """CPU seconds every core of the host has spent busy since boot (user, nice, system, interrupts,
    time stolen by the hypervisor), from /proc/stat; None where there is none to read."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def process_busy_s() -> float:
    """CPU seconds this process has spent busy, all its threads."""
    times = os.times()
    return times.user + times.system


def busy_s() -> tuple[float | None, float]:
    """(:func:`host_busy_s`, :func:`process_busy_s`), read together."""
    return host_busy_s(), process_busy_s()


@dataclass(frozen=True, slots=True)
class Machine:
    cpu: str
    cores: int
    onnxruntime: str
    providers: str
    """What onnxruntime offers here; the pipelines run on the first one their config asks for."""
    load_start: float
    load_end: float
    isa: tuple[str, ...] = ()
    """The CPU features INT8 and fp32 speed follow (``cpu_isa()``)."""
    isa_cap: str | None = None
    """Set when ``bench --isa`` hid the newer features: the kernels ran as on a CPU with only these."""

    def line(self) -> str:
        isa = f" ({isa_caption(self.isa, self.isa_cap)})"
        return (
            f"{self.cpu}{isa}, {self.cores} cores; onnxruntime {self.onnxruntime} ({self.providers}); "
            f"load average {self.load_start:.2f} at start, {self.load_end:.2f} at end"
        )


class LoadWatch:
    """Notes the load average when made; ``machine()`` notes it again and describes the machine."""

    def __init__(self) -> None:
        self.load = load_average()

    def machine(self) -> Machine:
        # Imported here: the CLI imports this module (through bench.isa) when it builds its commands.
        import onnxruntime as ort

        return Machine(
            cpu=cpu_name(),
            cores=os.cpu_count() or 1,
            onnxruntime=ort.__version__,
            providers=", ".join(ort.get_available_providers()),
            load_start=self.load,
            load_end=load_average(),
            isa=cpu_isa(),
            isa_cap=masked_isa(),
        )
