"""The built-in viewer in a real headless Chromium: publish its fake camera over WHIP, play both panes."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import async_playwright

from streamer.app import build_pipeline
from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.config import load_config
from streamer.core.gate import MotionGate
from streamer.core.windower import Windower
from streamer.engine.pipeline import Outcome, Pipeline
from streamer.frame import Frame
from streamer.webrtc import WebRtcServer, WhepSink, WhipSource
from tests.integration.rtsp_fixtures import Publisher, RtspServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

CHROMIUM = "/usr/bin/chromium"
TOKEN = "browser-test-token"
# RECIPES.md: what Debian's Chromium needs here, plus a fake camera and loopback ICE candidates.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    "--allow-loopback-in-peer-connection",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAITING = "waiting for a publisher on /whip/cam"


@pytest.fixture(scope="module")
def chromium() -> str:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"{CHROMIUM} is missing; CI installs it with: apt-get install chromium fonts-liberation")
    return CHROMIUM


@pytest.mark.timeout(180)
def test_viewer_publishes_the_camera_and_plays_the_enhanced_stream(chromium: str, tmp_path: Path) -> None:
    """The page opens playing (muted) a stream nobody publishes to yet, and says so (issue 46: it said
    "playing cam" while nothing played); Publish camera sends the fake camera, and once the enhanced pane
    shows frames the status says playing."""

    async def scenario() -> None:
        server = WebRtcServer(port=0, token=TOKEN, connect_timeout_s=15.0)
        await server.start()
        source = WhipSource(server, "cam", open_timeout_s=None)  # waits for the page's camera, however slow
        sink = WhepSink(server, "cam")
        outcomes: list[Outcome] = []

        def keep(src: Frame, out: Frame, outcome: Outcome) -> None:
            outcomes.append(outcome)

        pipeline = Pipeline(
            source, sink, OnnxBackend(TEMPORAL_FILTER, threads=1), Windower(5), MotionGate(), on_output=keep
        )
        running = asyncio.create_task(pipeline.run())
        console: list[str] = []
        try:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch_persistent_context(
                    str(tmp_path / "profile"), executable_path=chromium, headless=True, args=FLAGS
                )
                page = browser.pages[0] if browser.pages else await browser.new_page()
                page.on("console", lambda message: console.append(message.text))
                await page.goto(f"{server.url}/view/cam?token={TOKEN}&width=320&height=240")
                assert await page.input_value("#token") == TOKEN
                assert "token" not in page.url
                await page.wait_for_function(  # both panes negotiated (autoplay), nothing published yet
                    f"() => document.getElementById('status').innerText.includes({WAITING!r})"
                    " || document.querySelector('#status .error')",
                    timeout=45_000,
                )
                waiting = await page.inner_text("#status")
                await page.click("#publish")
                await page.click("#play")  # already playing: no second pair of sessions
                await page.wait_for_function(  # enough frames in both panes, or the page reported an error
                    "() => (window.viewerStats.enhanced >= 30 && window.viewerStats.original >= 30)"
                    " || document.querySelector('#status .error')",
                    timeout=60_000,
                )
                await page.wait_for_function(  # the first frame turned the waiting line into playing
                    "() => document.getElementById('status').innerText.includes('playing cam')"
                    " || document.querySelector('#status .error')",
                    timeout=45_000,
                )
                playing = await page.inner_text("#status")
                size = await page.evaluate(
                    "() => ['original', 'enhanced'].map(id => [document.getElementById(id).videoWidth,"
                    " document.getElementById(id).videoHeight])"
                )
                errors = await page.eval_on_selector_all(
                    "#status .error", "lines => lines.map(l => l.textContent)"
                )
                await page.click("#stop")
                await page.wait_for_function(
                    "() => document.getElementById('status').innerText.includes('stopped')"
                )
                await browser.close()
            assert errors == [], console
        except BaseException:
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
            await server.stop()
            raise
        source.interrupt()
        report = await asyncio.wait_for(running, 30)
        await server.stop()

        assert WAITING in waiting, waiting
        assert "playing" not in waiting, waiting
        assert "playing cam" in playing, playing
        assert "waiting" not in playing, playing  # the same line, now saying playing
        assert size == [[source.info.width, source.info.height]] * 2, (size, console)
        assert report.frames_out >= 30
        assert report.model_calls > 0
        assert outcomes.count(Outcome.ENHANCED) > 0

    asyncio.run(scenario())


def test_the_viewer_of_an_rtsp_camera_plays_both_panes_with_live_figures_and_the_badge(
    chromium: str, tmp_path: Path, rtsp_server: RtspServer
) -> None:
    """Not a WHIP source: an RTSP camera behind a WHEP output, seen on a phone-wide page. Both panes play
    (the original relayed by the output) under the slider comparison, the page shows the server's
    figures for the stream, and a budget the model cannot meet (5 ms) passes frames through, which the
    badge says."""
    config = load_config(
        None,
        {
            "source": {"kind": "rtsp", "url": rtsp_server.url("cam")},
            "sink": {"kind": "whep", "stream": "cam"},
            "model.path": str(TEMPORAL_FILTER),
            "latency.budget_ms": 5,
        },
    )
    camera = Publisher(rtsp_server.publish_url("cam"))

    async def scenario() -> tuple[dict[str, Any], str, bool, list[str], list[Any]]:
        server = WebRtcServer(port=0, token=TOKEN, connect_timeout_s=15.0)
        await server.start()
        pipeline = build_pipeline(config, server=server)
        running = asyncio.create_task(pipeline.run())
        try:
            camera.start()
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch_persistent_context(
                    str(tmp_path / "profile"),
                    executable_path=chromium,
                    headless=True,
                    args=FLAGS,
                    viewport={"width": 390, "height": 844},  # a phone: the slider comparison
                )
                page = browser.pages[0] if browser.pages else await browser.new_page()
                await page.goto(f"{server.url}/view/cam?token={TOKEN}")  # it plays by itself (muted)
                await page.fill("#split", "30")
                await page.dispatch_event("#split", "input")
                slider = await page.evaluate(
                    "() => [document.querySelector('.panes').classList.contains('slider'),"
                    " !document.getElementById('split').hidden,"
                    " getComputedStyle(document.getElementById('enhanced')).clipPath]"
                )
                await page.wait_for_function(
                    "() => (window.viewerStats.enhanced >= 30 && window.viewerStats.original >= 30"
                    " && window.viewerFigures && window.viewerFigures.missed_fps > 0)"
                    " || document.querySelector('#status .error')",
                    timeout=60_000,
                )
                figures = await page.evaluate("() => window.viewerFigures")
                line = await page.inner_text("#figures")
                badge = await page.is_visible("#missed")
                errors = await page.eval_on_selector_all("#status .error", "ls => ls.map(l => l.textContent)")
                await page.click("#stop")
                await browser.close()
            return figures, line, badge, errors, slider
        finally:
            camera.stop()
            pipeline.stop()
            await pipeline.source.aclose()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(running, 30)
            await server.stop()

    figures, line, badge, errors, slider = asyncio.run(scenario())
    assert slider == [True, True, "inset(0px 0px 0px 30%)"]
    assert errors == []
    assert figures["stream"] == "cam"
    assert figures["waiting_for"] == "the camera"  # what the status line names before the first frame
    assert figures["model"] == "temporal_filter_t5"
    assert figures["size"] == "640x360"
    assert figures["fps_out"] > 0
    assert figures["missed_fps"] > 0
    assert "temporal_filter_t5" in line
    assert "enhanced" in line
    assert badge


# Where each part of the panes lies, in CSS pixels: the two videos, the captions and the badge.
LAYOUT = """() => {
  const rect = (el) => { const r = el.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height, width: r.width}; };
  const [first, second] = document.querySelectorAll('.panes figcaption');
  return {
    original: rect(document.getElementById('original')),
    enhanced: rect(document.getElementById('enhanced')),
    originalCaption: rect(first),
    enhancedCaption: rect(second),
    badge: rect(document.getElementById('missed')),
    badgeShown: !document.getElementById('missed').hidden,
    slider: document.querySelector('.panes').classList.contains('slider'),
    viewport: window.innerWidth,
  };
}"""
# What a playing stream's captions hold at their longest: a full-HD size, a long frame count and the badge.
LONG_CAPTIONS = """() => {
  for (const pane of ['original', 'enhanced']) {
    document.getElementById(pane + '-size').textContent = '1920x1080';
    document.getElementById(pane + '-frames').value = '123456 frames';
  }
  document.getElementById('missed').hidden = false;
}"""


def test_the_slider_keeps_the_two_videos_aligned_on_a_phone_whatever_the_captions_hold(
    chromium: str, tmp_path: Path
) -> None:
    """Issue 46: on a phone-wide page the badge ("passing frames through") wrapped the enhanced caption,
    the only one the slider shows, to two lines, and pushed the enhanced layer ~16 px below the original.
    With the longest captions a stream gives, the two videos lie exactly on each other, the badge in full
    view; side by side (a desktop's width) each caption still sits right above its video."""

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        server = WebRtcServer(port=0, token=TOKEN)
        await server.start()
        try:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch_persistent_context(
                    str(tmp_path / "profile"),
                    executable_path=chromium,
                    headless=True,
                    args=FLAGS,
                    viewport={"width": 390, "height": 844},
                )
                page = browser.pages[0] if browser.pages else await browser.new_page()
                await page.goto(f"{server.url}/view/cam?autoplay=0")  # the layout alone: nothing plays
                before = await page.evaluate(LAYOUT)
                await page.evaluate(LONG_CAPTIONS)
                phone = await page.evaluate(LAYOUT)
                await page.uncheck("#compare")
                await page.set_viewport_size({"width": 1280, "height": 800})
                desktop = await page.evaluate(LAYOUT)
                await browser.close()
        finally:
            await server.stop()
        return before, phone, desktop

    before, phone, desktop = asyncio.run(scenario())
    for layout in (before, phone):
        assert layout["slider"], layout
        assert layout["enhanced"]["top"] == layout["original"]["top"], layout
        assert layout["enhanced"]["height"] == layout["original"]["height"] > 0, layout
        assert layout["enhanced"]["left"] == layout["original"]["left"], layout
        assert layout["enhanced"]["width"] == layout["original"]["width"], layout
    assert phone["badgeShown"]
    assert phone["badge"]["width"] > 0
    assert phone["enhancedCaption"]["left"] <= phone["badge"]["left"] < phone["badge"]["right"]
    assert phone["badge"]["right"] <= phone["enhancedCaption"]["right"] <= phone["viewport"], phone
    assert phone["enhancedCaption"]["bottom"] <= phone["enhanced"]["top"], phone

    assert not desktop["slider"], desktop
    assert desktop["original"]["right"] < desktop["enhanced"]["left"], desktop  # side by side
    assert desktop["original"]["top"] == desktop["enhanced"]["top"], desktop
    for pane in ("original", "enhanced"):
        assert desktop[pane + "Caption"]["bottom"] == desktop[pane]["top"], desktop
