"""``model: auto``: the best-quality model tier that keeps up with a stream, chosen on the stream's own size.

Which tier a CPU can run live depends on the frame size, the source's frame rate, the cores and their
instruction sets (INT8 pays on VNNI/AMX far more than on AVX2), so no tier is right everywhere. Once a
stream's source has opened, ``TierSelector.choose`` times each shipped tier alone on frames of that size
(the steady state the pipeline runs: a streaming tier encodes one new frame and fuses T cached maps per
output frame) and takes the first, best quality first, that runs ``headroom`` times the source's frame
rate; decode, encode and the event loop need the rest of the cores. A tier plainly too slow is timed only
until that is plain (at 720p on two cores the best tiers run a tenth of a 30 fps need; timing them in
full kept a stream waiting 6 s). Probes are kept per size and model settings, so the second stream of a
size starts at once. Where no tier keeps up, the fastest is taken (the last, cheapest, tier where all
were plainly too slow) and the choice says so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from streamer.assets import AUTO_TIERS
from streamer.backend.base import Backend

__all__ = ["AUTO", "Rate", "TierChoice", "TierProbe", "TierSelector", "model_fps"]

log = logging.getLogger(__name__)

AUTO: Final = "auto"
"""``model.path: auto``."""

SLOW: Final = 2.0
"""A tier's probe stops once the tier plainly runs under 1/SLOW of what the stream needs. Tiers that
run under the need but not that far under are timed in full, so that where none keeps up the fastest
is known; the plainly slow ones are slower than any of those."""


def model_fps(
    backend: Backend, width: int, height: int, seconds: float = 2.0, warmup: int = 3, runs: int = 5
) -> float:
    """Output frames per second of ``backend`` alone at batch 1 on frames of ``width`` x ``height``, in
    the steady state a stream sees: a streaming model encodes one new frame and fuses T cached maps per
    output frame; any other model runs its whole window; as many calls at once as the backend has
    workers, as a pipeline runs them. After ``warmup`` frames; at least ``runs`` timed, for at least
    ``seconds``."""
    return _timed(backend, width, height, seconds, warmup, runs, 0.0).fps


@dataclass(frozen=True, slots=True)
class Rate:
    """A timing's figure; ``bound``: cut short once it could no longer reach the rate asked for, so
    ``fps`` is the most it could have run (every call under way counted as done)."""

    fps: float
    bound: bool = False


def _timed(
    backend: Backend, width: int, height: int, seconds: float, warmup: int, runs: int, floor: float
) -> Rate:
    """``model_fps``, stopped early (a ``bound`` rate) once even finishing every call under way at
    that instant would leave the rate below ``floor``: at 720p on two cores the best tiers run a
    tenth of what a 30 fps source needs, and timing them in full kept a new stream waiting seconds."""
    rng = np.random.default_rng(0)
    t = backend.info.t
    if backend.info.streaming:
        frame = rng.integers(0, 256, (1, height, width, 3), dtype=np.uint8)
        window = backend.encode(frame) * t

        def one() -> None:
            backend.encode(frame)
            backend.fuse([window], frame)

    else:
        batch = rng.integers(0, 256, (1, t, 3, height, width), dtype=np.uint8)

        def one() -> None:
            backend.infer(batch)

    for _ in range(warmup):
        one()
    stop = threading.Event()
    done = [0] * max(1, backend.workers)
    failed: list[Exception] = []

    def calls(worker: int) -> None:
        try:
            while not stop.is_set():
                one()
                done[worker] += 1
        except Exception as err:  # raised again in the caller's thread
            failed.append(err)
            stop.set()

    start = time.perf_counter()
    threads = [threading.Thread(target=calls, args=(k,), name=f"model-fps-{k}") for k in range(len(done))]
    for thread in threads:
        thread.start()
    bound = 0.0
    try:
        while not stop.is_set():
            elapsed = time.perf_counter() - start
            bound = (sum(done) + len(done)) / elapsed if elapsed > 0 else float("inf")
            if bound < floor or (elapsed >= seconds and sum(done) >= runs):
                break
            stop.wait(0.005)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if failed:
        raise failed[0]
    if bound < floor:
        return Rate(bound, bound=True)
    return Rate(sum(done) / (time.perf_counter() - start))


@dataclass(frozen=True, slots=True)
class TierProbe:
    """One tier timed alone on the stream's frame size."""

    name: str
    path: Path
    fps: float
    bound: bool = False
    """Timed only until it was plainly too slow: ``fps`` is the most it runs."""

    @property
    def figure(self) -> str:
        return f"<={self.fps:.1f}" if self.bound else f"{self.fps:.1f}"


@dataclass(frozen=True, slots=True)
class TierChoice:
    """What ``model: auto`` took for a stream, and the figures it took it on."""

    path: Path
    name: str
    width: int
    height: int
    source_fps: float
    needed_fps: float
    """The source's frame rate times the headroom: what a tier must run alone."""
    keeps_up: bool
    probes: tuple[TierProbe, ...]

    def describe(self) -> str:
        """One log line's worth: the choice, the need, every tier's figure."""
        figures = ", ".join(f"{p.name} {p.figure}" for p in self.probes)
        verdict = "" if self.keeps_up else "; no tier keeps up, took the fastest"
        return (
            f"model auto chose {self.name} for {self.width}x{self.height} @ {self.source_fps:g} fps "
            f"(needs {self.needed_fps:.1f} fps alone; measured fps: {figures}){verdict}"
        )

    def as_dict(self) -> dict[str, object]:
        """What ``/streams`` shows."""
        return {
            "chosen": self.name,
            "size": f"{self.width}x{self.height}",
            "source_fps": round(self.source_fps, 3),
            "needed_fps": round(self.needed_fps, 1),
            "keeps_up": self.keeps_up,
            "probes": [{"model": p.name, "fps": round(p.fps, 1), "cut_short": p.bound} for p in self.probes],
        }


Loader = Callable[[Path], Backend]
"""Loads one tier with the stream's model settings (providers, threads)."""

Measure = Callable[[Backend, int, int, float, float], Rate]
"""A backend's rate alone on (width, height) frames, timed for about the seconds given, or cut short
once it is plainly below the floor given (``_timed``)."""


def _probe_fps(backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
    """``model_fps`` kept short: a new stream's output waits for the probe."""
    return _timed(backend, width, height, seconds, 1, 3, floor)


class TierSelector:
    """Chooses a tier per stream; thread-safe, one probe at a time (two at once would time each other)."""

    def __init__(
        self, tiers: Sequence[Path] = AUTO_TIERS, *, probe_s: float = 0.3, measure: Measure = _probe_fps
    ) -> None:
        if not tiers:
            raise ValueError("TierSelector needs at least one tier")
        self.tiers = tuple(tiers)
        self.probe_s = probe_s
        self._measure = measure
        self._lock = threading.Lock()
        self._probes: dict[tuple[Path, int, int, str], TierProbe] = {}

    def choose(
        self, load: Loader, settings: str, width: int, height: int, fps: float, headroom: float
    ) -> TierChoice:
        """Blocking (seconds on first sight of a size): run it in a worker thread. ``settings`` names
        the model settings the tiers load with, so probes of other settings are not reused."""
        needed = fps * headroom
        probes: list[TierProbe] = []
        with self._lock:
            for path in self.tiers:
                probe = self._probe(load, settings, path, width, height, needed / SLOW)
                probes.append(probe)
                if probe.fps >= needed and not probe.bound:
                    break
        keeps_up = probes[-1].fps >= needed and not probes[-1].bound
        if keeps_up:
            best = probes[-1]
        elif all(p.bound for p in probes):
            best = probes[-1]  # each plainly too slow, their bounds say nothing of which less so
        else:
            best = max((p for p in probes if not p.bound), key=lambda p: p.fps)
        return TierChoice(best.path, best.name, width, height, fps, needed, keeps_up, tuple(probes))

    def _probe(
        self, load: Loader, settings: str, path: Path, width: int, height: int, floor: float
    ) -> TierProbe:
        """A kept probe serves unless it was cut short at a bound that does not settle this floor."""
        key = (path, width, height, settings)
        probe = self._probes.get(key)
        if probe is None or (probe.bound and probe.fps >= floor):
            backend = load(path)
            try:
                rate = self._measure(backend, width, height, self.probe_s, floor)
                probe = self._probes[key] = TierProbe(backend.info.name, path, rate.fps, rate.bound)
            finally:
                backend.close()
            log.debug("model auto: %s runs %s fps alone at %dx%d", probe.name, probe.figure, width, height)
        return probe
