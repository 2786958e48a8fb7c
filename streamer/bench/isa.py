"""``streamer bench --isa avx2``: run a benchmark as an AVX2-only CPU would, on a CPU with more.

INT8 and fp32 speed follow the instructions onnxruntime's kernels dispatch to (VNNI doubles INT8
throughput), and users' CPUs range from AVX2-only to AMX. A machine with AVX-512 can run the AVX2 kernels
of every library in the process (onnxruntime's MLAS, numpy, FFmpeg, x264) when CPUID stops reporting the
newer features: ``cpuid_mask.c``, compiled here with the system's C compiler and loaded with LD_PRELOAD
into a fresh copy of the command, does that through Linux's CPUID faulting. What it cannot change is the
core itself: clocks, caches and how the core executes AVX2 stay this machine's, so the figures are this
machine's AVX2 kernels, not another CPU's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from streamer.errors import ConfigError
from streamer.measure.machine import HIDDEN, masked_isa

__all__ = ["ISA_CAPS", "REQUEST_ENV", "caps_env", "run_as"]


REQUEST_ENV = "STREAMER_ISA_CAP"
"""Set by ``run_as`` for the new process: the features the shim is to leave visible."""

ISA_CAPS = ("native", *HIDDEN)
"""``native``: the CPU as it is; ``avx2``: AVX-512, VNNI (AVX-512 and AVX) and AMX hidden."""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streamer"


def build_shim() -> Path:
    """Compiles ``cpuid_mask.c`` once per version of its source; returns the shared library."""
    source = resources.files(__package__).joinpath("cpuid_mask.c").read_bytes()
    machine = os.uname().machine
    if sys.platform != "linux" or machine not in ("x86_64", "AMD64"):
        raise ConfigError(f"--isa avx2 masks x86 CPUID on Linux; this is {sys.platform} on {machine}")
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ConfigError(
            "--isa avx2 compiles a small C library: install a C compiler (Debian: gcc libc6-dev)"
        )
    digest = hashlib.sha256(source).hexdigest()[:16]
    library = _cache_dir() / f"cpuid_mask-{digest}.so"
    if library.exists():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    source_path = library.with_suffix(".c")
    source_path.write_bytes(source)
    partial = library.with_suffix(f".{os.getpid()}.tmp")
    try:
        done = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(source_path)],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as err:
        raise ConfigError(f"--isa avx2: could not run the C compiler {compiler!r}: {err}") from err
    if done.returncode != 0:
        raise ConfigError(f"--isa avx2: {compiler} could not build {source_path}:\n{done.stderr.strip()}")
    partial.replace(library)
    return library


def caps_env(cap: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a process needs to run under ``cap``: the shim preloaded and the request set."""
    if cap not in HIDDEN:
        raise ConfigError(f"unknown ISA cap {cap!r}: choose one of {', '.join(ISA_CAPS)}")
    env = dict(os.environ if base is None else base)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{build_shim()}{':' + preload if preload else ''}"
    env[REQUEST_ENV] = cap
    return env


def run_as(cap: str) -> None:
    """Makes this command run under ``cap``: replaces the process with a masked copy of itself, or, in
    that copy, checks that the mask took. Returns only when the process may go on."""
    if cap == "native":
        return
    requested = os.environ.get(REQUEST_ENV)
    if requested is None:
        env = caps_env(cap)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    if requested != cap:
        raise ConfigError(
            f"--isa {cap} inside a process already asked for {requested}: run it from a plain shell"
        )
    if masked_isa() != cap:
        raise ConfigError(
            f"--isa {cap}: this kernel or CPU does not offer CPUID faulting (arch_prctl ARCH_SET_CPUID), so "
            "the features cannot be hidden; measure on a CPU that has only AVX2 instead"
        )
