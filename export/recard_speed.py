"""Time every ``model: auto`` tier's CPU speed in one run, on this machine, and write it into the cards.

``model: auto`` compares tiers by the speeds their cards record (``streamer.engine.tiers``): a stream
starts on the best tier whose card, scaled by how fast this machine runs the cheapest tier, keeps up,
and moves up when its own call time, scaled by the ratio of two cards, says the better tier fits. Those
ratios only hold where the cards were timed side by side: a card timed on another machine, or before
its model was re-exported, makes the mover try a tier that cannot keep up, and frames pass through
unenhanced until it moves back. This times the tiers in turn, in rounds, each in a stream's steady
state (``streamer.engine.tiers.model_fps``), and takes each one's median over the rounds.

    python -m export.recard_speed            # print the figures beside the cards'
    python -m export.recard_speed --write    # and store them in the cards

An INT8 tier's figure goes where its card keeps it (``int8.measured.fps_WxH``, beside its fp32
source's, timed in the same rounds); any other tier's in ``cpu_benchmark``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.card import bench_summary
from streamer.assets import AUTO_TIERS
from streamer.backend.onnx import OnnxBackend
from streamer.engine.tiers import card_fps, model_fps, speed_card
from streamer.errors import ConfigError

__all__ = ["SIZES", "main", "time_tiers", "write_speeds"]

SIZES = ((640, 360), (1280, 720))
"""The sizes the cards record; ``card_fps`` scales between them by pixels."""

_MEASURED = (
    "streamer's OnnxBackend: encode one uint8 frame + fuse one window of T cached maps per output frame, "
    "CPUExecutionProvider with default intra-op threads, after 3 warm-up runs; every auto tier timed in "
    "the same run (python -m export.recard_speed), the median of its rounds"
)

Speeds = dict[Path, dict[tuple[int, int], float]]
"""Per model file, per (width, height): output frames per second."""


def time_tiers(
    tiers: Sequence[Path], sizes: Sequence[tuple[int, int]], rounds: int, seconds: float
) -> Speeds:
    """Each tier's median fps per size over ``rounds`` rounds, the tiers taking turns in each round, so
    a machine that slows down meanwhile slows them all alike."""
    if rounds < 1 or seconds <= 0:
        raise ConfigError(f"--rounds must be >= 1 and --seconds positive; got {rounds}, {seconds}")
    samples: dict[Path, dict[tuple[int, int], list[float]]] = {p: {s: [] for s in sizes} for p in tiers}
    backends = {p: OnnxBackend(p, providers=["CPUExecutionProvider"]) for p in tiers}
    try:
        for _ in range(rounds):
            for path, backend in backends.items():
                for w, h in sizes:
                    samples[path][(w, h)].append(model_fps(backend, w, h, seconds))
    finally:
        for backend in backends.values():
            backend.close()
    return {p: {s: round(statistics.median(v), 1) for s, v in by.items()} for p, by in samples.items()}


def write_speeds(speeds: Speeds, sizes: Sequence[tuple[int, int]]) -> list[Path]:
    """Store each tier's figures in its card; returns the cards written."""
    written = []
    for path, by_size in speeds.items():
        card = speed_card(path)
        data: dict[str, Any] = json.loads(card.read_text())
        if path.name.endswith(".int8.onnx"):
            fp32 = speeds.get(path.with_name(path.name.removesuffix(".int8.onnx") + ".onnx"), {})
            measured = data.setdefault("int8", {}).setdefault("measured", {})
            for (w, h), fps in by_size.items():
                measured[f"fps_{w}x{h}"] = {"fp32": fp32.get((w, h)), "int8": fps}
        else:
            figures = {f"{w}x{h}": {"fps": fps} for (w, h), fps in by_size.items()}
            data["cpu_benchmark"] = bench_summary(figures, sizes, _MEASURED)
        card.write_text(json.dumps(data, indent=2) + "\n")
        written.append(card)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.recard_speed", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of timing every tier in turn (3)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per tier, size and round (2)")
    parser.add_argument("--write", action="store_true", help="store the figures in the tiers' cards")
    args = parser.parse_args(argv)
    speeds = time_tiers(AUTO_TIERS, SIZES, args.rounds, args.seconds)
    print("tier                        size       card fps   now fps   now / card")
    for path, by_size in speeds.items():
        for (w, h), fps in by_size.items():
            recorded = card_fps(path, w, h)
            ratio = f"{fps / recorded:.2f}" if recorded else "-"
            print(f"{path.name:<28}{f'{w}x{h}':<11}{recorded or 0:>8.1f}{fps:>10.1f}{ratio:>13}")
    if args.write:
        for card in write_speeds(speeds, SIZES):
            print(f"wrote {card}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
