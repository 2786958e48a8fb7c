"""``streamer bench whep``: a burst of WHEP players against ``webrtc.max_players``, and the memory after.

A live synthetic stream (640x360 @ 30 fps, paced to the wall clock) runs through the pipeline into a
WHEP sink. ``--players`` real aiortc players (their own event loop, ICE on loopback) post their offers
at once; those answered 201 connect, receive frames for ``--hold-s`` and leave; the rest must be
answered 503 with Retry-After. Resident memory (VmRSS) is sampled every second: before the burst, at
its peak, and ``--after-s`` after the players left. Process CPU before and while the players watch
gives what one player costs the server: its own encode (the players run in a process of their own,
so neither their decoding nor their memory is counted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from streamer.app import build_pipeline, build_server
from streamer.assets import TEMPORAL_FILTER
from streamer.bench.harness import RssSampler, Target, emit, markdown_targets, table_footer
from streamer.config import (
    Config,
    GateConfig,
    ModelConfig,
    SyntheticSourceConfig,
    WebRtcConfig,
    WhepSinkConfig,
)
from streamer.errors import ConfigError
from streamer.measure.machine import LoadWatch, Machine, process_busy_s
from streamer.webrtc.ice import restrict_host_addresses, rtc_configuration

__all__ = ["WhepBurstResult", "run_whep_burst"]

_STREAM = "burst"
_MIB = 1024 * 1024
MAX_RSS_AFTER = 0.20
"""RSS after the players left may exceed its pre-burst value by at most this much."""


@dataclass(frozen=True, slots=True)
class WhepBurstResult:
    players: int
    cap: int
    answered: dict[int, int]
    """HTTP status -> offers answered with it."""
    retry_after: bool
    """Every 503 carried a Retry-After header."""
    frames_per_player: float
    """Median frames each accepted player received while it watched."""
    rss_before_mb: float
    rss_peak_mb: float
    rss_after_mb: float
    after_s: float
    cpu_before_percent: float
    cpu_watching_percent: float
    """The server process's CPU while the accepted players watched, 100 = one core."""
    seconds: float
    shared_h264: bool = True
    """``webrtc.shared_h264``: the players (aiortc's offers take H.264) shared one encode."""

    @property
    def rss_after_growth(self) -> float:
        return self.rss_after_mb / self.rss_before_mb - 1 if self.rss_before_mb else 0.0

    @property
    def cpu_per_player(self) -> float:
        accepted = self.answered.get(201, 0)
        return (self.cpu_watching_percent - self.cpu_before_percent) / accepted if accepted else 0.0


class _Players:
    """The players, in a process of their own: their memory and event loop are not the server's, so the
    server's resident memory is what is measured. ``watching`` and ``left`` are set as they happen."""

    def __init__(self, base_url: str, count: int, hold_s: float) -> None:
        self.base_url = base_url
        self.count = count
        self.hold_s = hold_s
        self.answered: Counter[int] = Counter()
        self.retry_after = True
        self.frames: list[int] = []
        self.error: str | None = None
        context = multiprocessing.get_context("spawn")
        self._events, child = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_play, args=(base_url, count, hold_s, child), name="bench-whep-players", daemon=True
        )

    def start(self) -> None:
        self._process.start()

    def wait(self, event: str) -> None:
        """Until the players report ``event`` (``watching``, then ``left``) or fail."""
        while True:
            if not self._events.poll(120):
                raise ConfigError(f"bench whep: the players said nothing for 120 s (waiting for {event})")
            try:
                kind, payload = self._events.recv()
            except EOFError:
                raise ConfigError(f"bench whep: the players' process ended before {event}") from None
            if kind == "error":
                self.error = str(payload)
                return
            if kind == "result":
                answered, retry_after, frames = payload
                self.answered, self.retry_after, self.frames = Counter(answered), retry_after, frames
            if kind == event:
                return

    def join(self) -> None:
        self._process.join(30)


def _play(base_url: str, count: int, hold_s: float, events: Connection) -> None:
    """The players' process: report ``watching``, the result, then ``left``."""
    try:
        asyncio.run(_players(base_url, count, hold_s, events))
    except BaseException as exc:
        events.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        events.close()


async def _players(base_url: str, count: int, hold_s: float, events: Connection) -> None:
    peers = [RTCPeerConnection(rtc_configuration()) for _ in range(count)]
    counts = [0] * count
    readers: list[asyncio.Task[None]] = []
    answered: Counter[int] = Counter()
    retry_after = True

    async def post(http: aiohttp.ClientSession, sdp: str) -> tuple[int, str | None, str | None]:
        nonlocal retry_after
        headers = {"Content-Type": "application/sdp"}
        async with http.post(f"{base_url}/whep/{_STREAM}", data=sdp, headers=headers) as response:
            text = await response.text()
            answered[response.status] += 1
            if response.status == 503 and "Retry-After" not in response.headers:
                retry_after = False
            if response.status != 201:
                return response.status, None, None
            return response.status, text, response.headers["Location"]

    try:
        async with aiohttp.ClientSession() as http:
            offers = await asyncio.gather(*(_offer(pc) for pc in peers))
            answers = await asyncio.gather(*(post(http, sdp) for sdp in offers))
            accepted: list[str] = []
            for k, (pc, (status, answer, location)) in enumerate(zip(peers, answers, strict=True)):
                if status != 201 or answer is None or location is None:
                    continue
                tracks: asyncio.Queue[MediaStreamTrack] = asyncio.Queue(maxsize=1)
                pc.on("track", tracks.put_nowait)
                await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
                readers.append(asyncio.create_task(_read(await tracks.get(), counts, k)))
                accepted.append(location)
            events.send(("watching", None))
            await asyncio.sleep(hold_s)
            for location in accepted:
                async with http.delete(base_url + location) as response:
                    await response.read()
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        await asyncio.gather(*(pc.close() for pc in peers))
    events.send(("result", (dict(answered), retry_after, [c for c in counts if c])))
    events.send(("left", None))


async def _offer(pc: RTCPeerConnection) -> str:
    pc.addTransceiver("video", direction="recvonly")
    with restrict_host_addresses(["127.0.0.1"]):
        await pc.setLocalDescription(await pc.createOffer())
    return str(pc.localDescription.sdp)


async def _read(track: MediaStreamTrack, counts: list[int], k: int) -> None:
    with contextlib.suppress(MediaStreamError):
        while True:
            await track.recv()
            counts[k] += 1


def _cpu_percent(seconds: float) -> float:
    """This process's CPU over the next ``seconds``, 100 = one core."""
    start, wall = process_busy_s(), time.monotonic()
    time.sleep(seconds)
    return 100.0 * (process_busy_s() - start) / (time.monotonic() - wall)


async def _scenario(args: argparse.Namespace) -> WhepBurstResult:
    config = Config(
        source=SyntheticSourceConfig(width=640, height=360, fps=30, frames=None, realtime=True),
        sink=WhepSinkConfig(stream=_STREAM),
        model=ModelConfig(path=TEMPORAL_FILTER),
        gate=GateConfig(enabled=False),
        webrtc=WebRtcConfig(
            port=0, max_players=args.cap, max_sessions=max(args.cap, 64), shared_h264=args.shared_h264
        ),
    )
    server = build_server(config)
    assert server is not None
    pipeline = build_pipeline(config, server=server)
    started = time.monotonic()
    await server.start()
    running = asyncio.create_task(pipeline.run())
    try:
        with RssSampler(1.0) as sampler:
            t0 = time.monotonic()  # the samples' clock
            await asyncio.sleep(args.warmup_s)
            cpu_before = await asyncio.to_thread(_cpu_percent, 5.0)
            before = [rss for t, rss in sampler.samples if t >= args.warmup_s - 3]
            players = _Players(server.url, args.players, args.hold_s)
            players.start()
            await asyncio.to_thread(players.wait, "watching")
            cpu_watching = await asyncio.to_thread(_cpu_percent, min(5.0, args.hold_s / 2))
            await asyncio.to_thread(players.wait, "left")
            await asyncio.to_thread(players.join)
            left = time.monotonic() - t0
            await asyncio.sleep(args.after_s)
            samples = list(sampler.samples)
    finally:
        pipeline.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, 30)
        await server.stop()
    if players.error is not None:
        raise ConfigError(f"bench whep: the players failed: {players.error}")
    peak = max(rss for t, rss in samples if t <= left + 1)
    after = [rss for t, rss in samples if t >= left + args.after_s - 3]
    return WhepBurstResult(
        players=args.players,
        cap=args.cap,
        answered=dict(sorted(players.answered.items())),
        retry_after=players.retry_after,
        frames_per_player=statistics.median(players.frames) if players.frames else 0.0,
        rss_before_mb=statistics.median(before) / _MIB,
        rss_peak_mb=peak / _MIB,
        rss_after_mb=statistics.median(after) / _MIB,
        after_s=args.after_s,
        cpu_before_percent=cpu_before,
        cpu_watching_percent=cpu_watching,
        seconds=time.monotonic() - started,
        shared_h264=args.shared_h264,
    )


def check_targets(result: WhepBurstResult) -> list[Target]:
    accepted = result.answered.get(201, 0)
    refused = result.answered.get(503, 0)
    expected = min(result.players, result.cap)
    return [
        Target(
            f"{expected} of {result.players} players accepted, the rest answered 503 with Retry-After",
            accepted == expected and refused == result.players - expected and result.retry_after,
            f"answered {result.answered}; Retry-After on every 503: {result.retry_after}",
        ),
        Target(
            f"RSS {result.after_s:g} s after the players left within {MAX_RSS_AFTER:.0%} of before the burst",
            result.rss_after_growth <= MAX_RSS_AFTER,
            f"{result.rss_before_mb:.0f} MB before, {result.rss_peak_mb:.0f} MB at the peak, "
            f"{result.rss_after_mb:.0f} MB after ({result.rss_after_growth:+.1%})",
        ),
    ]


def format_table(result: WhepBurstResult, machine: Machine) -> str:
    r = result
    lines = [
        f"streamer bench whep: {r.players} WHEP players at once against webrtc.max_players {r.cap}, a live "
        f"640x360@30 stream; {machine.line()}",
        "",
        f"answered: {r.answered}; each accepted player got {r.frames_per_player:.0f} frames (median)",
        f"RSS: {r.rss_before_mb:.1f} MB before, {r.rss_peak_mb:.1f} MB peak, {r.rss_after_mb:.1f} MB "
        f"{r.after_s:g} s after they left ({r.rss_after_growth:+.1%})",
        f"CPU: {r.cpu_before_percent:.0f}% before, {r.cpu_watching_percent:.0f}% while they watched: "
        f"{r.cpu_per_player:.1f}% of a core per player ({_encodes(r)}; the players are another process)",
    ]
    notes = ["RSS: medians of 1 s samples over the last 3 s before the burst and of the run's end"]
    return "\n".join([*lines, *table_footer(notes, check_targets(result), r.seconds)])


def _encodes(result: WhepBurstResult) -> str:
    return "one H.264 encode shared by all" if result.shared_h264 else "each player its own encode"


def format_markdown(result: WhepBurstResult, machine: Machine) -> str:
    r = result
    lines = [
        "| players | cap | encodes | answered | RSS before / peak / after MB | CPU per player |",
        "|---:|---:|---|---|---|---:|",
        f"| {r.players} | {r.cap} | {_encodes(r)} | {r.answered} | {r.rss_before_mb:.0f} / "
        f"{r.rss_peak_mb:.0f} / "
        f"{r.rss_after_mb:.0f} ({r.rss_after_growth:+.1%}, {r.after_s:g} s after) "
        f"| {r.cpu_per_player:.1f}% |",
        "",
        f"{machine.line()}.",
        *markdown_targets(check_targets(result)),
    ]
    return "\n".join(lines) + "\n"


def run_whep_burst(args: argparse.Namespace) -> tuple[WhepBurstResult, Machine]:
    if not 1 <= args.players <= 500 or not 1 <= args.cap <= 500:
        raise ConfigError(f"--players and --cap must be in 1..500; got {args.players} and {args.cap}")
    for name in ("hold_s", "after_s", "warmup_s"):
        if not 0 < getattr(args, name) <= 3600:
            raise ConfigError(f"--{name.replace('_', '-')} must be in (0, 3600] seconds")
    watch = LoadWatch()
    result = asyncio.run(_scenario(args))
    return result, watch.machine()


def run_from_args(args: argparse.Namespace) -> int:
    result, machine = run_whep_burst(args)
    data: dict[str, Any] = {"machine": asdict(machine), "result": asdict(result)}
    table, markdown = format_table(result, machine), format_markdown(result, machine)
    return emit(table, markdown, data, args.json, args.markdown)
