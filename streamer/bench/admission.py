"""``streamer bench admission``: peak resident memory against ``runtime.memory_budget_mb``.

Each scenario runs in a fresh process (so its peak, VmHWM, is its own): a service with the budget, its
operations endpoint on loopback, and streams added through ``POST /streams`` as an operator's client
would. ``large``: the largest of a ladder of sizes (8K down to 360p) that admission lets in, one stream,
run for ``--seconds``. ``small``: 320x180 streams added until admission refuses one (or ``http.max_streams``),
all run for ``--seconds``. Every stream is a live synthetic one (paced to the wall clock) through the
default model into the null sink. The target: the process's peak stays within the budget.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from streamer.assets import DEFAULT_MODEL
from streamer.bench.harness import Target, emit, markdown_targets, table_footer
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine

__all__ = ["AdmissionRow", "run_scenario"]

_LADDER = ((7680, 4320), (5120, 2880), (3840, 2160), (2560, 1440), (1920, 1080), (1280, 720), (640, 360))
_SMALL = (320, 180)
_MIB = 2**20


@dataclass(frozen=True, slots=True)
class AdmissionRow:
    scenario: str
    budget_mb: int
    baseline_mb: float
    """The process's resident memory when the service started (what admission counts as its own)."""
    admitted: list[str]
    refused: str | None
    """The first refusal's line, if any."""
    peak_mb: float
    seconds: float

    @property
    def within(self) -> bool:
        return self.peak_mb <= self.budget_mb


def _hwm_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


async def _scenario(name: str, budget_mb: int, seconds: float) -> AdmissionRow:
    from streamer.config import load_config
    from streamer.serving.control import ControlServer
    from streamer.serving.service import Service

    config = load_config(
        None,
        {
            "streams": [],
            "http.port": 0,
            "runtime.memory_budget_mb": budget_mb,
            "http.max_streams": 64,
            "model.path": str(DEFAULT_MODEL),  # named: a live source would otherwise take auto's tier
        },
    )
    service = Service(config)
    service.prepare()
    control = ControlServer(service, config.http)
    await control.start()
    task = asyncio.create_task(service.run())
    admitted: list[str] = []
    refused: str | None = None
    started = time.monotonic()
    try:
        sizes = _LADDER if name == "large" else [_SMALL] * 64
        async with aiohttp.ClientSession() as http:
            for index, (width, height) in enumerate(sizes):
                source = {"kind": "synthetic", "width": width, "height": height, "realtime": True}
                body = {"id": f"s{index}", "source": {**source, "frames": None}}
                async with http.post(control.url + "/streams", json=body) as response:
                    text = (await response.text()).strip()
                if response.status == 201:
                    admitted.append(f"{width}x{height}")
                    if name == "large":
                        break
                    continue
                refused = refused or text
                if name == "small":
                    break
        await asyncio.sleep(seconds)
    finally:
        service.request_stop()
        await task
        await control.stop()
    return AdmissionRow(
        name,
        budget_mb,
        service.budget.baseline / _MIB,
        admitted,
        refused,
        _hwm_mb(),
        time.monotonic() - started,
    )


def run_scenario(name: str, budget_mb: int, seconds: float) -> AdmissionRow:
    """One scenario in a fresh process, so its peak resident memory is its own."""
    code = (
        "import asyncio, dataclasses, json, sys\n"
        "from streamer.bench.admission import _scenario\n"
        f"row = asyncio.run(_scenario({name!r}, {budget_mb}, {seconds}))\n"
        "print(json.dumps(dataclasses.asdict(row)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600 + seconds, check=False
    )
    if result.returncode != 0:
        raise ConfigError(f"the {name} scenario failed: {result.stderr.strip().splitlines()[-1:]}")
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return AdmissionRow(**data)


def check_targets(rows: list[AdmissionRow]) -> list[Target]:
    return [
        Target(
            f"{r.scenario}: peak resident memory within the {r.budget_mb} MB budget",
            r.within,
            f"peak {r.peak_mb:.0f} MB ({r.peak_mb / r.budget_mb:.0%}); the process itself "
            f"{r.baseline_mb:.0f} MB; admitted {len(r.admitted)} ({', '.join(sorted(set(r.admitted)))})",
        )
        for r in rows
    ]


def format_table(rows: list[AdmissionRow], machine: Machine, wall_s: float) -> str:
    lines = [f"streamer bench admission: peak resident memory against the budget; {machine.line()}", ""]
    for r in rows:
        lines.append(
            f"{r.scenario:6s} budget {r.budget_mb} MB: baseline {r.baseline_mb:.0f} MB, admitted "
            f"{len(r.admitted)} x {', '.join(sorted(set(r.admitted))) or '-'}, peak {r.peak_mb:.0f} MB"
        )
        if r.refused:
            lines.append(f"       refused: {r.refused}")
    notes = ["peak: VmHWM of a fresh process per scenario; streams: live synthetic, default model, null sink"]
    return "\n".join([*lines, *table_footer(notes, check_targets(rows), wall_s)])


def format_markdown(rows: list[AdmissionRow], machine: Machine) -> str:
    lines = [
        "| scenario | budget MB | baseline MB | admitted | peak MB | first refusal |",
        "|---|---:|---:|---|---:|---|",
        *(
            f"| {r.scenario} | {r.budget_mb} | {r.baseline_mb:.0f} | {len(r.admitted)} x "
            f"{', '.join(sorted(set(r.admitted)))} | {r.peak_mb:.0f} | {r.refused or '-'} |"
            for r in rows
        ),
        "",
        f"{machine.line()}.",
        *markdown_targets(check_targets(rows)),
    ]
    return "\n".join(lines) + "\n"


def run_from_args(args: argparse.Namespace) -> int:
    if not 64 <= args.budget_mb <= 10**6:
        raise ConfigError(f"--budget-mb must be in 64..1000000, got {args.budget_mb}")
    if not 0 < args.seconds <= 600:
        raise ConfigError(f"--seconds must be in (0, 600], got {args.seconds}")
    watch, started = LoadWatch(), time.monotonic()
    rows = [run_scenario(name, args.budget_mb, args.seconds) for name in args.scenario.split(",")]
    machine = watch.machine()
    data = {"machine": asdict(machine), "rows": [asdict(r) for r in rows]}
    table = format_table(rows, machine, time.monotonic() - started)
    return emit(table, format_markdown(rows, machine), data, args.json, args.markdown)
