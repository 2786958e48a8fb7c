"""A window model with its frames kept on the device (``model.device_frames``), on the CPU provider.

The path a GPU takes (each frame uploaded once through an OrtValue, the window made inside the graph,
IO binding, one uint8 frame down) runs here on the CPU provider, where device memory is host memory:
the shipped conv3d_t5 through the whole file pipeline must give the host path's frames (within one
level: the folded graph rounds in float32 where the host rounds in numpy) while handing onnxruntime one
frame per output frame instead of a window.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from av.video.codeccontext import VideoCodecContext

from streamer.app import build_pipeline, build_stream
from streamer.assets import DEFAULT_MODEL, TEMPORAL_FILTER
from streamer.backend.base import CachedWindow, FrameFeatures
from streamer.backend.device_frames import window_graph
from streamer.backend.onnx import OnnxBackend
from streamer.config import load_config
from streamer.core.features import FeatureCache
from streamer.engine.pipeline import Outcome, Pipeline, PipelineReport
from streamer.engine.scheduler import InferenceScheduler, SchedulerStats
from streamer.errors import ConfigError, FrameError
from streamer.frame import Colour, Frame, Hyperframe, Yuv420
from streamer.measure.synthetic import pattern_window
from streamer.media.colour import from_rgb, tag, yuv_of
from streamer.sources.file import FileSource
from tests.onnx_models import ema_model, kind_model

FRAMES = 24
WIDTH, HEIGHT = 160, 96
CONVLSTM = DEFAULT_MODEL.parent / "convlstm.onnx"


def run(
    tmp_path: Path,
    device_frames: bool,
    warm_up: bool = False,
    model: Path = DEFAULT_MODEL,
    yuv420: bool = False,
) -> tuple[PipelineReport, list[Frame], OnnxBackend]:
    config = load_config(
        None,
        {
            "source": {
                "kind": "synthetic",
                "frames": FRAMES,
                "width": WIDTH,
                "height": HEIGHT,
                "noise_sigma": 20.0,
            },
            "sink": {"kind": "file", "path": str(tmp_path / f"out-{device_frames}-{yuv420}.mp4")},
            "model.path": str(model),
            "model.device_frames": device_frames,
            "model.yuv420": yuv420,
            "model.warm_up": warm_up,
            "gate.enabled": False,
        },
    )
    sent: list[Frame] = []
    pipeline = build_pipeline(config, on_output=lambda source, frame, outcome: sent.append(frame))
    report = asyncio.run(pipeline.run())
    backend = pipeline.backend
    assert isinstance(backend, OnnxBackend)
    return report, sent, backend


def worst_levels(these: list[Frame], those: list[Frame]) -> int:
    """The largest difference between two runs' frames, in levels of 255."""
    return max(
        int(np.abs(a.pixels.astype(np.int16) - b.pixels.astype(np.int16)).max())
        for a, b in zip(these, those, strict=True)
    )


def test_the_default_model_on_device_frames_matches_the_host_path_with_one_frame_each_way(
    tmp_path: Path,
) -> None:
    host_report, host, host_backend = run(tmp_path, device_frames=False)
    report, device, backend = run(tmp_path, device_frames=True)
    assert host_backend.transfers() is None
    assert report.frames_out == host_report.frames_out == FRAMES
    assert report.outcomes[Outcome.ENHANCED.value] == FRAMES
    assert worst_levels(host, device) <= 1
    moved = backend.transfers()
    assert moved is not None
    frame_bytes = WIDTH * HEIGHT * 3
    # each source frame went up once (every window it belongs to reads the device copy), uint8
    assert (moved.uploads, moved.uploaded_bytes) == (FRAMES, FRAMES * frame_bytes)
    # and each output frame came down once, uint8
    assert (moved.downloads, moved.downloaded_bytes) == (FRAMES, FRAMES * frame_bytes)


@pytest.mark.parametrize("model", [DEFAULT_MODEL, TEMPORAL_FILTER], ids=["NTCHW", "NCTHW"])
def test_frames_are_rearranged_once_as_they_go_up_and_the_window_graph_transposes_only_its_outputs(
    tmp_path: Path, model: Path
) -> None:
    """Each frame is made channels-first once, by its upload graph; a window graph that took (H, W, 3)
    frames would transpose each of its T frames for every window they are in, and onnxruntime's
    optimiser merged those into one 5-D transpose of the float window (1.7x the whole temporal filter's
    time at 720p on the CPU, session 17)."""
    import onnx
    import onnxruntime as ort

    from streamer.backend.device_frames import upload_graph

    def transposes(graph: onnx.ModelProto) -> list[list[int]]:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
        # The transpose optimiser runs from the basic level up; the level above adds this CPU's own.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        ort.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return [
            next(list(a.ints) for a in node.attribute if a.name == "perm")
            for node in onnx.load(tmp_path / "optimised.onnx").graph.node
            if node.op_type == "Transpose"
        ]

    info = OnnxBackend(model, providers=["CPUExecutionProvider"]).info
    assert transposes(window_graph(onnx.load(model), info, batch=2)) == [[0, 2, 3, 1]] * 2  # the outputs
    assert transposes(upload_graph()) == [[0, 3, 1, 2]]
    assert transposes(upload_graph(Colour(1, 1))) == []  # made channels-first from its planes


@pytest.mark.parametrize(("layout", "order"), [("NTCHW", "RGB"), ("NCTHW", "BGR")])
def test_a_window_of_frames_uploaded_as_planes_gives_what_the_same_frames_uploaded_as_rgb_give(
    tmp_path: Path, layout: str, order: str
) -> None:
    """Planes made RGB as they go up are the frames a window takes, in either layout and channel
    order, and a window may mix frames that went up either way (a stream whose decoder changed).
    The planes go up as a decoder's lie, rows padded past the picture (its linesize)."""
    path = kind_model(tmp_path / "kind.onnx", layout=layout, t=3, slot=1, order=order)
    backend = OnnxBackend(path, providers=["CPUExecutionProvider"], device_frames=True)
    device = backend.device_frames
    assert device is not None
    rng = np.random.default_rng(5)
    from_planes, from_rgb = [], []
    for _ in range(2 * backend.info.t):
        y = rng.integers(16, 236, (24, 64), dtype=np.uint8)[:, :32]
        u, v = rng.integers(16, 241, (2, 12, 48), dtype=np.uint8)[:, :, :16]
        made = device.upload_planes(y, u, v, Colour(1, 1))
        packed = device.upload_planes(*map(np.ascontiguousarray, (y, u, v)), Colour(1, 1))
        np.testing.assert_array_equal(made.numpy(), packed.numpy())
        from_planes.append(made)
        (rgb,) = made.numpy()  # on the CPU provider device memory is host memory
        from_rgb.append(device.upload(np.ascontiguousarray(rgb.transpose(1, 2, 0))))
    t = backend.info.t
    planes_windows = [from_planes[:t], from_planes[t:]]
    mixed = [from_planes[:1] + from_rgb[1:t], from_rgb[t:]]
    rgb_windows = [from_rgb[:t], from_rgb[t:]]
    theirs = device.run_batch(rgb_windows)
    for ours in (device.run_batch(planes_windows), device.run_batch(mixed)):
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(a, b)
    assert device.upload_graphs == {None, Colour(1, 1)}
    # one window graph per batch size (one made at start) for frames that went up either way
    assert device.graphs == {(1, None), (2, None)}


def test_device_frames_asked_for_a_streaming_model_is_refused_in_one_line() -> None:
    with pytest.raises(
        ConfigError, match=r"streaming model: model\.device_frames is for window and recurrent"
    ):
        OnnxBackend(DEFAULT_MODEL.parent / "stream_t5_lite.onnx", device_frames=True)


def test_a_recurrent_models_state_stays_on_the_device_and_gives_the_host_paths_frames() -> None:
    """convlstm_strength (the low-latency profile's model) at a size its multiple pads: each step
    sends its frame up and brings the frame down; the state went up once, as zeros, and never came
    down, where the host path carries all of it both ways every step."""
    model = DEFAULT_MODEL.parent / "convlstm_strength.onnx"
    host = OnnxBackend(model, device_frames=False)
    backend = OnnxBackend(model, device_frames=True)
    assert backend.info.device_frames
    width, height, steps = 90, 54, 6
    clip = pattern_window(1, steps, width, height, seed=3)[0]
    strengths = [None, 5.0, 30.0, 30.0, None, 12.0]
    state, theirs = backend.initial_state(1, height, width), host.initial_state(1, height, width)
    assert not any(isinstance(v, np.ndarray) for v in state)  # device values, not host arrays
    for frame, strength in zip(clip, strengths, strict=True):
        got, state = backend.step(frame[None, None], state, [strength])
        expected, theirs = host.step(frame[None, None], theirs, [strength])
        assert got.shape == expected.shape == (1, 3, height, width)
        assert int(np.abs(got.astype(np.int16) - expected).max()) <= 1
    assert not any(isinstance(v, np.ndarray) for v in state)
    m = backend.info.pad_multiple
    padded = (height + -height % m) * (width + -width % m) * 3
    state_bytes = sum(v.nbytes for v in {v.shape: v for v in theirs}.values())  # zeros of a shape shared
    moved = backend.transfers()
    assert moved is not None
    assert (moved.uploads, moved.uploaded_bytes) == (steps, steps * padded + state_bytes)
    assert (moved.downloads, moved.downloaded_bytes) == (steps, steps * padded)


def test_a_recurrent_stream_with_its_state_on_the_device_gives_the_host_paths_frames(tmp_path: Path) -> None:
    model = CONVLSTM
    host_report, host, _ = run(tmp_path, device_frames=False, model=model)
    report, device, backend = run(tmp_path, device_frames=True, model=model, warm_up=True)
    assert report.frames_out == host_report.frames_out == FRAMES
    assert report.outcomes[Outcome.ENHANCED.value] == FRAMES
    assert worst_levels(host, device) <= 1
    moved = backend.transfers()
    assert moved is not None
    assert (moved.uploads, moved.downloads) == (FRAMES + 1, FRAMES + 1)  # and the warm-up's zero frame


def test_a_recurrent_model_on_the_device_carries_its_state_exactly_and_restarts_from_zeros(
    tmp_path: Path,
) -> None:
    """The EMA model's exact values: a state carried step to step, restarted by a new zero state,
    taken from a host array too; a batch of several streams and a wrong state refused."""
    backend = OnnxBackend(ema_model(tmp_path / "ema.onnx"), device_frames=True)
    frame = np.full((1, 1, 3, 6, 10), 200, np.uint8)
    state = backend.initial_state(1, 6, 10)
    levels = []
    for _ in range(3):
        out, state = backend.step(frame, state)
        levels.append(int(out[0, 0, 0, 0]))
    assert levels == [100, 150, 175]
    again, _ = backend.step(frame, backend.initial_state(1, 6, 10))
    assert int(again[0, 0, 0, 0]) == 100
    from_host, _ = backend.step(frame, (np.full((1, 3, 6, 10), 100 / 255, np.float32),))
    assert int(from_host[0, 0, 0, 0]) == 150
    with pytest.raises(FrameError, match=r"on the device: a batch of 1, got 2; .*step_streams"):
        backend.step(np.repeat(frame, 2, axis=0), backend.initial_state(2, 6, 10))
    with pytest.raises(FrameError, match=r"state 'h' of model ema is \(1, 3, 4, 4\) float32; frames of 6x10"):
        backend.step(frame, backend.initial_state(1, 4, 4))


def test_without_the_onnx_package_asking_for_device_frames_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import streamer.backend.onnx as onnx_backend

    monkeypatch.setattr(onnx_backend, "graph_tools_missing", lambda: True)  # as in the CPU image
    with pytest.raises(ConfigError, match=r"needs the onnx package .*\(pip install onnx\)"):
        OnnxBackend(DEFAULT_MODEL, device_frames=True)


def test_warm_up_runs_the_device_path_once_before_the_first_frame_and_says_how_long(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streamer.engine.pipeline")
    _, plain, _ = run(tmp_path, device_frames=True)
    report, warmed, backend = run(tmp_path, device_frames=True, warm_up=True)
    said = [r.getMessage() for r in caplog.records if "warmed up" in r.getMessage()]
    assert len(said) == 1
    assert re.fullmatch(
        r"stream 0: model conv3d_t5 warmed up at 160x96 on CPUExecutionProvider in \d+ ms", said[0]
    )
    moved = backend.transfers()
    assert moved is not None
    assert moved.uploads == FRAMES + 1  # one zero frame, T times in its window
    assert report.frames_out == FRAMES
    assert all(np.array_equal(a.pixels, b.pixels) for a, b in zip(plain, warmed, strict=True))


def test_windows_of_several_sizes_in_one_call_give_each_window_alone() -> None:
    """A batch of 3 runs on the graph of 4 (its last window repeated): the same frames as one by one."""
    backend = OnnxBackend(DEFAULT_MODEL, device_frames=True)
    device = backend.device_frames
    assert device is not None
    t = backend.info.t
    clips = [
        np.ascontiguousarray(pattern_window(1, t, WIDTH, HEIGHT, seed=seed)[0].transpose(0, 2, 3, 1))
        for seed in range(3)
    ]
    windows = [[device.upload(frame) for frame in clip] for clip in clips]
    alone = [device.run(window) for window in windows]
    before = device.transfers()
    together = device.run_batch(windows)
    moved = device.transfers()
    assert [pixels.shape for pixels in together] == [(HEIGHT, WIDTH, 3)] * 3
    assert all(np.array_equal(a, b) for a, b in zip(alone, together, strict=True))
    assert moved.uploads == before.uploads  # the batch reads the frames already up
    frame_bytes = WIDTH * HEIGHT * 3
    assert (moved.downloads - before.downloads, moved.downloaded_bytes - before.downloaded_bytes) == (
        4,
        4 * frame_bytes,  # the repeat comes down too: the graph's output is its whole batch
    )
    with pytest.raises(FrameError, match=r"windows of T=5 frames; got \[5, 4\]"):
        device.run_batch([windows[0], windows[1][:4]])


@pytest.mark.parametrize(
    ("model", "device"),
    [(DEFAULT_MODEL, True), (CONVLSTM, True), (CONVLSTM, False)],
    ids=["windows-device", "steps-device", "steps-host"],
)
def test_streams_sharing_a_model_share_its_calls(model: Path, device: bool) -> None:
    """Three streams, one scheduler: windows (or a recurrent model's steps, each with its stream's own
    state) of several streams go in one call, each stream's frames uploaded once where they are kept on
    the device, every frame what that stream gives alone on the host path."""
    backend = OnnxBackend(model, device_frames=device)
    seen: dict[str, list[Frame]] = {}

    def stream(name: str, seed: int, scheduler: InferenceScheduler | None, shared: bool) -> Pipeline:
        source = {
            "kind": "synthetic",
            "frames": FRAMES,
            "width": WIDTH,
            "height": HEIGHT,
            "noise_sigma": 20.0,
            "seed": seed,
        }
        config = load_config(
            None,
            {"streams": [{"id": name, "source": source, "sink": {"kind": "null"}}], "gate.enabled": False},
        )
        (settings,) = config.stream_configs()
        runtime = config.runtime.model_copy(update={"max_batch": 4, "max_wait_ms": 50.0})
        own = backend if shared else OnnxBackend(model, device_frames=False)
        return build_stream(
            settings,
            runtime,
            own,
            scheduler=scheduler,
            on_output=lambda source, frame, outcome: seen.setdefault(name, []).append(frame),
        )

    async def together() -> SchedulerStats:
        shared = InferenceScheduler(backend, max_batch=4, max_wait_ms=50.0)
        try:
            await asyncio.gather(*(stream(f"s{i}", i, shared, True).run() for i in range(3)))
        finally:
            await shared.aclose()
        return shared.stats()

    stats = asyncio.run(together())
    batched = {name: frames for name, frames in seen.items()}
    seen.clear()
    for i in range(3):
        asyncio.run(stream(f"s{i}", i, None, False).run())
    assert stats.windows == 3 * FRAMES
    assert max(stats.batch_sizes) > 1  # some calls carried windows of several streams
    for name, host in seen.items():
        assert len(batched[name]) == len(host) == FRAMES
        assert worst_levels(host, batched[name]) <= 1
    moved = backend.transfers()
    assert (moved is not None) is device
    if moved is not None:
        assert moved.uploads == 3 * FRAMES  # each stream's frames once, whatever batch they ran in


def test_frames_and_outputs_reuse_buffers_nobody_holds_and_never_one_still_held() -> None:
    backend = OnnxBackend(DEFAULT_MODEL, device_frames=True)
    device = backend.device_frames
    assert device is not None
    t = backend.info.t
    clip = np.ascontiguousarray(pattern_window(1, t + 1, WIDTH, HEIGHT, seed=4)[0].transpose(0, 2, 3, 1))
    ring = [device.upload(frame) for frame in clip[:t]]
    first = device.run(ring)
    kept = first.copy()
    second = device.run(ring)  # ``first`` is still held: the second output must not overwrite it
    assert first.ctypes.data != second.ctypes.data
    assert np.array_equal(first, kept)
    assert np.array_equal(second, kept)
    address = first.ctypes.data
    del first
    assert device.run(ring).ctypes.data == address  # let go of, its buffer serves again
    oldest = ring.pop(0).data_ptr()
    ring.append(device.upload(clip[t]))
    assert ring[-1].data_ptr() == oldest  # the frame that left every window gave its device memory
    fresh = [device.upload(frame) for frame in clip[1:]]
    assert {v.data_ptr() for v in fresh}.isdisjoint(v.data_ptr() for v in ring)
    assert np.array_equal(device.run(fresh), device.run(ring))
    device.reuse = False  # fresh allocations each time (what bench gpu compares): the same frames
    assert np.array_equal(device.run([device.upload(frame) for frame in clip[1:]]), device.run(ring))


def test_a_model_that_takes_a_strength_gets_each_windows_own_on_the_device() -> None:
    """conv3d_t1_strength (the camera profile's model) on frames kept on the device: three windows with
    their own strengths in one call give what the host path gives each with its strength."""
    model = DEFAULT_MODEL.parent / "conv3d_t1_strength.onnx"
    host = OnnxBackend(model, device_frames=False)
    backend = OnnxBackend(model, device_frames=True)
    device = backend.device_frames
    assert device is not None
    clip = np.ascontiguousarray(pattern_window(1, 3, WIDTH, HEIGHT, seed=7)[0].transpose(0, 2, 3, 1))
    strengths = [4.0, None, 30.0]
    together = device.run_batch([[device.upload(frame)] for frame in clip], strengths)
    for frame, strength, got in zip(clip, strengths, together, strict=True):
        expected = host.infer(frame.transpose(2, 0, 1)[None, None], [strength])[0].transpose(1, 2, 0)
        assert int(np.abs(got.astype(np.int16) - expected).max()) <= 1
    gentle, strong = (device.run([device.upload(clip[0])], s) for s in (4.0, 30.0))
    assert int(np.abs(gentle.astype(np.int16) - strong).max()) > 10  # the strength reached the model


_OUT_OF_MEMORY = """
import json, resource, numpy as np
from streamer.assets import DEFAULT_MODEL
from streamer.backend.base import CachedWindow, FrameFeatures
from streamer.backend.onnx import OnnxBackend
from streamer.media.colour import from_rgb, tag, yuv_of
from streamer.core.features import FeatureCache
from streamer.errors import ModelUnavailableError
backend = OnnxBackend(DEFAULT_MODEL, threads=1, device_frames=True)
device = backend.device_frames
device.run([device.upload(np.zeros((64, 64, 3), np.uint8))] * backend.info.t)
window = [device.upload(np.full((720, 1280, 3), 9 * k, np.uint8)) for k in range(backend.info.t)]
used = int(open("/proc/self/statm").read().split()[0]) * 4096
resource.setrlimit(resource.RLIMIT_AS, (used + 100 * 2**20, resource.RLIM_INFINITY))
try:
    device.run(window)
    starved = "no error"
except ModelUnavailableError as err:
    starved = str(err) if err.batch_bound else "not batch-bound"
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(json.dumps({"starved": starved, "after": list(device.run(window).shape)}))
"""


def test_a_window_the_device_has_no_memory_for_fails_alone_into_a_pass_through() -> None:
    """A real allocation failure (the address space capped under a 720p window's needs) on the
    device path: the host path's rule, the frame passes through and memory back serves again."""
    result = subprocess.run(
        [sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (
        "CPUExecutionProvider ran out of memory for conv3d_t5 on 1 window(s) of frames 1280x720 kept on "
        in (report["starved"])
    )
    assert "the frame passes through" in report["starved"]
    assert report["after"] == [720, 1280, 3]


def test_steps_of_several_streams_in_one_call_carry_each_streams_own_state() -> None:
    """convlstm_strength, three streams on the graph of 4 (the last repeated), five steps: each stream's
    frames and states as when it steps alone, its state never mixed with another's."""
    model = DEFAULT_MODEL.parent / "convlstm_strength.onnx"
    backend = OnnxBackend(model, device_frames=True)
    device = backend.device_frames
    assert device is not None
    clips = [pattern_window(1, 5, WIDTH, HEIGHT, seed=seed)[0].transpose(0, 2, 3, 1) for seed in (1, 2, 3)]
    strengths = [4.0, None, 30.0]
    alone = [backend.initial_state(1, HEIGHT, WIDTH) for _ in clips]
    together = [backend.initial_state(1, HEIGHT, WIDTH) for _ in clips]
    for step in range(5):
        windows = [[device.upload(np.ascontiguousarray(clip[step]))] for clip in clips]
        expected = []
        for i, window in enumerate(windows):
            pixels, alone[i] = device.step(window, alone[i], strengths[i])
            expected.append(pixels)
        got, states = device.step_batch(windows, together, strengths)
        together = list(states)
        assert len(got) == len(together) == 3
        assert all(np.array_equal(a, b) for a, b in zip(expected, got, strict=True))
    with pytest.raises(FrameError, match=r"2 states for 3 windows, one per stream"):
        device.step_batch(windows, together[:2])


@pytest.mark.parametrize(
    ("device_frames", "yuv"), [(True, False), (False, False), (True, True)], ids=["device", "host", "planes"]
)
def test_a_backend_steps_several_streams_in_one_call_each_as_alone(device_frames: bool, yuv: bool) -> None:
    """``OnnxBackend.step_streams``, the call the scheduler batches streams' steps in: on the device
    each state is its own row of the graph, on the host the states are joined and split; either way
    each stream's frames and next state are what stepping it alone gives. With ``model.yuv420``
    the frames come down as 4:2:0 planes, within a level of the encoder's conversion of those frames."""
    model = DEFAULT_MODEL.parent / "convlstm_strength.onnx"
    backend = OnnxBackend(model, device_frames=device_frames, yuv420=yuv)
    colour = Colour(6, 1)
    clips = np.stack([pattern_window(1, 4, WIDTH, HEIGHT, seed=seed)[0] for seed in (5, 6, 7)])
    strengths = [None, 8.0, 25.0]
    alone = [backend.initial_state(1, HEIGHT, WIDTH) for _ in strengths]
    together = list(alone)
    for step in range(4):
        batch = np.ascontiguousarray(clips[:, step : step + 1])
        expected = []
        for i in range(3):
            pixels, alone[i] = backend.step(batch[i : i + 1], alone[i], [strengths[i]])
            expected.append(pixels[0].transpose(1, 2, 0))
        got, together = backend.step_streams(batch, together, strengths, colour)
        assert len(got) == 3
        for mine, theirs in zip(got, expected, strict=True):
            if yuv:
                assert isinstance(mine, Yuv420)
                reference = encoder_planes(
                    Frame(np.ascontiguousarray(theirs), 0, 0, Fraction(1), 0.0), colour
                )
                assert worst_planes(mine, reference) <= 1
            else:
                assert np.array_equal(mine, theirs)
    with pytest.raises(FrameError, match=r"2 states for a batch of 3, one per stream"):
        backend.step_streams(batch, together[:2], strengths)


def test_step_windows_refuses_a_state_count_or_a_size_that_does_not_match_naming_both() -> None:
    backend = OnnxBackend(CONVLSTM, device_frames=True)

    def window(width: int, height: int, stream: str) -> Hyperframe:
        pixels = np.zeros((height, width, 3), np.uint8)
        return Hyperframe((Frame(pixels, 0, 0, Fraction(1, 30), 0.0, stream),), 0)

    two = [window(WIDTH, HEIGHT, "a"), window(WIDTH, HEIGHT, "b")]
    zero = backend.initial_state(1, HEIGHT, WIDTH)
    with pytest.raises(FrameError, match=r"1 states for 2 windows, one per stream"):
        backend.step_windows(two, [zero])
    with pytest.raises(FrameError, match=rf"frames of one size \({WIDTH}x{HEIGHT} here\); got T=1 of 80x48"):
        backend.step_windows([two[0], window(80, 48, "c")], [zero, zero])
    pictures, states = backend.step_windows(two, [zero, zero])
    assert len(pictures) == len(states) == 2
    assert all(isinstance(p, np.ndarray) and p.shape == (HEIGHT, WIDTH, 3) for p in pictures)


def encoder_planes(frame: Frame, colour: Colour) -> Yuv420:
    """What an encoder tagged ``colour`` makes of a frame's RGB (swscale)."""
    context = av.CodecContext.create("libx264", "w")
    assert isinstance(context, VideoCodecContext)
    context.width, context.height, context.pix_fmt = frame.width, frame.height, "yuv420p"
    tag(context, colour)
    planes = yuv_of(from_rgb(frame.pixels, context))
    assert planes is not None
    return planes


def worst_planes(these: Yuv420, those: Yuv420) -> int:
    return max(
        int(np.abs(a.astype(np.int16) - b).max())
        for a, b in ((these.y, those.y), (these.u, those.u), (these.v, those.v))
    )


@pytest.mark.parametrize("model", [DEFAULT_MODEL, CONVLSTM], ids=["windows", "steps"])
def test_frames_come_down_as_4_2_0_planes_the_encoder_takes_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Path
) -> None:
    """``model.yuv420``: through the whole file pipeline each enhanced frame (of a window model, or
    a recurrent model's step) comes down as its 4:2:0 planes, within a level of what the encoder's own
    conversion of the RGB path's frame gives, at half the bytes of RGB, and the file sink encodes them
    with no RGB conversion at all."""
    import streamer.media.colour

    converted: list[int] = []
    real = streamer.media.colour.from_rgb
    monkeypatch.setattr(streamer.media.colour, "from_rgb", lambda *a: converted.append(1) or real(*a))
    report, planes, backend = run(tmp_path, device_frames=True, yuv420=True, model=model)
    assert not converted  # the sink took every frame's planes
    host_report, rgb, _ = run(tmp_path, device_frames=True, yuv420=False, model=model)
    assert len(converted) == FRAMES  # where RGB came down, the sink converted each frame
    assert report.frames_out == host_report.frames_out == FRAMES
    assert report.outcomes[Outcome.ENHANCED.value] == FRAMES
    colour = Colour(6, 1)  # the synthetic source states none: BT.601, tv range, below 720 lines
    for mine, theirs in zip(planes, rgb, strict=True):
        assert isinstance(mine.picture, Yuv420)
        assert mine.picture.colour == colour
        assert worst_planes(mine.picture, encoder_planes(theirs, colour)) <= 1
    moved = backend.transfers()
    assert moved is not None
    assert (moved.downloads, moved.downloaded_bytes) == (FRAMES, FRAMES * WIDTH * HEIGHT * 3 // 2)
    with av.open(str(tmp_path / "out-True-True.mp4")) as written:
        assert sum(1 for _ in written.decode(video=0)) == FRAMES


def test_warm_up_runs_the_graph_that_makes_planes_before_the_first_frame(tmp_path: Path) -> None:
    """With ``model.yuv420``, warm-up runs the planes' graph at each batch size (one on the CPU
    provider) and the RGB graph of one window a probe takes; live frames then come down as planes."""
    report, planes, backend = run(tmp_path, device_frames=True, warm_up=True, yuv420=True)
    assert report.frames_out == FRAMES
    assert all(isinstance(frame.picture, Yuv420) for frame in planes)
    moved = backend.transfers()
    assert moved is not None
    pixels = WIDTH * HEIGHT
    assert (moved.downloads, moved.downloaded_bytes) == (
        FRAMES + 2,
        (FRAMES + 1) * pixels * 3 // 2 + pixels * 3,
    )


def test_planes_of_several_streams_colours_and_a_crop_each_as_asked() -> None:
    """A batch of windows whose frames come down as planes: each what the window alone gives; a crop
    (a region the gate asked for) or a batch of two colours comes down as RGB instead."""
    backend = OnnxBackend(DEFAULT_MODEL, device_frames=True, yuv420=True)
    assert backend.info.yuv420
    t = backend.info.t
    hd = Colour(1, 2)

    def window(seed: int, colour: Colour | None) -> CachedWindow:
        clip = pattern_window(1, t, WIDTH, HEIGHT, seed=seed)[0].transpose(0, 2, 3, 1)
        frames = tuple(
            Frame(np.ascontiguousarray(pixels), k, k, Fraction(1, 30), 0.0, f"s{seed}")
            for k, pixels in enumerate(clip)
        )
        hyper = Hyperframe(frames, t // 2, colour=colour)
        cache: FeatureCache[FrameFeatures] = FeatureCache(2 * t)
        return CachedWindow(hyper, 0, cache)

    windows = [window(seed, hd) for seed in range(3)]
    together = backend.enhance_cached_batch(windows)
    alone = [backend.enhance_cached_batch([w])[0] for w in windows]
    for mine, single in zip(together, alone, strict=True):
        assert isinstance(mine, Yuv420)
        assert isinstance(single, Yuv420)
        assert mine.colour == hd
        assert worst_planes(mine, single) == 0
        assert (mine.height, mine.width) == (HEIGHT, WIDTH)
    rgb = OnnxBackend(DEFAULT_MODEL, device_frames=True, yuv420=False)
    plain = rgb.enhance_cached_batch([window(0, hd)])[0]
    assert isinstance(plain, np.ndarray)
    target = Frame(plain, 0, 0, Fraction(1, 30), 0.0)
    assert worst_planes(together[0], encoder_planes(target, hd)) <= 1
    mixed = backend.enhance_cached_batch([window(0, hd), window(1, Colour(6, 1))])
    assert all(isinstance(p, np.ndarray) for p in mixed)
    cropped = dataclasses.replace(window(2, hd), crop=(0, 32, 0, 48))
    (part,) = backend.enhance_cached_batch([cropped])
    assert isinstance(part, np.ndarray)
    assert part.shape == (32, 48, 3)


def test_yuv420_without_frames_on_the_device_is_refused_and_off_on_the_cpu_by_default() -> None:
    with pytest.raises(ConfigError, match=r"model conv3d_t5 runs without model.device_frames: set it, or"):
        OnnxBackend(DEFAULT_MODEL, device_frames=False, yuv420=True)
    assert OnnxBackend(CONVLSTM, device_frames=True, yuv420=True).info.yuv420
    assert not OnnxBackend(DEFAULT_MODEL, device_frames=True).info.yuv420  # off on the CPU provider


def camera_file(path: Path) -> Path:
    """A yuv420p H.264 file of noisy moving frames, as a camera records them."""
    clip = pattern_window(1, FRAMES, WIDTH, HEIGHT, seed=9)[0].transpose(0, 2, 3, 1)
    with av.open(str(path), "w") as written:
        stream = written.add_stream("libx264", rate=30)
        assert isinstance(stream, av.video.stream.VideoStream)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for k, pixels in enumerate(clip):
            made = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")
            made.pts = k
            written.mux(stream.encode(made))
        written.mux(stream.encode(None))
    return path


@pytest.mark.parametrize("model", [DEFAULT_MODEL, CONVLSTM], ids=["windows", "steps"])
def test_decoded_planes_go_up_as_they_are_and_come_down_as_planes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Path
) -> None:
    """``model.yuv420`` end to end on a file source, for a window model and a recurrent model's steps:
    each decoded frame is handed on as its 4:2:0 planes (no RGB conversion anywhere on the way), goes up
    at 1.5 bytes a pixel and is made RGB in the graph, and comes down as planes; the frames within a few
    levels of the RGB path's (swscale's fixed-point conversion against the graph's exact one)."""
    import streamer.media.planes

    source = camera_file(tmp_path / "camera.mp4")
    converted: list[int] = []
    real = streamer.media.planes.planes_rgb
    monkeypatch.setattr(streamer.media.planes, "planes_rgb", lambda *a: converted.append(1) or real(*a))

    def run_file(yuv: bool) -> tuple[list[Frame], list[Frame], OnnxBackend]:
        config = load_config(
            None,
            {
                "source": {"kind": "file", "path": str(source)},
                "sink": {"kind": "file", "path": str(tmp_path / f"out-{yuv}.mp4")},
                "model.path": str(model),
                "model.device_frames": True,
                "model.yuv420": yuv,
                "gate.enabled": False,
            },
        )
        taken: list[Frame] = []
        given: list[Frame] = []

        def output(source: Frame, frame: Frame, outcome: Outcome) -> None:
            taken.append(source)
            given.append(frame)

        pipeline = build_pipeline(config, on_output=output)
        report = asyncio.run(pipeline.run())
        assert report.outcomes[Outcome.ENHANCED.value] == FRAMES
        backend = pipeline.backend
        assert isinstance(backend, OnnxBackend)
        return taken, given, backend

    taken, planes, backend = run_file(True)
    assert not converted
    _, rgb, _ = run_file(False)
    assert all(isinstance(frame.picture, Yuv420) for frame in taken)
    moved = backend.transfers()
    assert moved is not None
    # a recurrent model's zero state goes up once per shape, shared by every run's first step
    state = sum(4 * int(np.prod(shape)) for shape in set(backend.state_shapes(1, HEIGHT, WIDTH)))
    assert (moved.uploads, moved.uploaded_bytes) == (FRAMES, FRAMES * WIDTH * HEIGHT * 3 // 2 + state)
    worst, mean = 0, 0.0
    for mine, theirs in zip(planes, rgb, strict=True):
        assert isinstance(mine.picture, Yuv420)
        made = encoder_planes(theirs, mine.picture.colour)
        for a, b in ((mine.picture.y, made.y), (mine.picture.u, made.u), (mine.picture.v, made.v)):
            difference = np.abs(a.astype(np.int16) - b)
            worst, mean = max(worst, int(difference.max())), max(mean, float(difference.mean()))
    assert worst <= 4  # measured: 3, and 1.11 on average in the plane that differs most
    assert mean < 1.5


@pytest.mark.parametrize("model", [DEFAULT_MODEL, CONVLSTM], ids=["windows", "steps"])
def test_warm_up_makes_every_graph_decoded_planes_take_before_the_first_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Path
) -> None:
    """A file source that hands on planes says so (``StreamInfo.planes``), so warm-up makes the graphs
    that take planes, for a window model and a recurrent model's steps: no live frame waits for one."""
    source = camera_file(tmp_path / "camera.mp4")
    warmed: list[tuple[frozenset[tuple[int, Colour | None]], frozenset[Colour | None]]] = []
    real = OnnxBackend.warm_up

    def warm_up(backend: OnnxBackend, *args: object) -> None:
        real(backend, *args)  # type: ignore[arg-type]
        device = backend.device_frames
        assert device is not None
        warmed.append((device.graphs, device.upload_graphs))

    monkeypatch.setattr(OnnxBackend, "warm_up", warm_up)
    config = load_config(
        None,
        {
            "source": {"kind": "file", "path": str(source)},
            "sink": {"kind": "file", "path": str(tmp_path / "out.mp4")},
            "model.path": str(model),
            "model.device_frames": True,
            "model.yuv420": True,
            "model.warm_up": True,
            "gate.enabled": False,
        },
    )
    pipeline = build_pipeline(config)
    report = asyncio.run(pipeline.run())
    assert report.outcomes[Outcome.ENHANCED.value] == FRAMES
    backend = pipeline.backend
    assert isinstance(backend, OnnxBackend)
    device = backend.device_frames
    assert device is not None
    (before,) = warmed
    assert (device.graphs, device.upload_graphs) == before
    colour = Colour(6, 1)
    assert (1, colour) in before[0]  # planes out
    assert colour in before[1]  # planes in


def test_a_file_source_hands_on_planes_only_where_asked_and_never_with_added_noise(tmp_path: Path) -> None:
    """And its StreamInfo says which it hands on, before the first frame."""
    source = camera_file(tmp_path / "camera.mp4")

    def first(planes: bool = False, noise_sigma: float = 0.0) -> tuple[Frame, bool]:
        async def read() -> tuple[Frame, bool]:
            reader = FileSource(source, max_frames=1, planes=planes, noise_sigma=noise_sigma)
            info = await reader.open()
            try:
                return await reader.recv(), info.planes
            finally:
                await reader.aclose()

        return asyncio.run(read())

    planes, said = first(planes=True)
    assert isinstance(planes.picture, Yuv420)
    assert planes.picture.colour == Colour(6, 1)
    assert said
    for frame, said in (first(), first(planes=True, noise_sigma=10.0)):
        assert isinstance(frame.picture, np.ndarray)
        assert not said
