"""``model: auto``: the best-quality model tier that keeps up with a stream, chosen on the stream's own size.

Which tier a CPU can run live depends on the frame size, the source's frame rate, the cores and their
instruction sets (INT8 pays on VNNI/AMX far more than on AVX2), so no tier is right everywhere. Once a
stream's source has opened, ``TierSelector.choose`` times each shipped tier alone on frames of that size (the
steady state the pipeline runs: a streaming tier encodes one new frame and fuses T cached maps per output
frame) and takes the first, best quality first, that serves ``headroom`` times the source's frame rate once
the streams' decode and encode (``HOST_FPS``, scaled as the cards are) have their share of the cores. The
cheapest tier is timed first, and a better tier that its card (scaled by how fast this machine ran the
cheapest against its own card) puts under half the need is not timed at all; one timed plainly too slow is
timed only until that is plain; one timed near the need is timed again for longer, so that choosing where the
better tiers run far under the need costs one tier's timing, not every tier's. Probes are kept per size and
model settings, so the second stream of a size starts at once. Where no tier keeps up, the fastest is taken
and the choice says so.

Timing tiers once a source has opened holds its first frames while they run, and a live source does not
wait. So a service first calibrates (``TierSelector.calibrate``, before any source opens or a stream
is added): the cheapest tiers timed on a reference size say how fast this machine runs against the
cards. A stream then starts at once (``TierSelector.start``) on the best tier whose card, scaled so,
keeps up; from there ``streamer.engine.retier`` moves it on its own measured calls, holding no frame.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from streamer.assets import AUTO_TIERS
from streamer.backend.base import Backend

__all__ = [
    "AUTO",
    "CALIBRATION_SIZE",
    "HOST_FPS",
    "Rate",
    "TierChoice",
    "TierProbe",
    "TierSelector",
    "model_fps",
    "needed_alone",
    "remedy",
    "speed_card",
]

log = logging.getLogger(__name__)

AUTO: Final = "auto"
"""``model.path: auto``."""

SLOW: Final = 2.0
"""A tier's probe stops once the tier plainly runs under 1/SLOW of what the stream needs. Tiers that
run under the need but not that far under are timed in full, so that where none keeps up the fastest
is known; the plainly slow ones are slower than any of those."""


def remedy(model: str) -> str:
    """What to do for a stream on ``model`` that cannot keep up, as the budget warning says it: the
    next faster shipped tier; on the fastest, fewer pixels or streams; on any other model, ``auto``."""
    names = [path.name.removesuffix(".onnx") for path in AUTO_TIERS]
    spelt = [re.sub(r"[-.]", "_", name) for name in names]  # stream_t5.int8 names itself stream_t5-int8
    general = "a smaller resolution, fewer streams on this host, window.stride 2, or a larger budget"
    mine = re.sub(r"[-.]", "_", model)
    if mine not in spelt:
        return f"set model.path: auto (the best shipped tier that keeps up at this size), {general}"
    at = spelt.index(mine)
    if at + 1 == len(names):
        return f"{model} is the fastest shipped tier: {general}"
    return f"set model.path: shipped:{names[at + 1]} (the next faster tier), or {general}"


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
    that instant would leave the rate below ``floor``: a tier far under what the stream needs is
    plain within a few calls, and timing it in full would keep the stream waiting for nothing."""
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
    """Plainly too slow: timed only until that was plain (``fps`` is the most it runs), or not timed
    at all (``estimated``)."""
    estimated: bool = False
    """Not timed: ``fps`` is its card's figure scaled by how fast this machine ran the cheapest tier."""

    @property
    def figure(self) -> str:
        if self.estimated:
            return f"~{self.fps:.1f}"
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
    """What a tier must run alone: the source's frame rate times the headroom and the streams sharing
    the cores, with their host work beside it (``needed_alone``); ``math.inf`` where that work alone
    would take the cores."""
    keeps_up: bool
    probes: tuple[TierProbe, ...]
    streams: int = 1
    """The streams the choice counted on these cores, this one included."""
    holds: bool = True
    """Where no tier keeps up with the headroom: whether the one taken keeps up without it (the
    streams' rate itself, their host work beside it), so that it runs them, with less margin."""

    def describe(self) -> str:
        """One log line's worth: the choice, the need, every tier's figure."""
        figures = ", ".join(f"{p.name} {p.figure}" for p in self.probes)
        verdict = ""
        if not self.keeps_up and self.holds:
            verdict = (
                "; no tier keeps up with model.headroom's margin: took the fastest, which keeps up without it"
            )
        elif not self.keeps_up:
            verdict = "; no tier keeps up, took the fastest"
        how = "estimated fps (cards x this machine)" if self.estimated else "measured fps"
        shared = f", {self.streams} streams on these cores" if self.streams > 1 else ""
        return (
            f"model auto chose {self.name} for {self.width}x{self.height} @ {self.source_fps:g} fps "
            f"(needs {self.need}{shared}; {how}: {figures}){verdict}"
        )

    @property
    def need(self) -> str:
        """``needed_fps`` in words."""
        if math.isinf(self.needed_fps):
            return "more than decode and encode leave of these cores"
        return f"{self.needed_fps:.1f} fps alone beside decode and encode"

    @property
    def estimated(self) -> bool:
        """Chosen on the cards scaled by the calibration, no tier timed on this size."""
        return all(p.estimated for p in self.probes)

    def as_dict(self) -> dict[str, object]:
        """What ``/streams`` shows."""
        return {
            "chosen": self.name,
            "size": f"{self.width}x{self.height}",
            "source_fps": round(self.source_fps, 3),
            "needed_fps": round(self.needed_fps, 1) if math.isfinite(self.needed_fps) else None,
            "streams": self.streams,
            "keeps_up": self.keeps_up,
            "probes": [
                {
                    "model": p.name,
                    "fps": round(p.fps, 1),
                    "cut_short": p.bound and not p.estimated,
                    "estimated": p.estimated,
                }
                for p in self.probes
            ],
        }


Loader = Callable[[Path], Backend]
"""Loads one tier with the stream's model settings (providers, threads)."""

Measure = Callable[[Backend, int, int, float, float], Rate]
"""A backend's rate alone on (width, height) frames, timed for about the seconds given, or cut short
once it is plainly below the floor given (``_timed``)."""


def _probe_fps(backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
    """``model_fps`` kept short: a new stream's output waits for the probe."""
    return _timed(backend, width, height, seconds, 1, 3, floor)


CardFps = Callable[[Path, int, int], float | None]
"""A tier's fps alone at (width, height) on the machine its card was written on; None: not recorded."""


def card_fps(path: Path, width: int, height: int) -> float | None:
    """From the model card beside ``path`` (``MODEL.json``; an INT8 file's is its fp32 source's): the
    fps recorded at the size nearest in pixels, scaled by the pixel ratio."""
    recorded = _recorded(path)
    if not recorded:
        return None
    pixels = width * height
    (w, h), fps = min(recorded.items(), key=lambda item: abs(math.log(item[0][0] * item[0][1] / pixels)))
    return fps * (w * h) / pixels


def speed_card(path: Path) -> Path:
    """The card that records a tier's speed: its own (``MODEL.json``), an INT8 file's its fp32
    source's (in ``int8.measured``)."""
    if path.name.endswith(".int8.onnx"):
        return path.with_name(path.name.removesuffix(".int8.onnx") + ".json")
    return path.with_suffix(".json")


@functools.lru_cache(maxsize=32)
def _recorded(path: Path) -> dict[tuple[int, int], float]:
    """The fps a model's card records per frame size, read once per process: the tier mover asks on
    the event loop at every decision, and the shipped cards do not change while it runs."""
    int8 = path.name.endswith(".int8.onnx")
    try:
        data = json.loads(speed_card(path).read_text())
    except (OSError, ValueError):
        return {}
    recorded: dict[tuple[int, int], float] = {}
    if int8:
        measured = data.get("int8", {}).get("measured", {})
        for key, value in measured.items():
            size = _size(key.removeprefix("fps_"))
            if size is not None and isinstance(value, dict) and isinstance(value.get("int8"), int | float):
                recorded[size] = float(value["int8"])
    else:
        for key, value in data.get("cpu_benchmark", {}).items():
            size = _size(key)
            if size is not None and isinstance(value, dict) and isinstance(value.get("fps"), int | float):
                recorded[size] = float(value["fps"])
    return recorded


def _size(text: str) -> tuple[int, int] | None:
    width, _, height = text.partition("x")
    return (int(width), int(height)) if width.isdigit() and height.isdigit() else None


CALIBRATION_SIZE: Final = (640, 360)
"""The frame size ``TierSelector.calibrate`` times the cheapest tiers on; the cards scale by pixels."""

HOST_FPS: Final = 360.0
"""A stream's work outside the model (decode, colour conversion, gate, encode, sending) as a card
figure: the frames of ``CALIBRATION_SIZE`` per second the machine the cards were written on runs it at,
were that work alone on the cores. Scaled by pixels and by the calibration as a card is. A tier and its
streams' host work share the cores, so a tier serves ``1 / (1/tier + 1/host)`` frames per second, and
the more streams, the less of the cores is left to it; one headroom for every stream count would leave
four streams too little and one too much (docs/benchmarks.md, "Counting decode and encode")."""


def needed_alone(needed: float, width: int, height: int, host: float | None) -> float:
    """What a tier must run alone for its streams to get ``needed`` frames per second of this size once
    their host work shares the cores (``host``: its figure at ``CALIBRATION_SIZE`` on this machine, as
    ``HOST_FPS`` scaled by the calibration; None: not counted); ``math.inf`` where the host work alone
    would take every core."""
    if host is None:
        return needed
    host *= CALIBRATION_SIZE[0] * CALIBRATION_SIZE[1] / (width * height)
    if needed >= host:
        return math.inf
    return 1.0 / (1.0 / needed - 1.0 / host)


CALIBRATED: Final = 2
"""How many of the cheapest tiers ``TierSelector.calibrate`` times. Tiers do not keep their cards'
ratios on every machine (on AVX2 kernels the quarter tier loses more of its speed than the tiny one),
so the slowest against its card sets the speed, and a wrong estimate picks a cheaper tier, not a
dearer one."""

NEAR: Final = 0.15
"""A tier timed within this fraction of what a stream needs is timed again, for longer."""
NEAR_TIMES: Final = 4.0


class TierSelector:
    """Chooses a tier per stream; thread-safe, one probe at a time (two at once would time each other).

    The last tier (the cheapest) is timed first: its figure against its card's says how fast this
    machine is against the one the cards were written on, and a better tier whose card, scaled so,
    puts it under 1/SLOW of the need is not timed at all (shown as ``~`` its estimate). At 720p on two
    cores that leaves one tier to time instead of five; the SLOW margin absorbs machines whose ratios
    differ (INT8 on VNNI or AMX), and a wrong estimate only ever picks a cheaper tier."""

    def __init__(
        self,
        tiers: Sequence[Path] = AUTO_TIERS,
        *,
        probe_s: float = 0.3,
        measure: Measure = _probe_fps,
        cards: CardFps = card_fps,
        host: float | None = HOST_FPS,
    ) -> None:
        if not tiers:
            raise ValueError("TierSelector needs at least one tier")
        self.tiers = tuple(tiers)
        self.probe_s = probe_s
        self._measure = measure
        self._cards = cards
        self._host = host
        """``HOST_FPS``, or None: the streams' host work not counted."""
        self._lock = threading.Lock()
        self._probes: dict[tuple[Path, int, int, str], TierProbe] = {}
        self._speeds: dict[str, float | None] = {}
        """Per model settings, this machine's speed against the cards (None: no card to scale)."""

    def calibrate(self, load: Loader, settings: str) -> float | None:
        """Blocking (a second or two, once per model settings): run it in a worker thread before a
        source opens. This machine's speed against the cards: each of the ``CALIBRATED`` cheapest
        tiers timed in full on ``CALIBRATION_SIZE`` over its card's figure, the lowest of those; None
        where none has a card."""
        with self._lock:
            if settings not in self._speeds:
                width, height = CALIBRATION_SIZE
                speeds = []
                for path in self.tiers[-CALIBRATED:]:
                    recorded = self._cards(path, width, height)
                    if recorded:
                        speeds.append(self._probe(load, settings, path, width, height, 0.0).fps / recorded)
                self._speeds[settings] = min(speeds, default=None)
            return self._speeds[settings]

    def start(
        self, settings: str, width: int, height: int, fps: float, headroom: float, streams: int = 1
    ) -> TierChoice | None:
        """Instant: the tier a stream starts on, from the cards scaled by the calibration (the best
        whose estimate runs ``headroom`` times ``fps`` for each of ``streams`` streams sharing the
        cores, else the cheapest); None where these settings were not calibrated or a tier has no card
        (then ``choose`` times them)."""
        speed = self._speeds.get(settings)
        if speed is None:
            return None
        needed = needed_alone(fps * headroom * max(1, streams), width, height, self._hosted(speed))
        probes: list[TierProbe] = []
        for path in self.tiers:
            estimate = self._scaled(path, width, height, speed)
            if estimate is None:
                return None
            probes.append(TierProbe(_name(path), path, estimate, bound=estimate < needed, estimated=True))
            if estimate >= needed:
                break
        best = probes[-1]
        shared = max(1, streams)
        holds = best.fps >= needed_alone(fps * shared, width, height, self._hosted(speed))
        return TierChoice(
            best.path, best.name, width, height, fps, needed, not best.bound, tuple(probes), shared, holds
        )

    def room(self, settings: str, width: int, height: int, fps: float) -> int | None:
        """Instant: how many streams of this size and rate the cheapest tier serves on these cores, their
        host work beside it, from its card scaled by the calibration; None where these settings were
        not calibrated or it has no card. No headroom: a stream past the room loses the model for
        every frame, so the room is what the cores hold at all, and a stream that starves there sheds
        one (``streamer.serving.shedding``)."""
        speed = self._speeds.get(settings)
        capacity = self._scaled(self.tiers[-1], width, height, speed)
        if capacity is None or speed is None or fps <= 0:
            return None
        streams = 0
        while needed_alone(fps * (streams + 1), width, height, self._hosted(speed)) <= capacity:
            streams += 1
        return streams

    def choose(
        self, load: Loader, settings: str, width: int, height: int, fps: float, headroom: float
    ) -> TierChoice:
        """Blocking (seconds on first sight of a size): run it in a worker thread. ``settings`` names
        the model settings the tiers load with, so probes of other settings are not reused."""
        probes: list[TierProbe] = []
        with self._lock:
            # Timed in full (no floor): every estimate is scaled by it, and a cold session's first
            # calls at a size are slow enough to look plainly too slow.
            anchor = self._probe(load, settings, self.tiers[-1], width, height, 0.0)
            recorded = self._cards(anchor.path, width, height)
            speed = anchor.fps / recorded if recorded else None
            needed = needed_alone(
                fps * headroom, width, height, self._hosted(1.0 if speed is None else speed)
            )
            floor = needed / SLOW
            for path in self.tiers:
                probe = anchor if path == anchor.path else self._estimate(path, width, height, speed, floor)
                if probe is None:
                    probe = self._probe(load, settings, path, width, height, floor, needed)
                probes.append(probe)
                if probe.fps >= needed and not probe.bound:
                    break
        keeps_up = probes[-1].fps >= needed and not probes[-1].bound
        # Where none keeps up every tier was looked at, the cheapest timed in full: the fastest of those
        # timed in full is the fastest (the others are plainly slower).
        best = probes[-1] if keeps_up else max((p for p in probes if not p.bound), key=lambda p: p.fps)
        bare = needed_alone(fps, width, height, self._hosted(1.0 if speed is None else speed))
        return TierChoice(
            best.path, best.name, width, height, fps, needed, keeps_up, tuple(probes), holds=best.fps >= bare
        )

    def _hosted(self, speed: float) -> float | None:
        """The streams' host work at ``CALIBRATION_SIZE`` on this machine (``speed`` against the cards'),
        or None where it is not counted."""
        return None if self._host is None else self._host * speed

    def _estimate(
        self, path: Path, width: int, height: int, speed: float | None, floor: float
    ) -> TierProbe | None:
        """The tier's card scaled to this machine, where that puts it under ``floor``; else None (time it)."""
        estimate = self._scaled(path, width, height, speed)
        if estimate is None or estimate >= floor:
            return None
        return TierProbe(_name(path), path, estimate, bound=True, estimated=True)

    def _scaled(self, path: Path, width: int, height: int, speed: float | None) -> float | None:
        """The fps the tier's card gives at this size, times this machine's ``speed`` against the cards;
        None without either."""
        recorded = self._cards(path, width, height) if speed is not None else None
        return None if recorded is None or speed is None else recorded * speed

    def _probe(
        self,
        load: Loader,
        settings: str,
        path: Path,
        width: int,
        height: int,
        floor: float,
        needed: float | None = None,
    ) -> TierProbe:
        """A kept probe serves unless it was cut short at a bound that does not settle this floor. A
        figure within ``NEAR`` of ``needed`` is timed again for ``NEAR_TIMES`` as long, and that
        figure kept: a short probe's noise would otherwise decide between two tiers."""
        key = (path, width, height, settings)
        probe = self._probes.get(key)
        if probe is None or (probe.bound and probe.fps >= floor):
            backend = load(path)
            try:
                rate = self._measure(backend, width, height, self.probe_s, floor)
                if needed is not None and not rate.bound and abs(rate.fps / needed - 1.0) < NEAR:
                    rate = self._measure(backend, width, height, self.probe_s * NEAR_TIMES, floor)
                probe = self._probes[key] = TierProbe(backend.info.name, path, rate.fps, rate.bound)
            finally:
                backend.close()
            log.debug("model auto: %s runs %s fps alone at %dx%d", probe.name, probe.figure, width, height)
        return probe


def _name(path: Path) -> str:
    """A shipped tier's name as its model calls itself (``stream_t5.int8.onnx``: stream_t5-int8)."""
    return path.name.removesuffix(".onnx").replace(".int8", "-int8")
