"""Streaming models: two graphs, uint8 at both ends, each frame encoded once, equal to the full window."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from export.models import StreamingEnhancer
from export.models.conv3d import Conv3dEnhancer
from export.parity import PARITY_TOLERANCE
from export.streaming_export import UINT8_TOLERANCE_LEVELS, StreamingGraphs, export_streaming
from streamer.assets import STREAMING_MODEL
from streamer.backend.base import FrameFeatures
from streamer.backend.onnx import OnnxBackend
from streamer.core.features import FeatureCache
from streamer.core.windower import Windower
from streamer.errors import ConfigError, FrameError, ModelError
from streamer.frame import Frame, Hyperframe

TINY = {"half": 4, "quarter": 8, "fused": 8, "refine": 4}


def _tiny() -> StreamingEnhancer:
    torch.manual_seed(0)
    model = StreamingEnhancer(**TINY)
    with torch.no_grad():  # a visible effect, so equal outputs are not just the identity
        model.head.weight.normal_(0.0, 0.05)
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[StreamingEnhancer, StreamingGraphs]:
    model = _tiny()
    path = tmp_path_factory.mktemp("streaming") / "tiny.onnx"
    return model, export_streaming(model, path, name="tiny")


def test_each_graph_reads_one_frame_not_t(exported: tuple[StreamingEnhancer, StreamingGraphs]) -> None:
    model, graphs = exported
    encoder = onnx.load(graphs.encoder_path).graph
    fusion = onnx.load(graphs.report.path).graph

    def shape(value: onnx.ValueInfoProto) -> list[int | str]:
        return [d.dim_value or d.dim_param for d in value.type.tensor_type.shape.dim]

    (frame,) = encoder.input
    assert frame.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert len(shape(frame)) == 4
    assert shape(frame)[3] == 3
    images = [i for i in fusion.input if i.type.tensor_type.elem_type == onnx.TensorProto.UINT8]
    assert [i.name for i in images] == ["target"]  # the one frame the fusion reads in pixels
    maps = [i for i in fusion.input if i.name != "target"]
    assert len(maps) == model.t * 2
    assert all(len(shape(i)) == 4 and shape(i)[1] in (4, 8) for i in maps)  # one frame's map each
    (out,) = fusion.output
    assert out.type.tensor_type.elem_type == onnx.TensorProto.UINT8


def test_streaming_path_equals_the_full_window_in_fp32(
    exported: tuple[StreamingEnhancer, StreamingGraphs],
) -> None:
    _, graphs = exported
    assert graphs.report.parity_max_abs_error <= PARITY_TOLERANCE
    real = graphs.report.parity_real_max_abs_error
    assert real is not None
    assert real <= PARITY_TOLERANCE
    assert graphs.uint8_max_levels <= UINT8_TOLERANCE_LEVELS
    meta = {p.key: p.value for p in onnx.load(graphs.report.path).metadata_props}
    assert meta["streamer.encoder"] == graphs.encoder_path.name
    assert json.loads(meta["streamer.features"]) == [
        {"name": "half", "channels": 4, "scale": 2},
        {"name": "quarter", "channels": 8, "scale": 4},
    ]


def _frames(n: int, h: int, w: int, cut: int | None = None) -> list[Frame]:
    rng = np.random.default_rng(1)
    base = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    frames = []
    for i in range(n):
        pixels = np.clip(base.astype(np.int16) + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)
        frames.append(
            Frame(pixels, index=i, pts=i, time_base=Fraction(1, 30), arrival=0.0, discontinuity=i == cut)
        )
    return frames


def test_the_runtime_cache_encodes_each_frame_once_and_matches_pytorch(
    exported: tuple[StreamingEnhancer, StreamingGraphs],
) -> None:
    model, graphs = exported
    backend = OnnxBackend(graphs.report.path, providers=["CPUExecutionProvider"])
    assert backend.info.streaming
    assert backend.info.t == 5
    frames = _frames(14, 30, 42, cut=8)  # not a multiple of 4: padded in, cropped out
    windower = Windower(backend.info.t, position=backend.info.output_position)
    cache: FeatureCache[FrameFeatures] = FeatureCache(backend.info.t)
    tasks = [task for f in frames for task in windower.push(f)] + windower.flush()
    assert len(tasks) == len(frames)
    for task in tasks:
        window = Hyperframe(tuple(frames[i] for i in task.indices), task.slot)
        cached = backend.enhance_cached(window, task.run, cache)
        uncached = backend.infer(window.pixels()[None])[0].transpose(1, 2, 0)
        x = torch.from_numpy(window.pixels()[None].astype(np.float32) / 255.0)
        padded = torch.nn.functional.pad(x[0], (0, 2, 0, 2), mode="reflect")[None]
        with torch.no_grad():
            expected = model(padded)[0, :, :30, :42].numpy().transpose(1, 2, 0)
        reference = np.clip(np.rint(expected * 255.0), 0, 255)
        assert cached.shape == (30, 42, 3)
        assert cached.dtype == np.uint8
        assert np.max(np.abs(cached.astype(np.int16) - reference)) <= UINT8_TOLERANCE_LEVELS
        assert np.max(np.abs(cached.astype(np.int16) - uncached)) <= UINT8_TOLERANCE_LEVELS
    stats = cache.stats()
    assert stats.encoded == len(frames)  # once per frame, across 14 windows of 5
    assert stats.resets == 1  # the discontinuity at frame 8 emptied it


def test_a_quarter_resolution_entry_streams_at_quarter_and_eighth_scale(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = StreamingEnhancer(**TINY, entry=4)
    with torch.no_grad():
        model.head.weight.normal_(0.0, 0.05)
    model = model.eval()
    assert model.pad_multiple == 8
    assert model.head.out_channels == 3 * 16  # depth-to-space by 4 back to full resolution
    graphs = export_streaming(model, tmp_path / "quarter.onnx", name="quarter")
    assert graphs.report.parity_max_abs_error <= PARITY_TOLERANCE
    assert [(f["name"], f["scale"]) for f in graphs.features] == [("quarter", 4), ("eighth", 8)]
    backend = OnnxBackend(graphs.report.path, providers=["CPUExecutionProvider"])
    assert backend.info.pad_multiple == 8
    frames = _frames(7, 30, 42)  # padded to 32x48 and cropped back
    windower = Windower(backend.info.t, position=backend.info.output_position)
    cache: FeatureCache[FrameFeatures] = FeatureCache(backend.info.t)
    for task in [t for f in frames for t in windower.push(f)] + windower.flush():
        window = Hyperframe(tuple(frames[i] for i in task.indices), task.slot)
        cached = backend.enhance_cached(window, task.run, cache)
        x = torch.from_numpy(window.pixels()[None].astype(np.float32) / 255.0)
        padded = torch.nn.functional.pad(x[0], (0, 6, 0, 2), mode="reflect")[None]
        with torch.no_grad():
            expected = model(padded)[0, :, :30, :42].numpy().transpose(1, 2, 0)
        reference = np.clip(np.rint(expected * 255.0), 0, 255)
        assert np.max(np.abs(cached.astype(np.int16) - reference)) <= UINT8_TOLERANCE_LEVELS
    assert cache.stats().encoded == len(frames)
    with pytest.raises(ConfigError, match="entry"):
        StreamingEnhancer(entry=3)
    with pytest.raises(ConfigError, match="half_mixing must be one of"):
        StreamingEnhancer(half_mixing="sparse")
    with pytest.raises(ConfigError, match="head_kernel must be 1 or 3"):
        StreamingEnhancer(head_kernel=5)


@pytest.mark.parametrize(
    "shape",
    [{}, {"entry": 4}, {"entry": 4, "half_mixing": "separable", "head_kernel": 1}],
    ids=["entry2", "entry4", "entry4-separable-1x1head"],
)
def test_the_uint8_graphs_fold_scaling_and_round_once_in_cells(
    shape: dict[str, object], tmp_path: Path
) -> None:
    torch.manual_seed(1)
    model = StreamingEnhancer(**{**TINY, **shape})  # type: ignore[arg-type]
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.05)
    model = model.eval()
    e = model.entry_stride
    x = torch.randint(0, 256, (2, model.t, 3, 8 * e, 12 * e)).float()
    b, t, c, h, w = x.shape
    with torch.no_grad():
        expected = model(x / 255.0) * 255.0
        pixels = x.permute(0, 1, 3, 4, 2)  # NTHWC, as decoded
        maps = model.encode_levels(pixels.reshape(b * t, h, w, c))
        stacked = [
            m.reshape(b, t * k, h // s, w // s)
            for m, k, s in zip(maps, model.feature_channels, model.feature_scales, strict=True)
        ]
        cells = model.fuse_cells(*stacked, pixels[:, model.slot])
    assert cells.shape == (b, 3 * e * e, h // e, w // e)
    assert torch.max(torch.abs(torch.nn.functional.pixel_shuffle(cells, e) - expected)) < 1e-3
    graphs = export_streaming(model, tmp_path / "m.onnx", name="m")
    assert graphs.uint8_max_levels <= UINT8_TOLERANCE_LEVELS
    ran = {path: _as_run(path, tmp_path) for path in (graphs.encoder_path, graphs.report.path)}
    ops = [n.op_type for n in ran[graphs.report.path]]
    assert ops.count("QuantizeLinear") == 1  # rounding, clipping and the cast in one pass, in cells
    assert not {"Round", "Clip", "Div", "Mul", "Sub"} & set(ops)  # the folds on weights were computed
    assert ops[-2:] == ["DepthToSpace", "Transpose"]  # on uint8 only
    assert ops.count("DepthToSpace") == 1  # the inner 2x upsampling is one transposed convolution
    for nodes in ran.values():
        (cast,) = [n for n in nodes if n.op_type == "Cast"]  # the full-resolution float frame
        views, readers = list(cast.output), set()
        for view in views:  # through reshapes (no copy, no arithmetic) to what reads the pixels
            for node in (n for n in nodes if view in n.input):
                if node.op_type in ("Reshape", "Unsqueeze"):
                    views.append(node.output[0])
                elif node.op_type != "Shape":
                    readers.add(node.op_type)
        assert readers == {"Conv"}  # one strided convolution, on the rows as decoded: no transpose
        assert "Transpose" not in {n.op_type for n in nodes[: nodes.index(cast)]}


def _as_run(path: Path, tmp_path: Path) -> list[onnx.NodeProto]:
    """The graph's nodes as onnxruntime runs them once its constant folding has computed what depends
    on weights alone (basic optimisations: standard ops, no layout of its own)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / f"run-{path.name}")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return list(onnx.load(options.optimized_model_filepath).graph.node)


def test_a_size_change_starts_an_empty_cache(exported: tuple[StreamingEnhancer, StreamingGraphs]) -> None:
    _, graphs = exported
    backend = OnnxBackend(graphs.report.path, providers=["CPUExecutionProvider"])
    small, large = _frames(6, 24, 32), _frames(6, 32, 48)
    frames = small + [
        Frame(f.pixels, index=f.index + 6, pts=f.index + 6, time_base=f.time_base, arrival=0.0) for f in large
    ]
    windower = Windower(backend.info.t, position=backend.info.output_position)
    cache: FeatureCache[FrameFeatures] = FeatureCache(backend.info.t)
    outputs = []
    for task in [t for f in frames for t in windower.push(f)] + windower.flush():
        window = Hyperframe(tuple(frames[i] for i in task.indices), task.slot)
        outputs.append(backend.enhance_cached(window, task.run, cache).shape)
    assert outputs == [(24, 32, 3)] * 6 + [(32, 48, 3)] * 6
    assert windower.discontinuities == 1
    assert cache.stats().resets == 1


def test_bad_streaming_calls_and_files_are_clear_errors(
    exported: tuple[StreamingEnhancer, StreamingGraphs], tmp_path: Path
) -> None:
    _, graphs = exported
    backend = OnnxBackend(graphs.report.path, providers=["CPUExecutionProvider"])
    features = backend.encode(np.zeros((1, 16, 16, 3), np.uint8))
    with pytest.raises(FrameError, match="T=5"):
        backend.fuse([features * 4], np.zeros((1, 16, 16, 3), np.uint8))
    with pytest.raises(FrameError, match=r"\(N>=1, H, W, 3\) uint8"):
        backend.encode(np.zeros((1, 16, 16, 3), np.float32))  # type: ignore[arg-type]

    model = onnx.load(graphs.report.path)
    for bad in ("../elsewhere.onnx", "/etc/passwd", ""):
        onnx.helper.set_model_props(
            model, {**{p.key: p.value for p in model.metadata_props}, "streamer.encoder": bad}
        )
        path = tmp_path / "hostile.onnx"
        onnx.save(model, path)
        with pytest.raises(ModelError, match="bare file name"):
            OnnxBackend(path, providers=["CPUExecutionProvider"])
    lonely = tmp_path / "lonely.onnx"
    lonely.write_bytes(graphs.report.path.read_bytes())
    with pytest.raises(ModelError, match=r"encoder 'tiny\.encoder\.onnx' is missing"):
        OnnxBackend(lonely, providers=["CPUExecutionProvider"])


def test_models_that_do_not_stream_say_so(tmp_path: Path) -> None:
    from streamer.assets import TEMPORAL_FILTER

    backend = OnnxBackend(TEMPORAL_FILTER, providers=["CPUExecutionProvider"])
    assert not backend.info.streaming
    with pytest.raises(ModelError, match="not a streaming model"):
        backend.encode(np.zeros((1, 8, 8, 3), np.uint8))
    with pytest.raises(ConfigError, match="lacks encode, fuse"):
        export_streaming(torch.nn.Conv2d(3, 3, 1), tmp_path / "x.onnx", name="x")


@pytest.fixture
def fp32(exported: tuple[StreamingEnhancer, StreamingGraphs], tmp_path: Path) -> Path:
    """A copy of the exported pair in a folder of its own, for ``--int8`` to write beside."""
    _, graphs = exported
    path = tmp_path / "tiny.onnx"
    path.write_bytes(graphs.report.path.read_bytes())
    (tmp_path / graphs.encoder_path.name).write_bytes(graphs.encoder_path.read_bytes())
    return path


def test_int8_pair_loads_and_stays_close_to_fp32(fp32: Path) -> None:
    from export.quantize import calibration_frames, quantize_streaming
    from streamer.media.samples import sample_clip

    frames = calibration_frames(str(sample_clip("carphone_pristine")), 8)
    assert frames.shape[0] == 8
    assert frames.dtype == np.uint8
    pair = quantize_streaming(fp32, frames)
    assert pair.path.name == "tiny.int8.onnx"
    assert pair.encoder_path.name == "tiny.int8.encoder.onnx"
    assert pair.kept_fp32  # the first and last convolutions stay fp32
    int8 = OnnxBackend(pair.path, providers=["CPUExecutionProvider"])
    ref = OnnxBackend(fp32, providers=["CPUExecutionProvider"])
    assert int8.info.name == "tiny-int8"
    assert int8.info.streaming
    ops = {n.op_type for n in onnx.load(pair.encoder_path).graph.node}
    assert "QuantizeLinear" in ops
    window = frames[:5][None].transpose(0, 1, 4, 2, 3)
    diff = np.abs(int8.infer(window).astype(np.int16) - ref.infer(window))
    assert float(np.mean(diff)) < 2.0  # mean error under 2 levels of 255


def test_int8_choice_holds_the_flicker_bar_on_consecutive_calibration_frames(fp32: Path) -> None:
    from export.quantize import FLICKER_TOLERANCE, calibration_frames, flicker_sequences, quantize_streaming
    from streamer.media.samples import sample_clip

    clip = str(sample_clip("carphone_pristine"))
    sequences = flicker_sequences(clip, length=8)
    assert [s.sigma for s in sequences] == [15.0, 25.0]
    for sequence in sequences:
        assert sequence.clean.shape == sequence.noisy.shape == (8, 144, 176, 3)
        assert np.any(sequence.clean[1:] != sequence.clean[:-1], axis=(1, 2, 3)).all()  # a moving scene
    pair = quantize_streaming(fp32, calibration_frames(clip, 8), sequences=sequences)
    assert set(pair.flicker) == {15.0, 25.0}
    for reference, int8 in pair.flicker.values():
        assert int8 <= reference + FLICKER_TOLERANCE * abs(reference)
    with pytest.raises(ConfigError, match="at least 6 frames"):
        quantize_streaming(fp32, calibration_frames(clip, 8), sequences=flicker_sequences(clip, length=4))


def test_int8_refuses_window_models_and_bad_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from export.cli import main
    from export.quantize import calibration_frames

    out = tmp_path / "c.onnx"
    assert main(["export", "--arch", "conv3d", "--model-arg", "blocks=0", "--out", str(out), "--int8"]) == 2
    assert "--int8 quantizes streaming models" in capsys.readouterr().err
    assert main(["export", "--arch", "convgru", "--out", str(out), "--streaming"]) == 2
    assert "--streaming converts conv3d models" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ConfigError, match="not a video file"):
        calibration_frames(str(tmp_path / "missing.mp4"), 4)
    with pytest.raises(ConfigError, match="at least 1"):
        calibration_frames(str(tmp_path / "missing.mp4"), 0)


SMALL_CONV3D = {"embed": 4, "features": 6, "channels": 8, "blocks": 1}


def _conv3d() -> Conv3dEnhancer:
    torch.manual_seed(1)
    model = Conv3dEnhancer(**SMALL_CONV3D)
    with torch.no_grad():
        model.head.weight.normal_(0.0, 0.05)
    return model.eval()


def test_a_conv3d_model_streams_as_the_same_function(tmp_path: Path) -> None:
    window = _conv3d()
    streaming = StreamingEnhancer.from_conv3d(window).eval()
    assert streaming.feature_names == ("half",)
    x = torch.rand(2, 5, 3, 32, 48)
    with torch.no_grad():
        assert float((window(x) - streaming(x)).abs().max()) <= PARITY_TOLERANCE
    graphs = export_streaming(streaming, tmp_path / "s.onnx", name="s")
    meta = {p.key: p.value for p in onnx.load(graphs.report.path).metadata_props}
    assert json.loads(meta["streamer.features"]) == [{"name": "half", "channels": 4, "scale": 2}]
    backend = OnnxBackend(graphs.report.path, providers=["CPUExecutionProvider"])
    frames = (x[0].permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
    out = backend.fuse([backend.encode(frames)], frames[2:3])
    with torch.no_grad():
        expected = window(torch.from_numpy(frames).permute(0, 3, 1, 2)[None].float() / 255)
    levels = np.clip(expected[0].permute(1, 2, 0).numpy() * 255, 0, 255)
    assert float(np.abs(out[0].astype(np.float64) - levels).max()) <= UINT8_TOLERANCE_LEVELS


@pytest.mark.parametrize("kwargs", [{"strength": True}, {"fine": 1}])
def test_a_conv3d_with_parts_the_streaming_graphs_lack_is_refused_not_converted_without_them(
    kwargs: dict[str, Any],
) -> None:
    with pytest.raises(ConfigError, match=r"cannot be split for streaming.*without --streaming"):
        StreamingEnhancer.from_conv3d(Conv3dEnhancer(**SMALL_CONV3D, **kwargs))


def test_a_conv3d_export_is_rebuilt_from_its_onnx_file(tmp_path: Path) -> None:
    from export.onnx_export import export_onnx
    from export.recover import conv3d_from_onnx, main

    window = _conv3d()
    path = tmp_path / "w.onnx"
    export_onnx(window, path, name="w", real_frames=False)
    rebuilt = conv3d_from_onnx(path)
    assert rebuilt.config() == window.config()
    for key, value in window.state_dict().items():
        assert torch.allclose(rebuilt.state_dict()[key], value, atol=1e-6), key
    assert main([str(path), "--out", str(tmp_path / "w.pt")]) == 0
    assert set(torch.load(tmp_path / "w.pt", weights_only=True)) == set(window.state_dict())
    with pytest.raises(ConfigError, match="does not exist"):
        conv3d_from_onnx(tmp_path / "missing.onnx")
    export_streaming(_tiny(), tmp_path / "s.onnx", name="s", real_frames=False)
    with pytest.raises(ModelError, match="not an exported Conv3dEnhancer"):
        conv3d_from_onnx(tmp_path / "s.onnx")


def test_a_conv3d_exported_before_up_ran_transposed_is_rebuilt_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files written before ``up_transposed`` hold ``up`` by name, a 1x1 and a depth-to-space."""
    from export.models import conv3d
    from export.onnx_export import export_onnx
    from export.recover import conv3d_from_onnx

    def plain(up: torch.nn.Conv2d, q: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pixel_shuffle(up(q), 2)

    window = _conv3d()
    with monkeypatch.context() as patch:
        patch.setattr(conv3d, "up_transposed", plain)
        export_onnx(window, tmp_path / "old.onnx", name="old", real_frames=False)
    ops = [node.op_type for node in onnx.load(tmp_path / "old.onnx").graph.node]
    assert "ConvTranspose" not in ops
    rebuilt = conv3d_from_onnx(tmp_path / "old.onnx")
    for key, value in window.state_dict().items():
        assert torch.allclose(rebuilt.state_dict()[key], value, atol=1e-6), key


def _entry_as_two_convolutions(model: Conv3dEnhancer, frames: torch.Tensor) -> torch.Tensor:
    """``Conv3dEnhancer.entry`` as files before session 17 ran it: each frame's 2x2 stride-2 embedding,
    then the 3x3 fusion of the T embeddings stacked."""
    b, _, h, w = frames.shape
    t, e = model.t, model.embed_channels
    k = model.embed.weight.reshape(e, 3, 2, 2)
    bias = cast(torch.Tensor, model.embed.bias) - 0.5 * k.sum(dim=(1, 2, 3))
    embedded = F.conv2d(frames.reshape(b * t, 3, h, w), k, bias, stride=2).reshape(b, t * e, h // 2, w // 2)
    fuse = model.fuse.weight.permute(0, 2, 1, 3, 4).reshape(model.features, t * e, 3, 3)
    return F.conv2d(embedded, fuse, model.fuse.bias, padding=1)


def test_a_conv3d_exported_before_its_entry_ran_as_one_convolution_is_rebuilt_to_the_same_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuilt module runs the entry as one convolution; ``rebuild`` checks it against the old file
    with onnxruntime, padded borders included, so the two forms are one function."""
    from export.onnx_export import export_onnx
    from export.recover import conv3d_from_onnx

    window = _conv3d()
    with torch.no_grad():
        window.embed.bias.normal_(0.0, 1.0)  # the bias the old form's padding leaves out at the borders
    with monkeypatch.context() as patch:
        patch.setattr(Conv3dEnhancer, "entry", _entry_as_two_convolutions)
        export_onnx(window, tmp_path / "old.onnx", name="old", real_frames=False)
    ops = [node.op_type for node in onnx.load(tmp_path / "old.onnx").graph.node]
    assert ("Einsum" in ops, ops.count("Conv")) == (False, 7)  # embedding and fusion: two of them
    rebuilt = conv3d_from_onnx(tmp_path / "old.onnx")
    for key, value in window.state_dict().items():
        assert torch.allclose(rebuilt.state_dict()[key], value, atol=1e-6), key
    x = torch.rand(2, 5, 3, 20, 28, dtype=torch.float64)
    with torch.no_grad():
        ours = window.double().entry(x.reshape(2, 15, 20, 28))
        torch.testing.assert_close(ours, _entry_as_two_convolutions(window, x.reshape(2, 15, 20, 28)))


@pytest.mark.parametrize("fine", [0, 2])
def test_a_conv3d_with_a_strength_is_rebuilt_with_its_conditioning_and_fine_blocks(
    tmp_path: Path, fine: int
) -> None:
    from export.models.conv3d import Conv3dEnhancer
    from export.onnx_export import export_onnx
    from export.recover import conv3d_from_onnx

    torch.manual_seed(0)
    window = Conv3dEnhancer(t=3, embed=4, features=8, channels=8, blocks=1, strength=True, fine=fine)
    with torch.no_grad():
        for p in [*window.condition.parameters(), *window.fine.parameters()]:  # type: ignore[union-attr]
            p.normal_(0.0, 0.1)  # trained: the strength and the fine blocks move the output
    export_onnx(window, tmp_path / "s.onnx", name="s", real_frames=False)
    rebuilt = conv3d_from_onnx(tmp_path / "s.onnx")
    assert (rebuilt.takes_strength, rebuilt.blocks, rebuilt.fine_blocks) == (True, 1, fine)
    for key, value in window.state_dict().items():
        assert torch.allclose(rebuilt.state_dict()[key], value, atol=1e-6), key


def test_a_streaming_export_is_rebuilt_from_its_graphs_and_starts_a_separable_tier(tmp_path: Path) -> None:
    from export.distill import init_weights, warm_start
    from export.recover import main, rebuild, streaming_from_onnx
    from streamer.assets import STREAMING_LITE_MODEL

    model = _tiny()
    graphs = export_streaming(model, tmp_path / "s.onnx", name="s", real_frames=False)
    rebuilt = streaming_from_onnx(graphs.report.path)  # its arguments from the graph's metadata
    assert rebuilt.config() == model.config()
    for key, value in model.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[key], value), key  # the weights as trained, by name
    assert main([str(graphs.report.path), "--out", str(tmp_path / "s.pt")]) == 0
    # A file exported before the metadata: its card says the arguments.
    shipped = rebuild(STREAMING_LITE_MODEL)
    assert isinstance(shipped, StreamingEnhancer)
    assert shipped.config()["fused"] == 48
    (tmp_path / "bare.onnx").write_bytes(STREAMING_LITE_MODEL.read_bytes())
    (tmp_path / "stream_t5_lite.encoder.onnx").write_bytes(
        STREAMING_LITE_MODEL.with_name("stream_t5_lite.encoder.onnx").read_bytes()
    )
    with pytest.raises(ConfigError, match="does not say its StreamingEnhancer arguments"):
        streaming_from_onnx(tmp_path / "bare.onnx")
    with pytest.raises(ModelError, match="not a streaming model"):
        streaming_from_onnx(STREAMING_LITE_MODEL.with_name("conv3d_t5.onnx"))

    # A separable mix starts from the rank-1 factors of the dense one: exact where the dense is rank 1.
    student = StreamingEnhancer(**{**TINY, "half_mixing": "separable"}).eval()
    source = init_weights(graphs.report.path, student)
    depthwise, pointwise = torch.randn(4 * model.t, 3, 3), torch.randn(4, 4 * model.t)
    source["mix_half.weight"] = pointwise[:, :, None, None] * depthwise[None]
    copied = warm_start(student, source)
    assert {"mix_half.0.weight", "mix_half.1.weight", "mix_half.1.bias", "entry.weight"} <= set(copied)
    maps = torch.randn(1, 4 * model.t, 6, 8)
    dense = torch.nn.functional.conv2d(maps, source["mix_half.weight"], source["mix_half.bias"], padding=1)
    with torch.no_grad():
        assert torch.allclose(student.mix_half(maps), dense, atol=1e-4)


def test_step_on_a_stateless_streaming_model_is_its_full_window_infer() -> None:
    from streamer.assets import STREAMING_LITE_MODEL
    from streamer.backend.onnx import OnnxBackend

    backend = OnnxBackend(STREAMING_LITE_MODEL, threads=1)
    batch = np.random.default_rng(0).integers(0, 256, (1, 5, 3, 32, 48), dtype=np.uint8)
    stepped, state = backend.step(batch, backend.initial_state(1, 32, 48))
    assert state == ()
    assert np.array_equal(stepped, backend.infer(batch))


@pytest.mark.parametrize(("height", "width"), [(200, 330), (96, 128)])
def test_large_frames_are_encoded_tile_by_tile_into_half_precision_maps_equal_to_the_whole(
    height: int, width: int
) -> None:
    backend = OnnxBackend(STREAMING_MODEL, threads=1)
    try:
        frames = np.random.default_rng(3).integers(0, 256, (2, height, width, 3), dtype=np.uint8)
        whole = backend.encode(frames)
        tiled = backend.encode_tiles(frames, tile=96, overlap=16)  # 200x330 in 3 x 5 tiles, odd edges
        for w_maps, t_maps in zip(whole, tiled, strict=True):
            for w_map, t_map in zip(w_maps, t_maps, strict=True):
                assert t_map.dtype == np.float16
                assert t_map.shape == w_map.shape
                scale = float(np.abs(w_map).max())
                np.testing.assert_allclose(t_map.astype(np.float32), w_map, rtol=1e-3, atol=1e-3 * scale)
    finally:
        backend.close()
