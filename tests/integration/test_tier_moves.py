"""model: auto re-chosen mid-stream: a stream moves between tiers between calls, every frame kept."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from streamer.assets import AUTO_TIERS, DEFAULT_MODEL, STREAMING_QUARTER_MODEL, STREAMING_SEPARABLE_MODEL
from streamer.backend.onnx import OnnxBackend
from streamer.config import load_config
from streamer.core.tiering import TierMove
from streamer.core.windower import Windower
from streamer.engine.pipeline import Outcome, Pipeline
from streamer.engine.scheduler import InferenceScheduler
from streamer.errors import ModelMismatchError
from streamer.frame import Frame
from streamer.serving.control import ControlServer
from streamer.serving.service import Service
from streamer.sinks.null import NullSink
from streamer.sources.synthetic import SyntheticSource

FRAMES = 40


def test_a_stream_moves_to_another_tier_between_calls_and_keeps_every_frame_in_order() -> None:
    cheap, better = OnnxBackend(STREAMING_QUARTER_MODEL), OnnxBackend(STREAMING_SEPARABLE_MODEL)
    seen: list[tuple[int, str]] = []

    async def scenario() -> tuple[int, int]:
        source = SyntheticSource(width=64, height=48, frames=FRAMES)
        moved_to = InferenceScheduler(better)
        pipeline: Pipeline

        def written(src: Frame, out: Frame, outcome: Outcome) -> None:
            seen.append((src.index, pipeline.backend.info.name))
            if src.index == 10:
                moving.append(pipeline.move_to(moved_to))

        moving: list[asyncio.Future[None]] = []
        pipeline = Pipeline(source, NullSink(), cheap, Windower(5), on_output=written)
        report = await pipeline.run()
        await moving[0]
        await moved_to.aclose()
        return report.frames_in, report.frames_out

    try:
        frames_in, frames_out = asyncio.run(scenario())
    finally:
        cheap.close()
        better.close()
    assert frames_in == frames_out == FRAMES
    assert [index for index, _ in seen] == list(range(FRAMES))
    names = [name for _, name in seen]
    assert names[0] == "stream_t5_quarter_sep"
    assert names[-1] == "stream_t5_lite_sep"
    switched = names.index("stream_t5_lite_sep")
    assert all(name == "stream_t5_lite_sep" for name in names[switched:])  # once moved, never back


def test_a_model_of_another_kind_is_refused_and_the_stream_goes_on() -> None:
    streaming, window = OnnxBackend(STREAMING_QUARTER_MODEL), OnnxBackend(DEFAULT_MODEL)

    async def scenario() -> tuple[BaseException | None, int, str]:
        other = InferenceScheduler(window)
        pipeline = Pipeline(
            SyntheticSource(width=64, height=48, frames=20), NullSink(), streaming, Windower(5)
        )
        refused = pipeline.move_to(other)
        report = await pipeline.run()
        await other.aclose()
        return refused.exception(), report.frames_out, pipeline.backend.info.name

    try:
        error, written, name = asyncio.run(scenario())
    finally:
        streaming.close()
        window.close()
    assert isinstance(error, ModelMismatchError)
    assert "differ in kind" in str(error)
    assert (written, name) == (20, "stream_t5_quarter_sep")


def test_a_service_move_shows_in_streams_and_metrics(caplog: pytest.LogCaptureFixture) -> None:
    config = load_config(
        None,
        {
            "source": {"kind": "synthetic", "width": 64, "height": 48, "frames": None, "realtime": True},
            "model.path": "auto",
            "http.port": 0,
        },
    )

    before = target = 0

    async def scenario() -> tuple[dict[str, object], str]:
        nonlocal before, target
        service = Service(config)
        service.prepare()
        control = ControlServer(service, config.http)
        await control.start()
        running = asyncio.create_task(service.run())
        try:
            runner = next(iter(service.runners.values()))
            for _ in range(600):
                if runner.retier is not None and runner.pipeline.tally.frames_out > 10:
                    break
                await asyncio.sleep(0.1)
            assert runner.retier is not None
            before = runner.retier.controller.current
            target = before + 1 if before + 1 < len(AUTO_TIERS) else before - 1
            runner.retier.controller.current = target
            await service._move_tier(runner, before, TierMove(target, "a load test's move"))
            status = await asyncio.to_thread(_get_json, f"{control.url}/streams/{runner.id}")
            metrics = await asyncio.to_thread(_get_text, f"{control.url}/metrics")
        finally:
            service.request_stop()
            await running
            await control.stop()
        return status, metrics

    status, metrics = asyncio.run(scenario())
    choice = status["model_choice"]
    assert isinstance(choice, dict)
    (move,) = choice["moves"]
    assert move["reason"] == "a load test's move"
    assert status["model"] == move["to"] != move["from"]
    direction = "down" if target > before else "up"
    assert f'streamer_tier_moves_total{{direction="{direction}",stream="0"}} 1.0' in metrics
    assert any(
        "model auto moved" in r.getMessage() and "a load test's move" in r.getMessage()
        for r in caplog.records
    )


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=30) as response:
        data: dict[str, object] = json.loads(response.read())
    return data


def _get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        text: str = response.read().decode()
    return text
