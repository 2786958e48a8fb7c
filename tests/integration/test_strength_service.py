"""A model that takes a strength, run by a real service: a stream's fixed strength reaches its windows,
``auto`` follows the stream's own noise estimate, and PATCH /streams/{id} changes it live while the
stream runs; bad changes are refused in one line (tests.onnx_models.strength_model: output = the
centre frame + strength levels, so each frame shows what it got)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from streamer.engine.pipeline import Outcome
from streamer.frame import Frame
from tests.integration.test_service import config_of, serving
from tests.onnx_models import strength_model

pytestmark = pytest.mark.slow


def _lift(source: Frame, sent: Frame) -> float:
    """What the model added to the frame, in levels (median over the frame; 255 clips aside)."""
    added = sent.pixels.astype(np.int16) - source.pixels.astype(np.int16)
    return float(np.median(added[source.pixels < 200]))


async def _patch(url: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.patch(url, json=body) as response:
        text = await response.text()
        return response.status, (
            await response.json() if response.content_type == "application/json" else text
        )


def test_a_fixed_strength_auto_and_a_live_change_reach_the_windows(tmp_path: Path) -> None:
    model = str(strength_model(tmp_path / "strength.onnx", default=3.0))
    lifts: dict[str, list[float]] = {"fixed": [], "auto": []}
    lock = threading.Lock()

    def record(source: Frame, sent: Frame, outcome: Outcome) -> None:
        if outcome is Outcome.ENHANCED:
            with lock:
                lifts[source.stream_id].append(_lift(source, sent))

    live = {"kind": "synthetic", "width": 64, "height": 48, "fps": 30, "frames": None, "realtime": True}
    config = config_of(
        [
            {"id": "fixed", "source": live, "model": {"path": model, "strength": 12}},
            {"id": "auto", "source": {**live, "noise_sigma": 10.0, "pattern": "smptebars"}},
        ],
        **{"model.path": model, "gate.enabled": False},
    )

    async def until(stream: str, value: float, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            with lock:
                if lifts[stream] and lifts[stream][-1] == value:
                    return
            await asyncio.sleep(0.05)
        raise AssertionError(f"stream {stream} never got strength {value}: last {lifts[stream][-5:]}")

    async def scenario() -> None:
        async with serving(config, on_output=record) as run:
            await run.wait_states({"fixed": "live", "auto": "live"})
            await until("fixed", 12.0)
            status, body = await _patch(run.control.url + "/streams/fixed", {"strength": 30})
            assert status == 200, body
            assert body["strength"] == {"setting": 30.0, "value": 30.0}
            await until("fixed", 30.0)
            for bad, reason in (
                ({"strength": 300}, "strength: Input should be less than or equal to 255"),
                ({"strength": "strong"}, "strength:"),
                ({"gain": 2}, "a running stream changes only 'strength'"),
                ({}, "a running stream changes only 'strength'"),
            ):
                status, text = await _patch(run.control.url + "/streams/fixed", bad)
                assert status == 400, (bad, text)
                assert reason in text
                assert text.count("\n") == 1
            status, text = await _patch(run.control.url + "/streams/nope", {"strength": 1})
            assert status == 404
            # auto: the noise estimate of flat colour bars with sigma 10 noise, once there is one
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                _, one = await run.get("/streams/auto")
                if one["noise_sigma"] is not None:
                    break
                assert asyncio.get_running_loop().time() < deadline, "no noise estimate"
                await asyncio.sleep(0.1)
            assert one["strength"]["setting"] == "auto"
            assert 7.0 <= one["strength"]["value"] <= 13.0
            status, body = await _patch(run.control.url + "/streams/auto", {"strength": "auto"})
            assert status == 200

    asyncio.run(scenario())
    with lock:
        auto = lifts["auto"]
    assert auto
    assert all(6.0 <= lift <= 14.0 for lift in auto)  # the estimate is made from the first frame on
