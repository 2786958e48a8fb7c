"""The whole pipeline on real media: the shipped model, real files, real encoders."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from streamer.app import build_pipeline
from streamer.assets import AUTO_TIERS, DEFAULT_MODEL, STREAMING_MODEL
from streamer.backend.onnx import OnnxBackend
from streamer.config import Config, load_config
from streamer.core.latency import LatencyBudget
from streamer.core.misswatch import MissWatch
from streamer.core.windower import OutputPosition, Windower
from streamer.engine.pipeline import Outcome, Pipeline, PipelineReport
from streamer.engine.scheduler import InferenceScheduler
from streamer.errors import ConfigError, ModelMismatchError
from streamer.frame import Frame
from streamer.media.samples import sample_clip
from streamer.sinks.null import NullSink
from streamer.sources.file import FileSource
from streamer.sources.synthetic import SyntheticSource
from tests.media import probe
from tests.onnx_models import ema_model

pytestmark = pytest.mark.slow


def run(config: Config, hook: object = None) -> PipelineReport:
    return asyncio.run(build_pipeline(config, on_output=hook).run())  # type: ignore[arg-type]


DEFAULT = "shipped:conv3d_t5"
"""The best-quality model, which a live source runs only when it is named."""


def configured(**overrides: object) -> Config:
    return load_config(None, dict(overrides))


def test_real_clip_keeps_frame_count_order_size_and_pts(real_clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "bikes_enhanced.mp4"
    report = run(
        configured(
            source={"kind": "file", "path": str(real_clip)}, **{"sink.kind": "file", "sink.path": str(out)}
        )
    )
    source, written = probe(real_clip), probe(out)
    assert report.frames_in == report.frames_out == source.frames == written.frames
    assert (written.width, written.height) == (source.width, source.height)
    assert written.pts == sorted(written.pts)
    assert written.pts == source.pts
    assert report.model_calls > 0
    assert report.outcomes["enhanced"] + report.outcomes["reused"] == source.frames


def test_static_scene_skips_the_model_and_reuses_its_output() -> None:
    sent: list[tuple[Frame, Frame, Outcome]] = []
    report = run(
        configured(**{"source.pattern": "color", "source.frames": 60, "gate.refresh_s": None}),
        lambda src, out, outcome: sent.append((src, out, outcome)),
    )
    assert report.frames_out == 60
    assert report.windows_skipped >= 50
    assert report.model_calls < 10
    reused = [(src, out) for src, out, outcome in sent if outcome is Outcome.REUSED]
    assert len(reused) == report.windows_skipped
    assert all(out.index == src.index and out.pts == src.pts for src, out in reused)


def test_stride_passes_frames_between_strides_through() -> None:
    report = run(configured(**{"source.frames": 20, "window.stride": 2, "gate.enabled": False}))
    assert report.outcomes["stride_passthrough"] == 10
    assert report.outcomes["enhanced"] == 10


def test_model_slower_than_budget_passes_frames_through_and_counts_them() -> None:
    # Live pacing at 30 fps with a center window: each target waits >= 2 frame periods (66 ms) for its
    # lookahead, so a 1 ms budget is missed by construction, whatever this machine's speed.
    config = configured(
        **{"source.frames": 20, "source.realtime": True, "latency.budget_ms": 1.0, "model.path": DEFAULT}
    )
    report = run(config)
    assert report.frames_out == 20
    assert report.outcomes["budget_passthrough"] == 20
    assert report.model_calls == 0


def test_a_stream_that_keeps_missing_its_budget_is_warned_about_once_per_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A 1 ms budget is missed by every frame (the centre window's lookahead alone is 66 ms at 30 fps);
    # a 1 s watch window stands in for the minute.
    model = str(Path(__file__).parents[2] / "streamer" / "assets" / "temporal_filter_t5.onnx")
    pipeline = Pipeline(
        SyntheticSource(width=96, height=64, fps=30, frames=75, realtime=True),
        NullSink(),
        OnnxBackend(model),
        Windower(5),
        budget=LatencyBudget(1.0),
        misses=MissWatch(0.05, 1.0),
    )
    with caplog.at_level(logging.WARNING, logger="streamer.engine.pipeline"):
        report = asyncio.run(pipeline.run())
    assert report.outcomes["budget_passthrough"] >= 70  # frames flushed at the end wait for no lookahead
    warnings = [
        r.getMessage() for r in caplog.records if "left unenhanced over the last minute" in r.getMessage()
    ]
    assert 1 <= len(warnings) == pipeline.miss_stats().warnings <= 2
    assert "model temporal_filter_t5 at 96x64, latency.budget_ms 1" in warnings[0]


def test_a_poisoned_estimate_recovers_through_a_probe_that_delays_no_frame() -> None:
    # As if the first call had been a cold 10 s one: every frame is refused until a probe times the
    # model on a refused frame's window in the background and the estimate starts again from that.
    budget = LatencyBudget(2000.0, probe_s=0.5)
    budget.observe(10.0)
    model = str(Path(__file__).parents[2] / "streamer" / "assets" / "temporal_filter_t5.onnx")
    pipeline = Pipeline(
        SyntheticSource(width=96, height=64, fps=30, frames=60, realtime=True),
        NullSink(),
        OnnxBackend(model),
        Windower(5),
        budget=budget,
    )
    report = asyncio.run(pipeline.run())
    assert report.frames_out == 60
    assert report.outcomes["budget_passthrough"] >= 1  # the probe's own frame left unenhanced
    assert report.outcomes["enhanced"] > 0
    assert budget.stats().probes >= 1
    assert budget.stats().estimate_ms < 2000.0


class SlowFirstCall(OnnxBackend):
    """The shipped temporal filter, whose first call takes a second (a cold start)."""

    def __init__(self) -> None:
        super().__init__(str(Path(__file__).parents[2] / "streamer" / "assets" / "temporal_filter_t5.onnx"))
        self.first = threading.Event()

    def infer(self, batch: Any, strength: Any = None) -> Any:
        if not self.first.is_set():
            self.first.set()
            time.sleep(1.0)
        return super().infer(batch, strength)


def test_a_window_whose_call_cannot_end_within_the_budget_is_not_run_and_its_frame_leaves() -> None:
    # Two streams on one model: one stream's window runs the slow first call; the other's, admitted by
    # its own budget (it has timed nothing), is refused where the next call is formed, since a call as
    # long as the first would end past its 500 ms budget. Its frame passes through; every frame leaves.
    backend = SlowFirstCall()
    budgets = {name: LatencyBudget(500.0) for name in ("a", "b")}

    def stream(name: str, shared: InferenceScheduler) -> Pipeline:
        source = SyntheticSource(width=96, height=64, fps=30, frames=30, realtime=True, stream_id=name)
        return Pipeline(source, NullSink(), backend, Windower(5), budget=budgets[name], scheduler=shared)

    async def together() -> list[PipelineReport]:
        shared = InferenceScheduler(backend, max_batch=1)
        try:
            return list(await asyncio.gather(*(stream(name, shared).run() for name in budgets)))
        finally:
            assert shared.stats().late >= 1
            await shared.aclose()

    reports = asyncio.run(together())
    late = sum(budget.stats().late for budget in budgets.values())
    assert late >= 1
    assert all(report.frames_out == report.frames_in for report in reports)  # none lost past the source
    assert sum(report.outcomes["budget_passthrough"] for report in reports) >= late
    assert sum(report.outcomes["enhanced"] for report in reports) >= 1  # the slow call's own frame


def test_budget_drop_sends_nothing_and_counts_drops() -> None:
    config = configured(
        **{
            "source.frames": 12,
            "source.realtime": True,
            "latency.budget_ms": 1.0,
            "latency.on_miss": "drop",
            "model.path": DEFAULT,  # named: a live source without one chooses its tier first
        }
    )
    report = run(config)
    assert report.frames_in == 12
    assert report.frames_out == 0
    assert report.outcomes["budget_drop"] == 12


def test_pts_jump_starts_a_new_run_and_keeps_every_frame(tmp_path: Path) -> None:
    clip = tmp_path / "jump.mp4"
    with av.open(str(clip), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(30):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), i * 8, dtype=np.uint8), format="rgb24")
            frame.pts, frame.time_base = (i if i < 15 else i + 100), Fraction(1, 25)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    out = tmp_path / "out.mp4"
    report = run(
        configured(source={"kind": "file", "path": str(clip)}, **{"sink.kind": "file", "sink.path": str(out)})
    )
    assert report.discontinuities == 1
    assert report.frames_out == 30
    assert probe(out).pts == probe(clip).pts


def test_stop_drains_in_flight_frames_and_leaves_a_valid_file(tmp_path: Path) -> None:
    out = tmp_path / "stopped.mp4"
    config = configured(**{"source.frames": None, "sink.kind": "file", "sink.path": str(out)})
    pipeline: Pipeline | None = None

    def stop_after_30(src: Frame, sent: Frame, outcome: Outcome) -> None:
        if src.index == 30 and pipeline is not None:
            pipeline.stop()

    pipeline = build_pipeline(config, on_output=stop_after_30)
    report = asyncio.run(pipeline.run())
    assert report.frames_out == report.frames_in > 30
    assert probe(out).frames == report.frames_out


def test_model_t_disagreeing_with_config_is_refused() -> None:
    backend = OnnxBackend(DEFAULT_MODEL)
    with pytest.raises(ModelMismatchError, match=r"window.t is 3 .* T=5"):
        Pipeline(SyntheticSource(frames=1), NullSink(), backend, Windower(3))


def test_ring_smaller_than_a_window_needs_is_refused() -> None:
    with pytest.raises(ConfigError, match="ring_capacity"):
        build_pipeline(configured(**{"runtime.ring_capacity": 4}))


@pytest.mark.parametrize("workers", [1, 2])
def test_recurrent_state_is_carried_and_reset_at_a_discontinuity(tmp_path: Path, workers: int) -> None:
    clip = tmp_path / "constant.mp4"
    with av.open(str(clip), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast", "qp": "0"})
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv444p"
        for i in range(8):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 200, dtype=np.uint8), format="rgb24")
            frame.pts, frame.time_base = (i if i < 4 else i + 100), Fraction(1, 25)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    levels: list[int] = []
    config = configured(
        source={"kind": "file", "path": str(clip)},
        **{
            "model.path": str(ema_model(tmp_path / "ema.onnx")),
            "model.workers": workers,  # a recurrent model's steps chain: one at a time whatever the workers
            "gate.enabled": False,
        },
    )
    report = run(config, lambda src, out, outcome: levels.append(int(np.median(out.pixels))))
    assert report.discontinuities == 1
    assert report.model_calls == 8
    # h' = (h + frame) / 2 from zero: 100, 150, 175, 188 (rounded), then again from zero after the jump.
    assert levels == [100, 150, 175, 188, 100, 150, 175, 188]


def _constant_clip(path: Path, level: int, frames: int) -> Path:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast", "qp": "0"})
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv444p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), level, dtype=np.uint8), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 25)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def test_two_streams_on_one_recurrent_model_keep_their_own_state(tmp_path: Path) -> None:
    """One backend and one scheduler serve both streams at once, as a service shares a model: each
    stream's outputs are what it gives alone (h' = (h + frame) / 2 from zero, per stream)."""
    backend = OnnxBackend(ema_model(tmp_path / "ema.onnx"))
    levels: dict[str, list[int]] = {"bright": [], "dark": []}

    def pipeline(name: str, level: int, scheduler: InferenceScheduler | None) -> Pipeline:
        def keep(src: Frame, out: Frame, outcome: Outcome) -> None:
            levels[name].append(int(np.median(out.pixels)))

        source = FileSource(_constant_clip(tmp_path / f"{name}.mp4", level, 6), stream_id=name)
        windower = Windower(1, position=OutputPosition.LAST)
        return Pipeline(source, NullSink(), backend, windower, scheduler=scheduler, on_output=keep)

    async def together() -> None:
        shared = InferenceScheduler(backend, max_batch=2, max_wait_ms=20.0)
        try:
            await asyncio.gather(pipeline("bright", 200, shared).run(), pipeline("dark", 40, shared).run())
        finally:
            await shared.aclose()

    asyncio.run(together())
    together_levels = dict(levels)
    levels.update(bright=[], dark=[])
    asyncio.run(pipeline("bright", 200, None).run())
    asyncio.run(pipeline("dark", 40, None).run())
    assert together_levels == levels
    assert levels == {"bright": [100, 150, 175, 188, 194, 197], "dark": [20, 30, 35, 38, 39, 39]}


def test_streaming_model_encodes_each_frame_of_a_real_clip_once(real_clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "bikes_streaming.mp4"
    config = configured(
        source={"kind": "file", "path": str(real_clip)},
        model={"path": str(STREAMING_MODEL)},
        **{"sink.kind": "file", "sink.path": str(out), "gate.enabled": False},
    )
    pipeline = build_pipeline(config)
    report = asyncio.run(pipeline.run())
    source, written = probe(real_clip), probe(out)
    assert report.frames_in == report.frames_out == source.frames == written.frames
    assert written.pts == source.pts
    assert report.outcomes["enhanced"] == source.frames
    features = pipeline.feature_stats()
    assert features.encoded == source.frames  # once each, though every frame is in T windows
    assert features.resets == report.discontinuities  # each scene cut started an empty cache


def _crossing_scene(path: Path, frames: int) -> Path:
    """bikes.mp4's first frame, still, with a white square crossing it; lossless, so only the square moves."""
    with av.open(str(sample_clip("bikes"))) as clip:
        background = next(clip.decode(video=0)).to_ndarray(format="rgb24")
    h, w = background.shape[:2]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=25)
        stream.width, stream.height, stream.pix_fmt = w, h, "bgr0"
        for i in range(frames):
            pixels = background.copy()
            pixels[100:148, 40 + 6 * i : 88 + 6 * i] = (250, 250, 240)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        out.mux(stream.encode(None))
    return path


@pytest.mark.parametrize(
    ("model", "device_frames"),
    [(DEFAULT_MODEL, False), (STREAMING_MODEL, False), (DEFAULT_MODEL, True)],
    ids=["window", "streaming", "window-device-frames"],
)
def test_the_tile_gate_enhances_only_the_box_around_a_moving_subject(
    tmp_path: Path, model: Path, device_frames: bool
) -> None:
    clip = _crossing_scene(tmp_path / "scene.mkv", 30)
    outputs: dict[str, dict[int, np.ndarray]] = {"whole": {}, "tiles": {}}
    pixels = {}
    for name, gate in (("whole", {"gate.enabled": False}), ("tiles", {"gate.tile": 64})):
        settings = {
            "gate.refresh_s": None,
            "model.path": str(model),
            "model.device_frames": device_frames,
            **gate,
        }
        config = configured(source={"kind": "file", "path": str(clip)}, **settings)
        written = outputs[name]

        def keep(src: Frame, out: Frame, _: Outcome, written: dict[int, np.ndarray] = written) -> None:
            written[src.index] = out.pixels

        pipeline = build_pipeline(config, on_output=keep)
        report = asyncio.run(pipeline.run())
        assert report.frames_out == 30
        pixels[name] = pipeline.pixel_stats()
    due, whole = pixels["whole"]
    assert due == whole == 30 * 640 * 272
    assert pixels["tiles"][0] == due
    assert pixels["tiles"][1] * 3 <= whole  # the box and its halo, not the frame
    for index in range(30):
        diff = np.abs(outputs["tiles"][index].astype(np.int16) - outputs["whole"][index])
        # Away from the square the scene is still, so reused pixels equal fresh ones; the box is run
        # with a halo wider than the model's reach (a streaming model: on its cached maps cut to the
        # box), so its pixels equal the whole frame's.
        assert int(diff.max()) <= 1, index


def test_model_auto_runs_a_shipped_tier_chosen_once_the_source_has_opened(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = configured(
        **{"model.path": "auto", "source.frames": 20, "source.width": 128, "source.height": 72}
    )
    pipeline = build_pipeline(config)
    try:
        with caplog.at_level(logging.INFO, logger="streamer.app"):
            report = asyncio.run(pipeline.run())
    finally:
        pipeline.backend.close()
    assert report.frames_in == report.frames_out == 20
    assert pipeline.backend.info.name in {p.stem.replace(".int8", "-int8") for p in AUTO_TIERS}
    (line,) = [r.getMessage() for r in caplog.records if "model auto chose" in r.getMessage()]
    assert f"chose {pipeline.backend.info.name} for 128x72 @ 30 fps" in line


@pytest.mark.parametrize("model", [DEFAULT_MODEL, STREAMING_MODEL], ids=["window", "streaming"])
def test_frames_larger_than_model_tile_are_enhanced_in_tiles_equal_to_the_whole_frame(
    real_clip: Path, model: Path
) -> None:
    outputs: dict[str, dict[int, np.ndarray]] = {"whole": {}, "tiles": {}}
    calls: dict[str, int] = {}
    for name, tile in (("whole", None), ("tiles", 160)):
        settings = {"model.path": str(model), "model.tile": tile, "gate.enabled": False}
        config = configured(source={"kind": "file", "path": str(real_clip), "max_frames": 12}, **settings)
        written = outputs[name]

        def keep(src: Frame, out: Frame, _: Outcome, written: dict[int, np.ndarray] = written) -> None:
            written[src.index] = out.pixels

        pipeline = build_pipeline(config, on_output=keep)
        backend = pipeline.backend
        name_of_call = "fuse" if backend.info.streaming else "infer"
        real_call = getattr(backend, name_of_call)

        def counted(*args: object, real_call: Any = real_call, name: str = name) -> Any:
            calls[name] += 1
            return real_call(*args)

        calls[name] = 0
        setattr(backend, name_of_call, counted)
        report = asyncio.run(pipeline.run())
        assert report.frames_out == 12
    assert calls["whole"] == 12
    assert calls["tiles"] == 12 * 3 * 7  # 640x272 in tiles keeping 96 pixels a side: 3 rows, 7 columns
    for index in range(12):
        # Each tile's crop reaches 32 pixels past what is kept, more than the model's reach.
        diff = np.abs(outputs["tiles"][index].astype(np.int16) - outputs["whole"][index])
        assert int(diff.max()) <= 1, index


@pytest.mark.parametrize(
    ("model", "tile"),
    [(DEFAULT_MODEL, None), (STREAMING_MODEL, None), (STREAMING_MODEL, 160)],
    ids=["window", "streaming", "streaming-tiles"],
)
def test_two_workers_run_windows_at_once_and_write_the_frames_one_worker_writes_in_order(
    real_clip: Path, model: Path, tile: int | None
) -> None:
    """Frames larger than ``model.tile`` run one window at a time (tiles are there to bound memory): two
    of their tiles' calls must then never be under way together."""
    outputs: dict[int, list[tuple[int, np.ndarray]]] = {}
    features = {}
    barrier, met = threading.Barrier(2, timeout=60), list[int]()
    calls = iter(range(1_000_000))  # next() on it is atomic: each call gets its own number
    lock, running, most = threading.Lock(), [0], [0]
    for workers in (1, 2):
        settings = {"model.path": str(model), "model.workers": workers, "model.tile": tile}
        source = {"kind": "file", "path": str(real_clip), "max_frames": 16}
        config = configured(source=source, **settings, **{"gate.enabled": False})
        written = outputs.setdefault(workers, [])

        def keep(src: Frame, out: Frame, _: Outcome, written: list[tuple[int, np.ndarray]] = written) -> None:
            written.append((src.index, out.pixels))

        pipeline = build_pipeline(config, on_output=keep)
        assert pipeline.scheduler.workers == workers
        if workers == 2:
            # The first two model calls must be under way together to pass the barrier (it breaks after
            # a minute if the second never comes: the calls ran one after the other).
            backend = pipeline.backend
            name = "fuse" if backend.info.streaming else "infer"
            real_call = getattr(backend, name)

            def together(*args: object, real_call: Any = real_call) -> Any:
                with lock:  # counted before the barrier: both of the first two are in when it opens
                    running[0] += 1
                    most[0] = max(most[0], running[0])
                try:
                    if tile is None and next(calls) < 2:
                        met.append(barrier.wait())
                    return real_call(*args)
                finally:
                    with lock:
                        running[0] -= 1

            setattr(backend, name, together)
        report = asyncio.run(pipeline.run())
        assert report.outcomes["enhanced"] == 16
        features[workers] = pipeline.feature_stats().encoded
    assert sorted(met) == ([] if tile else [0, 1])
    assert most[0] == (1 if tile else 2)
    assert [i for i, _ in outputs[2]] == [i for i, _ in outputs[1]] == list(range(16))
    for (_, one), (_, two) in zip(outputs[1], outputs[2], strict=True):
        assert int(np.abs(one.astype(np.int16) - two).max()) <= 1  # threads split otherwise: rounding
    if model == STREAMING_MODEL:
        assert features[2] == features[1] == 16  # each frame encoded once, however the windows overlap
