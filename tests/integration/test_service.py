"""Many streams in one process: isolation, cross-stream batching, the operations endpoint, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import aiohttp
import av
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamer.assets import STREAMING_INT8_MODEL
from streamer.backend.base import Backend
from streamer.config import Config, load_config
from streamer.engine.pipeline import Outcome, Pipeline
from streamer.engine.tiers import HOST_FPS, Rate, TierSelector, needed_alone
from streamer.frame import Frame
from streamer.serving.control import ControlServer
from streamer.serving.metrics import METRICS
from streamer.serving.service import Service, StreamResult
from tests.integration.rtsp_fixtures import RtspServer, free_port, until
from tests.media import probe

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
FAST_MODEL = str(ROOT / "streamer" / "assets" / "temporal_filter_t5.onnx")


def config_of(streams: list[dict[str, Any]], **overrides: Any) -> Config:
    return load_config(
        None,
        {
            "streams": streams,
            "model.path": FAST_MODEL,
            "http.port": 0,
            "runtime.stall_after_s": 1.0,
            "runtime.sink_blocked_after_s": 0.5,
            **overrides,
        },
    )


class Serving:
    """A service and its operations endpoint running on this loop; ``results`` once stopped."""

    def __init__(
        self, service: Service, control: ControlServer, task: asyncio.Task[list[StreamResult]]
    ) -> None:
        self.service = service
        self.control = control
        self.task = task
        self.results: dict[str, StreamResult] = {}

    async def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as http,
            http.get(self.control.url + path, headers=headers) as response,
        ):
            body = (
                await response.json()
                if response.content_type == "application/json"
                else await response.text()
            )
            return response.status, body

    async def wait_states(self, want: dict[str, str], timeout: float = 20.0) -> None:
        """Until each named stream reports the state wanted, polled through /readyz like a kubelet."""
        deadline = asyncio.get_running_loop().time() + timeout
        states: dict[str, str] = {}
        while asyncio.get_running_loop().time() < deadline:
            _, body = await self.get("/readyz")
            states = body["streams"]
            if all(states.get(k) == v for k, v in want.items()):
                return
            await asyncio.sleep(0.05)
        pytest.fail(f"streams did not reach {want} in {timeout} s; last seen {states}")


@contextlib.asynccontextmanager
async def serving(
    config: Config,
    on_output: Callable[[Frame, Frame, Outcome], None] | None = None,
    tiers: TierSelector | None = None,
) -> AsyncIterator[Serving]:
    service = Service(config, on_output=on_output, tiers=tiers)
    service.prepare()
    control = ControlServer(service, config.http)
    await control.start()
    run = Serving(service, control, asyncio.create_task(service.run()))
    try:
        yield run
    finally:
        service.request_stop()
        results = await asyncio.wait_for(run.task, 60)
        run.results = {r.stream_id: r for r in results}
        await control.stop()


def metrics_of(text: str) -> dict[str, list[Any]]:
    families: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.samples
    return families


def sample(families: dict[str, list[Any]], name: str, family: str | None = None, **labels: str) -> float:
    """The value of sample ``name`` with ``labels``, from its family (by default the name less _total)."""
    for s in families[family or name.removesuffix("_total")]:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no sample {name}{labels}")


def start_camera(url: str) -> subprocess.Popen[bytes]:
    """A camera in a process of its own, so the test can kill it as a camera dies: without TEARDOWN."""
    code = "import sys; from tests.integration.rtsp_fixtures import Publisher; Publisher(sys.argv[1]).run()"
    return subprocess.Popen(
        [sys.executable, "-c", code, url], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def test_four_streams_one_camera_killed_the_other_three_finish_and_the_endpoints_say_so(
    rtsp_server: RtspServer, real_clip: Path, make_clip: Callable[..., Path], tmp_path: Path
) -> None:
    clip = make_clip("b_in.mp4", frames=40)
    out_a, out_b = tmp_path / "a.mp4", tmp_path / "b.mp4"
    config = config_of(
        [
            {
                "id": "file-a",
                "source": {"kind": "file", "path": str(real_clip), "max_frames": 50},
                "sink": {"kind": "file", "path": str(out_a)},
            },
            {
                "id": "file-b",
                "source": {"kind": "file", "path": str(clip)},
                "sink": {"kind": "file", "path": str(out_b)},
            },
            {
                "id": "synth",
                "source": {"kind": "synthetic", "realtime": True, "frames": 150, "width": 160, "height": 96},
            },
            {
                "id": "cam",
                "source": {
                    "kind": "rtsp",
                    "url": rtsp_server.url("cam"),
                    "stall_timeout_s": 1.0,
                    "backoff_initial_s": 0.2,
                    "backoff_max_s": 0.5,
                    "open_timeout_s": 2.0,
                },
            },
        ],
        # A second of buffering absorbs the scheduling jitter of 2 shared cores; a live stream that could
        # not keep its rate would still overflow it, and drop frames.
        **{"runtime.queue_size": 30},
    )
    camera = start_camera(rtsp_server.publish_url("cam"))
    try:
        rtsp_server.wait_for("publish cam", timeout=20)

        async def scenario() -> Serving:
            async with serving(config) as run:
                await run.wait_states({"cam": "live", "synth": "live"})
                camera.kill()
                await run.wait_states({"cam": "stalled"})
                status, ready = await run.get("/readyz")
                assert status == 503
                assert ready["ready"] is False
                _, text = await run.get("/metrics")
                families = metrics_of(text)
                assert {n.removesuffix("_total") for n in METRICS} <= set(families)
                assert sample(families, "streamer_stream_state", stream="cam", state="stalled") == 1.0
                assert sample(families, "streamer_stream_state", stream="synth", state="live") == 1.0
                assert (
                    sample(
                        families,
                        "streamer_inference_provider_info",
                        model="temporal_filter_t5",
                        provider="CPUExecutionProvider",
                    )
                    == 1.0
                )
                await run.wait_states({"file-a": "ended", "file-b": "ended", "synth": "ended"}, timeout=60)
                _, text = await run.get("/metrics")
                families = metrics_of(text)
                assert sample(families, "streamer_frames_out_total", stream="synth") == 150
                assert (
                    sample(
                        families,
                        "streamer_stage_seconds_count",
                        "streamer_stage_seconds",
                        stream="file-a",
                        stage="end_to_end",
                    )
                    == 50
                )
                _, streams = await run.get("/streams")
                assert {s["id"]: s["state"] for s in streams["streams"]}["cam"] == "stalled"
            return run

        run = asyncio.run(scenario())
    finally:
        camera.kill()
        camera.wait(10)
    results = run.results
    assert results["file-a"].report is not None
    assert results["file-a"].report.frames_out == 50
    assert results["file-b"].report is not None
    assert results["file-b"].report.frames_out == 40
    synth = results["synth"].report
    assert synth is not None
    assert (synth.frames_in, synth.frames_out, synth.source_dropped) == (150, 150, 0)
    assert probe(out_a).frames == 50
    assert probe(out_b).frames == 40
    assert results["cam"].error is None  # stopped by the shutdown while it waited to reconnect


def resolution_change_clip(path: Path) -> Path:
    """An MPEG-TS whose picture grows from 96x64 to 128x96 at frame 30, as a camera's does when its
    resolution is changed under a running stream."""
    parts = []
    for (w, h), start in (((96, 64), 0), ((128, 96), 30)):
        part = path.with_suffix(f".{w}.ts")
        with av.open(str(part), "w", format="mpegts") as container:
            stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast", "bf": "0"})
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
            for i in range(30):
                frame = av.VideoFrame.from_ndarray(np.full((h, w, 3), 7 * i % 255, np.uint8), format="rgb24")
                frame.pts, frame.time_base = start + i, Fraction(1, 25)
                container.mux(stream.encode(frame))
            container.mux(stream.encode(None))
        parts.append(part.read_bytes())
    path.write_bytes(b"".join(parts))
    return path


def test_a_stream_with_malformed_frames_and_one_with_a_blocked_sink_leave_the_others_alone(
    make_clip: Callable[..., Path], tmp_path: Path
) -> None:
    fifo = tmp_path / "stuck.ts"
    os.mkfifo(fifo)
    reader: list[int] = []
    opened = threading.Thread(target=lambda: reader.append(os.open(fifo, os.O_RDONLY)), daemon=True)
    opened.start()  # a consumer that connects and then never reads: the pipe fills and writes block
    out_ok, out_resize = tmp_path / "ok.mp4", tmp_path / "resize.mp4"
    config = config_of(
        [
            {
                "id": "resize",
                "source": {"kind": "file", "path": str(resolution_change_clip(tmp_path / "rc.ts"))},
                "sink": {"kind": "file", "path": str(out_resize)},
            },
            {
                "id": "stuck",
                "source": {"kind": "synthetic", "realtime": True, "frames": None, "width": 160, "height": 96},
                "sink": {"kind": "file", "path": str(fifo)},
            },
            {
                "id": "ok",
                "source": {"kind": "synthetic", "realtime": True, "frames": 90, "width": 160, "height": 96},
                "sink": {"kind": "file", "path": str(out_ok)},
            },
        ],
        **{"runtime.queue_size": 30},
    )

    def dropped_at_the_source(pipeline: Pipeline) -> int:
        stats = pipeline.source.stats()
        assert stats is not None
        return stats.dropped

    async def scenario() -> Serving:
        async with serving(config) as run:
            try:
                await run.wait_states({"resize": "failed", "stuck": "sink_blocked"})
                await run.wait_states({"ok": "ended"}, timeout=30)
                status, body = await run.get("/readyz")
                assert (status, body["streams"]["stuck"]) == (503, "sink_blocked")
                stuck = run.service.runners["stuck"].pipeline
                # The live source keeps its pace and drops its oldest frames once every queue is full.
                await until(
                    lambda: dropped_at_the_source(stuck) > 0, 30, "the blocked stream's source to drop"
                )
                assert all(q.depth <= q.capacity for q in stuck.queue_stats())
            finally:
                os.close(reader[0])  # the consumer goes away: the blocked write fails, the stream ends
            await run.wait_states({"stuck": "failed"})
        return run

    run = asyncio.run(scenario())
    opened.join(5)
    resize = run.results["resize"]
    assert resize.report is None
    assert "is 128x96 but" in str(resize.error)
    assert "96x64" in str(resize.error)
    written = probe(out_resize)
    assert written.frames >= 1
    assert (written.width, written.height) == (96, 64)
    ok = run.results["ok"].report
    assert ok is not None
    assert (ok.frames_out, ok.source_dropped) == (90, 0)
    assert probe(out_ok).frames == 90


def test_streams_sharing_a_model_share_its_calls_and_each_keeps_its_frames_in_order() -> None:
    seen: dict[str, list[int]] = {}
    config = config_of(
        [
            {"id": f"s{i}", "source": {"kind": "synthetic", "frames": 60, "width": 160, "height": 96}}
            for i in range(3)
        ],
        **{"runtime.max_batch": 6, "runtime.max_wait_ms": 50.0, "gate.enabled": False},
    )

    async def scenario() -> Serving:
        def record(source: Frame, sent: Frame, outcome: Outcome) -> None:
            seen.setdefault(source.stream_id, []).append(source.index)

        async with serving(config, on_output=record) as run:
            await run.wait_states({f"s{i}": "ended" for i in range(3)}, timeout=60)
            (scheduler,) = run.service.schedulers()
            stats = scheduler.stats()
            per_stream_calls = sum(r.pipeline.counters()["calls"] for r in run.service.runners.values())
            assert stats.windows == 180
            assert max(stats.batch_sizes) > 1
            assert per_stream_calls > stats.calls  # some calls carried windows of several streams
        return run

    run = asyncio.run(scenario())
    assert seen == {f"s{i}": list(range(60)) for i in range(3)}
    assert all(r.report is not None and r.report.outcomes["enhanced"] == 60 for r in run.results.values())


def test_the_control_api_adds_and_removes_streams_and_refuses_bad_requests() -> None:
    config = config_of(
        [{"id": "base", "source": {"kind": "synthetic", "realtime": True, "frames": None}}],
        **{"http.token": "s3cret"},
    )
    auth = {"Authorization": "Bearer s3cret"}

    async def post(run: Serving, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(run.control.url + "/streams", data=body, headers=headers) as r,
        ):
            return r.status, await r.text()

    async def delete(run: Serving, sid: str, headers: dict[str, str]) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as http,
            http.delete(f"{run.control.url}/streams/{sid}", headers=headers) as r,
        ):
            return r.status, await r.text()

    json_auth = {**auth, "Content-Type": "application/json"}
    added = b'{"id": "extra", "source": {"kind": "synthetic", "frames": 20}}'

    async def scenario() -> Serving:
        async with serving(config) as run:
            await run.wait_states({"base": "live"})
            assert (await post(run, added, {"Content-Type": "application/json"}))[0] == 401
            assert (await post(run, added, {**auth, "Content-Type": "text/plain"}))[0] == 415
            status, reason = await post(run, b"{not json", json_auth)
            assert status == 400
            assert "not JSON" in reason
            status, reason = await post(run, b'{"id": "x", "sorce": {}}', json_auth)
            assert status == 400
            assert "unknown key 'sorce'" in reason
            status, reason = await post(
                run, b'{"id": "x", "source": {"kind": "file", "path": "/no/such.mp4"}}', json_auth
            )
            assert status == 403  # no http.media_roots: no file paths through the API
            assert "http.media_roots is empty" in reason
            assert (await post(run, b'{"id": "base"}', json_auth))[0] == 409
            assert (await post(run, b"[" + b"1," * 40000 + b"1]", json_auth))[0] == 413
            status, _ = await post(run, added, json_auth)
            assert status == 201
            await run.wait_states({"extra": "ended"})
            assert (await run.get("/streams/extra"))[0] == 401  # every route needs the token
            status, one = await run.get("/streams/extra", auth)
            assert status == 200
            assert one["counters"]["out"] == 20
            assert (await delete(run, "extra", {}))[0] == 401
            status, text = await delete(run, "extra", auth)
            assert status == 200
            assert '"frames_out": 20' in text
            assert (await delete(run, "extra", auth))[0] == 404
            assert (await run.get("/streams/extra", auth))[0] == 404
            assert (await run.get("/metrics"))[0] == 401
            _, text = await run.get("/metrics", auth)
            assert 'stream="extra"' not in text
            status, health = await run.get("/healthz")  # probes stay public by default
            assert status == 200
            assert health["streams"] == 1
        return run

    run = asyncio.run(scenario())
    assert set(run.results) == {"base"}


def test_sigterm_drains_closes_a_valid_mp4_and_logs_json_lines_without_secrets(tmp_path: Path) -> None:
    out = tmp_path / "live.mp4"
    port = free_port()
    dead = free_port()
    (tmp_path / "live.yaml").write_text(
        f"""
model: {{path: {FAST_MODEL}}}
runtime: {{log_level: info, log_format: json, drain_timeout_s: 10}}
http: {{port: {port}}}
streams:
  - id: live
    source: {{kind: synthetic, realtime: true, frames: null}}
    sink: {{kind: file, path: {out}}}
  - id: nocam
    source: {{kind: rtsp, url: "rtsp://admin:hunter2@127.0.0.1:{dead}/x", backoff_initial_s: 0.2}}
"""
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "streamer", "run", "--config", str(tmp_path / "live.yaml")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    async def until_live() -> None:
        async with aiohttp.ClientSession() as http:
            for _ in range(400):
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/streams") as response:
                        streams = (await response.json())["streams"]
                        live = next(s for s in streams if s["id"] == "live")
                        if live["counters"]["out"] >= 30:
                            return
                await asyncio.sleep(0.05)
        pytest.fail("the live stream did not write 30 frames")

    try:
        asyncio.run(until_live())
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    written = probe(out)
    assert written.frames >= 30
    assert f"frames      {written.frames} in, {written.frames} out" in stdout
    lines = [line for line in stderr.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert {"time", "level", "logger", "message"} <= set(events[0])
    messages = [e["message"] for e in events]
    assert "stream live: live" in messages
    assert "stream live: ended" in messages
    assert any(m.startswith("stream nocam: ") for m in messages)
    assert "hunter2" not in stderr


def test_the_control_api_confines_files_caps_streams_reaps_ended_ones_and_frees_their_models(
    tmp_path: Path, real_clip: Path
) -> None:
    media, models = tmp_path / "media", tmp_path / "models"
    media.mkdir()
    models.mkdir()
    (media / "clip.mp4").write_bytes(real_clip.read_bytes())
    (media / "taken.mp4").write_bytes(b"not mine")
    (models / "fast.onnx").write_bytes(Path(FAST_MODEL).read_bytes())
    (tmp_path / "elsewhere.onnx").write_bytes(Path(FAST_MODEL).read_bytes())
    config = config_of(
        [{"id": "base", "source": {"kind": "synthetic", "realtime": True, "frames": None}}],
        **{
            "http.token": "c0ntrol",
            "http.read_token": "r3ad",
            "http.media_roots": [str(media)],
            "http.model_roots": [str(models)],
            "http.max_streams": 2,
            "http.ended_retention_s": 0.0,
            "http.body_timeout_s": 0.5,
        },
    )
    control = {"Authorization": "Bearer c0ntrol", "Content-Type": "application/json"}
    read = {"Authorization": "Bearer r3ad"}

    async def post(run: Serving, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(run.control.url + "/streams", json=body, headers=headers) as r,
        ):
            return r.status, await r.text()

    async def gone(run: Serving, sid: str) -> None:
        for _ in range(400):
            if (await run.get(f"/streams/{sid}", read))[0] == 404:
                return
            await asyncio.sleep(0.05)
        pytest.fail(f"stream {sid} was not reaped")

    async def slow_body(run: Serving) -> bytes:
        host, port = run.control.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /streams HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer c0ntrol\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"id":'
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readline(), 30)
        writer.close()
        return head

    async def scenario() -> None:
        async with serving(config) as run:
            await run.wait_states({"base": "live"})
            assert (await run.get("/streams", read))[0] == 200
            assert (await run.get("/metrics", read))[0] == 200
            assert (await post(run, {"id": "r"}, {**read, "Content-Type": "application/json"}))[0] == 401
            refused = [
                {"source": {"kind": "file", "path": "/etc/hostname"}},
                {"source": {"kind": "file", "path": f"{media}/../media/../models/fast.onnx"}},
                {"sink": {"kind": "file", "path": f"{tmp_path}/escaped.mp4"}},
                {"sink": {"kind": "file", "path": f"{media}/taken.mp4"}},
                {"model": {"path": str(tmp_path / "elsewhere.onnx")}},
            ]
            for body in refused:
                status, reason = await post(run, {"id": "bad", **body}, control)
                assert status == 403, body
                assert len(reason.strip().splitlines()) == 1
            assert (media / "taken.mp4").read_bytes() == b"not mine"
            assert not (tmp_path / "escaped.mp4").exists()
            models_before = len(run.service.schedulers())
            status, _ = await post(
                run,
                {
                    "id": "clip",
                    "source": {"kind": "file", "path": str(media / "clip.mp4"), "max_frames": 12},
                    "sink": {"kind": "file", "path": str(media / "out.mp4")},
                    "model": {"path": str(models / "fast.onnx"), "threads": 1},
                },
                control,
            )
            assert status == 201
            assert len(run.service.schedulers()) == models_before + 1  # its own model config
            status, reason = await post(run, {"id": "third"}, control)
            assert status == 429
            assert "http.max_streams" in reason
            await gone(run, "clip")  # ended, then reaped (retention 0 s)
            assert probe(media / "out.mp4").frames == 12
            assert len(run.service.schedulers()) == models_before  # freed with its last stream
            _, text = await run.get("/metrics", read)
            assert 'stream="clip"' not in text
            assert (await slow_body(run)).startswith(b"HTTP/1.1 408")
            assert (await run.get("/streams/base", read))[0] == 200
            async with (
                aiohttp.ClientSession() as http,
                http.delete(f"{run.control.url}/streams/base", headers=control) as r,
            ):
                assert r.status == 200
            # Nothing to play: out of the Service's endpoints, alive all the same; a new stream readies it.
            assert (await run.get("/readyz", read))[0] == 503
            assert (await run.get("/healthz", read))[0] == 200
            live = {"kind": "synthetic", "realtime": True, "frames": None}
            assert (await post(run, {"id": "again", "source": live}, control))[0] == 201
            await run.wait_states({"again": "live"})
            assert (await run.get("/readyz", read))[0] == 200

    asyncio.run(scenario())


def test_without_a_token_only_trusted_loopback_clients_may_add_streams() -> None:
    config = config_of(
        [{"id": "base", "source": {"kind": "synthetic", "realtime": True, "frames": None}}],
        **{"http.trust_loopback": False, "http.public_probes": False},
    )

    async def scenario() -> None:
        async with serving(config) as run:
            async with (
                aiohttp.ClientSession() as http,
                http.post(run.control.url + "/streams", json={"id": "x"}) as r,
            ):
                assert r.status == 403
                assert "needs http.token" in await r.text()
            assert (await run.get("/streams"))[0] == 200  # no token at all: reads stay open

    asyncio.run(scenario())


def test_streams_added_and_removed_by_the_hundred_leave_no_threads_descriptors_or_objects_behind() -> None:
    config = config_of([], **{"http.token": "t"})
    auth = {"Authorization": "Bearer t"}

    def counts() -> tuple[int, int]:
        return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))

    async def scenario() -> tuple[tuple[int, int], tuple[int, int], int]:
        async with serving(config) as run, aiohttp.ClientSession() as http:

            async def cycle(i: int) -> None:
                body = {
                    "id": f"s{i}",
                    "source": {"kind": "synthetic", "frames": 5, "width": 64, "height": 48},
                    "model": {"threads": 1 + i % 2},  # two model configs: sessions made and freed
                }
                async with http.post(run.control.url + "/streams", json=body, headers=auth) as r:
                    assert r.status == 201, await r.text()
                async with http.delete(f"{run.control.url}/streams/s{i}", headers=auth) as r:
                    assert r.status == 200, await r.text()

            for i in range(10):
                await cycle(i)
            before = counts()
            for i in range(10, 110):
                await cycle(i)
            # Nothing of a removed stream waits for the cyclic collector (its ring buffer, frames and
            # histograms held the memory of a sidecar that added and removed streams).
            alive = sum(type(o) is Pipeline for o in gc.get_objects())
            return before, counts(), len(run.service.schedulers()), alive

    before, after, models, pipelines = asyncio.run(scenario())
    assert after[0] == before[0]  # descriptors: sockets, files, eventfds
    assert after[1] <= before[1] + 1  # OS threads (onnxruntime's included); the loop's executor may add one
    assert models == 0  # every model closed with its last stream
    assert pipelines == 0


def test_model_auto_probes_on_the_opened_size_runs_the_chosen_tier_and_frees_the_stand_in() -> None:
    timed: list[tuple[str, int, int]] = []

    def measure(backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
        timed.append((backend.info.name, width, height))
        return Rate({"stream_t5": 20.0, "stream_t5-int8": 60.0, "stream_t5_tiny": 300.0}[backend.info.name])

    seen: dict[str, list[int]] = {}
    source = {"kind": "synthetic", "frames": 30, "width": 160, "height": 96, "fps": 30}
    config = config_of(
        [{"id": "a", "source": source}, {"id": "b", "source": source}],
        **{"model.path": "auto", "gate.enabled": False},
    )

    def record(source: Frame, sent: Frame, outcome: Outcome) -> None:
        seen.setdefault(source.stream_id, []).append(source.index)

    async def scenario() -> None:
        async with serving(
            config, on_output=record, tiers=TierSelector(measure=measure, cards=lambda *_: None)
        ) as run:
            await run.wait_states({"a": "ended", "b": "ended"}, timeout=60)
            _, streams = await run.get("/streams")
            for status in streams["streams"]:
                assert status["model"] == "stream_t5-int8"
                assert status["model_choice"] == {
                    "chosen": "stream_t5-int8",
                    "size": "160x96",
                    "source_fps": 30.0,
                    "needed_fps": round(
                        needed_alone(33.0, 160, 96, HOST_FPS), 1
                    ),  # 30 fps x 1.1, and the host's share
                    "streams": 1,
                    "keeps_up": True,
                    "probes": [
                        {"model": "stream_t5", "fps": 20.0, "cut_short": False, "estimated": False},
                        {"model": "stream_t5-int8", "fps": 60.0, "cut_short": False, "estimated": False},
                    ],
                    "moves": [],
                }
            (scheduler,) = run.service.schedulers()  # the stand-in (stream_t5) was closed
            assert scheduler.backend.path == STREAMING_INT8_MODEL  # type: ignore[attr-defined]

    asyncio.run(scenario())
    # The cheapest tier first, then from the best; the second stream reused them.
    assert timed == [("stream_t5_tiny", 160, 96), ("stream_t5", 160, 96), ("stream_t5-int8", 160, 96)]
    assert seen == {"a": list(range(30)), "b": list(range(30))}


def test_model_auto_starts_a_stream_at_once_on_the_tier_the_calibrated_cards_choose() -> None:
    timed: list[tuple[str, int, int]] = []

    def measure(backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
        timed.append((backend.info.name, width, height))
        return Rate(600.0)  # twice the cheapest tier's card below, thrice the quarter tier's: speed 2

    def cards(path: Path, width: int, height: int) -> float | None:
        per_360p = {"stream_t5": 10.0, "stream_t5.int8": 15.0, "stream_t5_lite": 20.0}
        per_360p |= {"stream_t5_lite_sep": 25.0, "stream_t5_quarter_sep": 200.0, "stream_t5_tiny": 300.0}
        return per_360p[path.name.removesuffix(".onnx")] * (640 * 360) / (width * height)

    seen: list[int] = []
    source = {"kind": "synthetic", "frames": 30, "width": 160, "height": 96, "fps": 30}
    config = config_of([{"id": "a", "source": source}], **{"model.path": "auto", "gate.enabled": False})

    def record(source: Frame, sent: Frame, outcome: Outcome) -> None:
        seen.append(source.index)

    async def scenario() -> None:
        async with serving(config, on_output=record, tiers=TierSelector(measure=measure, cards=cards)) as run:
            await run.wait_states({"a": "ended"}, timeout=60)
            _, streams = await run.get("/streams")
            (status,) = streams["streams"]
            assert status["model"] == "stream_t5"  # its card, doubled and scaled to 160x96: 300 fps
            choice = status["model_choice"]
            assert (choice["chosen"], choice["keeps_up"]) == ("stream_t5", True)
            assert [p["estimated"] for p in choice["probes"]] == [True]

    asyncio.run(scenario())
    # calibrated before the source opened, once: the two cheapest tiers
    assert timed == [("stream_t5_quarter_sep", 640, 360), ("stream_t5_tiny", 640, 360)]
    assert seen == list(range(30))


def test_model_auto_passes_through_a_stream_the_cheapest_tier_has_no_room_for_until_room_frees() -> None:
    def measure(backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
        return Rate(40.0)  # the cheapest tier's card below: this machine as fast as the cards

    def cards(path: Path, width: int, height: int) -> float | None:
        # at every size: room for one stream at 30 fps (and its host work), not two
        return 40.0 if path.name == "stream_t5_tiny.onnx" else 10.0

    camera = {"kind": "synthetic", "frames": None, "width": 160, "height": 96, "fps": 30, "realtime": True}
    config = config_of(
        [{"id": "a", "source": camera}, {"id": "b", "source": camera}],
        **{"model.path": "auto", "gate.enabled": False},
    )
    outcomes: dict[str, list[Outcome]] = {"a": [], "b": []}

    def record(source: Frame, sent: Frame, outcome: Outcome) -> None:
        outcomes[source.stream_id].append(outcome)

    async def status_of(run: Serving) -> dict[str, Any]:
        _, streams = await run.get("/streams")
        return {s["id"]: s for s in streams["streams"]}

    async def scenario() -> None:
        async with serving(config, on_output=record, tiers=TierSelector(measure=measure, cards=cards)) as run:
            await run.wait_states({"a": "live", "b": "live"}, timeout=60)
            await until(lambda: all(len(o) >= 10 for o in outcomes.values()), 60, "frames of both streams")
            status = await status_of(run)
            shed = [sid for sid, s in status.items() if s["passing_through"]]
            assert len(shed) == 1  # the stream that opened second
            (waiting,) = shed
            (served,) = {"a", "b"} - {waiting}
            assert "keeps up with 1 stream(s) of 160x96 at 30 fps" in status[waiting]["passing_through"]
            assert status[served]["passing_through"] is None
            assert (
                status[waiting]["counters"]["passthrough"]
                == status[waiting]["outcomes"]["shed_passthrough"]
                > 0
            )
            assert set(outcomes[waiting]) == {Outcome.SHED_PASSTHROUGH}
            assert Outcome.ENHANCED in outcomes[served]
            _, text = await run.get("/metrics")
            families = metrics_of(text)
            passed = "streamer_frames_passed_through_total"
            assert sample(families, passed, stream=waiting, reason="shed") > 0
            assert sample(families, passed, stream=served, reason="shed") == 0
            await run.service.remove(served)
            before = len(outcomes[waiting])
            await until(lambda: Outcome.ENHANCED in outcomes[waiting][before:], 60, "the model given back")
            assert (await status_of(run))[waiting]["passing_through"] is None

    asyncio.run(scenario())


def _one_or_two() -> TierSelector:
    """Tiers whose cards, this machine as fast as them, keep one 160x96 stream at 30 fps on stream_t5
    and two on the quarter tier at best."""

    def measure(backend: Backend, width: int, height: int, seconds: float, floor: float) -> Rate:
        return Rate(PER_360P[backend.info.name.replace("-", ".")])

    def cards(path: Path, width: int, height: int) -> float | None:
        return PER_360P[path.name.removesuffix(".onnx")] * (640 * 360) / (width * height)

    return TierSelector(measure=measure, cards=cards)


PER_360P = {"stream_t5": 3.0, "stream_t5.int8": 3.5, "stream_t5_lite": 4.0, "stream_t5_lite_sep": 4.2}
PER_360P |= {"stream_t5_quarter_sep": 6.0, "stream_t5_tiny": 400.0}
"""``_one_or_two``'s cards, per 640x360 frame; at 160x96, 15 times these: stream_t5 keeps one stream
(33 fps needed, and the host work's share), the quarter tier is the best that keeps two (66 and that
share)."""


def test_model_auto_moves_a_running_stream_down_at_once_when_another_joins_it_on_these_cores() -> None:
    camera = {"kind": "synthetic", "frames": None, "width": 160, "height": 96, "fps": 30, "realtime": True}
    settings = {"model.path": "auto", "gate.enabled": False}
    config = config_of([{"id": "a", "source": camera}], **settings)
    (_, joining) = config_of(
        [{"id": "a", "source": camera}, {"id": "b", "source": camera}], **settings
    ).streams

    async def models(run: Serving) -> dict[str, Any]:
        _, streams = await run.get("/streams")
        return {s["id"]: (s["model"], s["model_choice"]["moves"]) for s in streams["streams"]}

    async def scenario() -> None:
        async with serving(config, tiers=_one_or_two()) as run:
            await run.wait_states({"a": "live"}, timeout=60)
            assert (await models(run))["a"] == ("stream_t5", [])
            await run.service.add(joining)
            await run.wait_states({"a": "live", "b": "live"}, timeout=60)
            first = run.service.runners["a"]
            await until(lambda: first.retier is not None and bool(first.retier.moves), 60, "stream a's move")
            seen = await models(run)
            assert seen["b"] == ("stream_t5_quarter_sep", [])
            model, (move,) = seen["a"]
            assert (model, move["from"], move["to"]) == (
                "stream_t5_quarter_sep",
                "stream_t5",
                "stream_t5_quarter_sep",
            )
            assert (
                move["reason"]
                == "2 streams now share these cores; by the cards stream_t5_quarter_sep keeps up"
            )

    asyncio.run(scenario())


def test_model_auto_streams_opening_together_run_the_tier_the_cards_give_them_all() -> None:
    camera = {"kind": "synthetic", "frames": None, "width": 160, "height": 96, "fps": 30, "realtime": True}
    config = config_of(
        [{"id": "a", "source": camera}, {"id": "b", "source": camera}],
        **{"model.path": "auto", "gate.enabled": False},
    )

    def models(run: Serving) -> set[str]:
        return {r.pipeline.backend.info.name for r in run.service.runners.values()}

    async def scenario() -> None:
        async with serving(config, tiers=_one_or_two()) as run:
            await run.wait_states({"a": "live", "b": "live"}, timeout=60)
            # whichever opened first chose for itself alone; it runs the tier for both all the same,
            # chosen again once its tier had loaded or moved there as the other opened
            await until(lambda: models(run) == {"stream_t5_quarter_sep"}, 60, "both on the quarter tier")
            _, streams = await run.get("/streams")
            assert {s["model"] for s in streams["streams"]} == {"stream_t5_quarter_sep"}

    asyncio.run(scenario())


def test_streams_past_the_memory_budget_are_refused_in_one_line_and_the_others_go_on(
    tmp_path: Path, real_clip: Path
) -> None:
    media = tmp_path / "media"
    media.mkdir()
    (media / "clip.mp4").write_bytes(real_clip.read_bytes())

    def rss_mb() -> float:
        with open("/proc/self/status") as status:
            line = next(x for x in status if x.startswith("VmRSS"))
        return int(line.split()[1]) / 1024

    # The budget counts the process itself (its resident memory when the service starts) and then the
    # streams: the running 640x360 stream is estimated at about 180 MB (two model calls at once, the
    # temporal filter's card: 374 bytes a pixel each), which leaves under 80 MB, less than the 130 MB a
    # 640x272 file needs.
    budget = round(rss_mb()) + 260
    config = config_of(
        [{"id": "base", "source": {"kind": "synthetic", "realtime": True, "frames": None}}],
        **{"http.token": "t", "http.media_roots": [str(media)], "runtime.memory_budget_mb": budget},
    )
    auth = {"Authorization": "Bearer t"}

    async def scenario() -> None:
        async with serving(config) as run, aiohttp.ClientSession() as http:
            await run.wait_states({"base": "live"})
            before = rss_mb()
            eight_k = {"id": "8k", "source": {"kind": "synthetic", "width": 7680, "height": 4320}}
            async with http.post(run.control.url + "/streams", json=eight_k, headers=auth) as r:
                status, reason = r.status, await r.text()
            assert status == 503
            assert len(reason.strip().splitlines()) == 1
            assert "7680x4320 needs about" in reason
            assert f"MB of the {budget} MB memory budget are left" in reason
            assert rss_mb() - before < 50  # refused before anything of its size was allocated
            # A file's size is known once it opens: admitted or refused then, the stream failing alone.
            clip = {"id": "clip", "source": {"kind": "file", "path": str(media / "clip.mp4")}}
            async with http.post(run.control.url + "/streams", json=clip, headers=auth) as r:
                assert r.status == 201
            await run.wait_states({"clip": "failed", "base": "live"})
            _, body = await run.get("/streams/clip", auth)
            assert "640x272 needs about" in body["error"]
            assert run.service.budget.admitted("clip") is None

    asyncio.run(scenario())


def test_a_stream_whose_frames_grow_past_the_budget_ends_there_with_its_earlier_frames_written(
    tmp_path: Path,
) -> None:
    from tests.integration.test_faults import resolution_change_clip as change_clip

    clip = change_clip(tmp_path / "grows.ts", (160, 96), (640, 360), 20)
    written: list[int] = []
    with open("/proc/self/statm") as statm:
        resident_mb = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    config = config_of(
        [{"id": "grows", "source": {"kind": "file", "path": str(clip)}}],
        # The process itself, then the first size's ~11 MB fit; the second size's ~160 MB do not.
        **{"runtime.memory_budget_mb": round(resident_mb) + 60},
    )

    def record(source: Frame, sent: Frame, outcome: Outcome) -> None:
        written.append(source.index)

    async def scenario() -> str:
        async with serving(config, on_output=record) as run:
            await run.wait_states({"grows": "failed"})
            _, body = await run.get("/streams/grows")
            return str(body["error"])

    error = asyncio.run(scenario())
    assert "640x360 needs about" in error
    assert "(20 frames delivered before it were written)" in error
    assert len(error.splitlines()) == 1
    assert written == list(range(20))


def test_a_stream_has_one_name_waits_for_its_publisher_and_streams_shows_live_figures() -> None:
    """A WHIP stream is named as served (no id given): /streams/cam answers, it reads `waiting` (ready)
    with no publisher; a running stream shows its rates, latency, size and enhanced share, and its
    outcome counters in /metrics add up to the frames written."""
    config = config_of(
        [
            {"source": {"kind": "whip", "stream": "cam"}, "sink": {"kind": "whep", "stream": "cam"}},
            {
                "id": "synth",
                "source": {
                    "kind": "synthetic",
                    "realtime": True,
                    "frames": 3000,
                    "width": 160,
                    "height": 96,
                    "noise_sigma": 12.0,
                },
                "sinks": [{"kind": "null"}, {"kind": "null"}],
            },
        ],
        **{"webrtc.port": 0},
    )

    async def scenario() -> tuple[Any, ...]:
        async with serving(config) as run:
            await run.wait_states({"cam": "waiting", "synth": "live"})
            await until(lambda: run.service.runners["synth"].pipeline.counters()["out"] >= 60, 30, "frames")
            ready = await run.get("/readyz")
            cam = await run.get("/streams/cam")
            synth = await run.get("/streams/synth")
            _, text = await run.get("/metrics")
            return ready, cam, synth, metrics_of(text)

    ready, cam, synth, families = asyncio.run(scenario())

    assert ready == (200, {"ready": True, "streams": {"cam": "waiting", "synth": "live"}})
    assert cam[0] == 200
    assert (cam[1]["id"], cam[1]["state"], cam[1]["fps_in"], cam[1]["size"]) == ("cam", "waiting", None, None)
    status = synth[1]
    assert status["size"] == "160x96"
    assert status["fps_in"] > 0
    assert status["fps_out"] > 0
    assert 0 < status["latency_p50_ms"] <= status["latency_p95_ms"]
    assert 0 <= status["enhanced_share"] <= 1
    # the pattern's noise (sigma 12) estimated from the stream: about 9, as testsrc2's saturated colours
    # (half its samples at 0 or 255) clip part of it away
    assert 7.0 <= status["noise_sigma"] <= 14.0
    assert sample(families, "streamer_noise_sigma", stream="synth") == pytest.approx(
        status["noise_sigma"], abs=0.1
    )
    # a synthetic source has no decoder to state a quantizer: the model's whole change (do no harm)
    assert (status["quantizer"], status["blend"]) == (None, 1.0)
    assert sample(families, "streamer_blend_weight", stream="synth") == 1.0
    assert "streamer_quantizer" not in families or not families["streamer_quantizer"]
    out = sample(families, "streamer_frames_out_total", stream="synth")
    parts = sample(families, "streamer_frames_enhanced_total", stream="synth") + sample(
        families, "streamer_frames_reused_total", stream="synth"
    )
    parts += sum(
        sample(families, "streamer_frames_passed_through_total", stream="synth", reason=r)
        for r in ("budget", "gate", "stride", "unavailable")
    )
    assert parts == out
    assert [o["name"] for o in status["outputs"]] == ["0:null", "1:null"]
    assert all(o["written"] > 0 and o["error"] is None for o in status["outputs"])
    for name in ("output:0:null", "output:1:null"):
        assert sample(families, "streamer_queue_capacity", stream="synth", queue=name) == 8
    build = sample(families, "streamer_build_info", family="streamer_build_info")
    assert build == 1.0
    labels = next(s.labels for s in families["streamer_build_info"])
    assert set(labels) == {"version", "onnxruntime", "av", "python"}
