"""4:2:0 planes: made in a graph as swscale makes them, carried by frames, taken by encoders as they are."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from fractions import Fraction

import av
import numpy as np
import onnxruntime as ort
import pytest
from av.video.codeccontext import VideoCodecContext
from onnx import TensorProto, helper

from streamer.core.gate import luma_thumbnail
from streamer.core.noise import noise_sigma
from streamer.errors import ConfigError, FrameError
from streamer.frame import Colour, Frame, Yuv420
from streamer.measure.synthetic import camera_clip
from streamer.media.colour import encoder_frame, from_rgb, resolve, rgb_frame, tag, to_rgb, yuv_frame, yuv_of
from streamer.media.yuv import i420_nodes, matrices, rgb_nodes
from streamer.webrtc.playback import FrameHub

HEIGHT, WIDTH = 48, 80


def picture(seed: int = 0) -> np.ndarray:
    """Gradients under a camera's noise: smooth parts, edges and noise all in one frame."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    base = np.stack([3 * x, 255 - 5 * y, 128 + 100 * np.sin(x / 5 + y / 7)], axis=-1)
    noisy = base + np.random.default_rng(seed).normal(0, 20, base.shape)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def encoder(colour: Colour) -> VideoCodecContext:
    context = av.CodecContext.create("libx264", "w")
    assert isinstance(context, VideoCodecContext)
    context.width, context.height, context.pix_fmt = WIDTH, HEIGHT, "yuv420p"
    tag(context, colour)
    return context


def swscale_planes(rgb: np.ndarray, colour: Colour) -> Yuv420:
    """rgb24 to yuv420p through swscale, as an encoder tagged ``colour`` and fed RGB converts it."""
    planes = yuv_of(from_rgb(rgb, encoder(colour)))
    assert planes is not None
    return planes


def graph_planes(rgb: np.ndarray, colour: Colour) -> tuple[np.ndarray, np.ndarray]:
    nodes, consts = i420_nodes("rgb", colour, "y", "uv")
    graph = helper.make_graph(
        nodes,
        "i420",
        [helper.make_tensor_value_info("rgb", TensorProto.UINT8, [1, 3, "H", "W"])],
        [
            helper.make_tensor_value_info("y", TensorProto.UINT8, None),
            helper.make_tensor_value_info("uv", TensorProto.UINT8, None),
        ],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y, uv = session.run(None, {"rgb": np.ascontiguousarray(rgb.transpose(2, 0, 1)[None])})
    return y[0, 0], uv[0]


@pytest.mark.parametrize(
    "colour",
    [Colour(1, 1), Colour(1, 2), Colour(6, 1), Colour(5, 2), Colour(9, 1)],
    ids=["bt709-tv", "bt709-pc", "bt601-tv", "bt470bg-pc", "bt2020-tv"],
)
def test_the_graphs_planes_are_swscales_within_a_level(colour: Colour) -> None:
    rgb = picture()
    y, uv = graph_planes(rgb, colour)
    made = swscale_planes(rgb, colour)
    assert y.shape == (HEIGHT, WIDTH)
    assert uv.shape == (2, HEIGHT // 2, WIDTH // 2)
    assert int(np.abs(y.astype(np.int16) - made.y).max()) <= 1
    assert int(np.abs(uv[0].astype(np.int16) - made.u).max()) <= 1
    assert int(np.abs(uv[1].astype(np.int16) - made.v).max()) <= 1


def test_the_matrices_are_the_standards_and_an_unresolved_colour_is_refused() -> None:
    y, uv, offset = matrices(Colour(6, 2))
    assert y == pytest.approx([0.299, 0.587, 0.114])
    assert uv.sum(axis=1) == pytest.approx([0.0, 0.0], abs=1e-12)  # grey has no colour
    assert offset == 0.0
    y, _, offset = matrices(Colour(1, 1))
    assert y.sum() == pytest.approx(219 / 255)
    assert offset == 16.0
    with pytest.raises(ConfigError, match=r"AVColorSpace 2 and range 0; resolve the stream's colour first"):
        matrices(Colour())


def test_planes_of_a_bad_shape_are_refused_by_name() -> None:
    y = np.zeros((HEIGHT, WIDTH), np.uint8)
    half = np.zeros((HEIGHT // 2, WIDTH // 2), np.uint8)
    with pytest.raises(FrameError, match=r"H and W even"):
        Yuv420(np.zeros((HEIGHT - 1, WIDTH), np.uint8), half, half, Colour(6, 1))
    with pytest.raises(FrameError, match=r"\(48, 80\), \(24, 40\), \(24, 41\)"):
        Yuv420(y, half, np.zeros((24, 41), np.uint8), Colour(6, 1))


def test_a_frame_of_planes_is_converted_to_rgb_once_where_a_stage_asks() -> None:
    planes = swscale_planes(picture(), Colour(6, 1))
    frame = Frame(planes, 7, 7, Fraction(1, 30), 0.0)
    assert (frame.height, frame.width) == (HEIGHT, WIDTH)
    rgb = frame.pixels
    assert rgb is frame.pixels  # made once
    assert not rgb.flags.writeable
    assert np.array_equal(rgb, to_rgb(yuv_frame(planes)))
    assert not planes.y.flags.writeable
    moved = frame.with_pixels(picture(1))
    assert moved.index == 7
    assert isinstance(moved.picture, np.ndarray)


def test_an_encoder_takes_planes_in_its_own_colour_as_they_are_and_converts_others() -> None:
    rgb = picture()
    codec = encoder(Colour())  # unstated: BT.601 tv range at this height
    assert resolve(Colour(), HEIGHT) == Colour(6, 1)
    mine = swscale_planes(rgb, Colour(6, 1))
    taken = encoder_frame(Frame(mine, 0, 0, Fraction(1, 30), 0.0), codec)
    assert taken.format.name == "yuv420p"
    assert (taken.colorspace, taken.color_range) == (6, 1)
    flat = np.asarray(taken.to_ndarray(), np.uint8)
    assert np.array_equal(flat[:HEIGHT], mine.y)
    assert np.array_equal(flat[HEIGHT:].reshape(2, HEIGHT // 2, WIDTH // 2)[1], mine.v)
    other = Frame(swscale_planes(rgb, Colour(1, 2)), 0, 0, Fraction(1, 30), 0.0)  # another matrix
    converted = encoder_frame(other, codec)
    assert np.array_equal(converted.to_ndarray(), from_rgb(other.pixels, codec).to_ndarray())
    plain = Frame(rgb, 0, 0, Fraction(1, 30), 0.0)
    assert np.array_equal(encoder_frame(plain, codec).to_ndarray(), from_rgb(rgb, codec).to_ndarray())


def planes_of(frame: av.VideoFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An encoder's input frame's Y, U and V (yuv420p, no row padding at these sizes)."""
    flat = np.asarray(frame.to_ndarray(), np.uint8)
    chroma = flat[HEIGHT:].reshape(2, HEIGHT // 2, WIDTH // 2)
    return flat[:HEIGHT], chroma[0], chroma[1]


@pytest.mark.parametrize(
    "colour", [Colour(6, 1), Colour(1, 1), Colour(6, 2)], ids=["601tv", "709tv", "601pc"]
)
def test_a_model_that_changes_nothing_gives_the_encoder_the_decoders_planes_exactly(colour: Colour) -> None:
    """The model's RGB output, equal to the RGB it was given, leaves as the planes the frame came as:
    not one sample moved, where converting that RGB back moves many (the chroma resampled twice)."""
    planes = swscale_planes(picture(), colour)
    frame = Frame(planes, 3, 3, Fraction(1, 30), 0.0)
    out = frame.enhanced(frame.pixels.copy())
    assert out.planes_out == colour
    got = out.planes
    assert got is not None
    assert got is out.planes  # made once
    for made, came in zip((got.y, got.u, got.v), (planes.y, planes.u, planes.v), strict=True):
        assert np.array_equal(made, came)
    codec = encoder(colour)
    for made, came in zip(planes_of(encoder_frame(out, codec)), (planes.y, planes.u, planes.v), strict=True):
        assert np.array_equal(made, came)
    through_rgb = planes_of(from_rgb(out.pixels, codec))
    assert not np.array_equal(through_rgb[1], planes.u)


def test_a_models_change_is_carried_onto_the_planes_it_came_from() -> None:
    """A model that brightens every pixel by 20 levels of RGB moves Y by 20 levels' worth of luma and
    leaves the chroma of grey where it was; a model that changes one corner changes the planes there
    only."""
    colour = Colour(6, 1)
    flat = np.full((HEIGHT, WIDTH, 3), 100, np.uint8)
    planes = swscale_planes(flat, colour)
    frame = Frame(planes, 0, 0, Fraction(1, 30), 0.0)
    brighter = frame.enhanced(np.clip(frame.pixels.astype(np.int16) + 20, 0, 255).astype(np.uint8)).planes
    assert brighter is not None
    assert np.abs(brighter.y.astype(np.int16) - planes.y - round(20 * 219 / 255)).max() <= 1
    assert np.abs(brighter.u.astype(np.int16) - planes.u).max() <= 1
    assert np.abs(brighter.v.astype(np.int16) - planes.v).max() <= 1
    busy = swscale_planes(picture(), colour)
    source = Frame(busy, 0, 0, Fraction(1, 30), 0.0)
    corner = source.pixels.copy()
    corner[:16, :16] = 255 - corner[:16, :16]
    changed = source.enhanced(corner).planes
    assert changed is not None
    assert not np.array_equal(changed.y[:16, :16], busy.y[:16, :16])
    assert np.array_equal(changed.y[:, 24:], busy.y[:, 24:])
    assert np.array_equal(changed.u[:, 12:], busy.u[:, 12:])
    assert np.array_equal(changed.y[24:], busy.y[24:])


def test_only_an_enhanced_frame_of_the_same_size_leaves_as_its_sources_planes() -> None:
    """A picture made apart from the frame's (a card, a crop, an x2 model's output) or from an RGB source
    has no planes to carry a change onto: it is converted by the encoder, as before. A reused output
    leaves as the output it repeats; a frame's copy keeps no cache of the frame it was."""
    planes = swscale_planes(picture(), Colour(6, 1))
    frame = Frame(planes, 0, 0, Fraction(1, 30), 0.0)
    assert frame.planes is planes
    assert frame.planes_out == Colour(6, 1)
    assert frame.with_pixels(picture(1)).planes is None
    larger = np.zeros((2 * HEIGHT, 2 * WIDTH, 3), np.uint8)
    assert frame.enhanced(larger).planes_out is None
    plain = Frame(picture(), 0, 0, Fraction(1, 30), 0.0)
    assert plain.enhanced(picture(1)).planes is None
    out = frame.enhanced(picture(1))
    made = out.planes
    later = Frame(swscale_planes(picture(2), Colour(6, 1)), 1, 1, Fraction(1, 30), 0.0)
    reused = later.showing(out)
    assert (reused.index, reused.planes) == (1, made)
    assert dataclasses.replace(out, index=5).planes is None


def test_a_whep_player_gets_bt601_planes_as_they_are_and_others_through_rgb() -> None:
    """A player's track (what aiortc's encoder takes, yuv420p read as BT.601 tv range): a frame whose
    planes are already so goes out with them unchanged; planes in another matrix go through RGB."""
    hub = FrameHub("cam")
    track = hub.subscribe()
    rgb = picture()
    sd = swscale_planes(rgb, Colour(6, 1))
    hd = swscale_planes(rgb, Colour(1, 1))

    async def play(frame: Frame) -> av.VideoFrame:
        hub.publish(frame)
        return await track.recv()

    sent_sd = asyncio.run(play(Frame(sd, 0, 0, Fraction(1, 30), 0.0)))
    flat = np.asarray(sent_sd.to_ndarray(), np.uint8)
    assert np.array_equal(flat[:HEIGHT], sd.y)
    assert np.array_equal(flat[HEIGHT:].reshape(2, HEIGHT // 2, WIDTH // 2)[0], sd.u)
    hd_frame = Frame(hd, 1, 1, Fraction(1, 30), 0.0)
    sent_hd = asyncio.run(play(hd_frame))
    expected = rgb_frame(hd_frame.pixels).reformat(format="yuv420p").to_ndarray()
    assert np.array_equal(sent_hd.to_ndarray(), expected)


def test_a_decoded_frames_planes_are_taken_as_they_lie_with_its_colour() -> None:
    """``yuv_of``: a decoded yuv420p frame's planes, views of its own buffers (no copy), read as its
    tags say (yuvj420p: pc range); other formats and odd sizes give None."""
    clip, _ = camera_clip(WIDTH, HEIGHT, frames=2, fps=30)
    with av.open(io.BytesIO(clip), "r", format="h264") as given:
        decoded = next(given.decode(video=0))
        planes = yuv_of(decoded)
        assert planes is not None
        flat = np.asarray(decoded.to_ndarray(), np.uint8)
        assert np.array_equal(planes.y, flat[:HEIGHT])
        chroma = flat[HEIGHT:].reshape(2, HEIGHT // 2, WIDTH // 2)
        assert np.array_equal(planes.u, chroma[0])
        assert np.array_equal(planes.v, chroma[1])
        assert planes.colour == Colour(6, 1)  # untagged, under 720 lines: BT.601 tv
        assert planes.y.base is not None  # a view of the frame's own memory
    full = decoded.reformat(format="yuvj420p")
    taken = yuv_of(full)
    assert taken is not None
    assert taken.colour.range == 2
    assert yuv_of(decoded.reformat(format="rgb24")) is None
    assert yuv_of(decoded.reformat(width=WIDTH - 2, height=HEIGHT - 1)) is None


@pytest.mark.parametrize(
    "colour",
    [Colour(6, 1), Colour(1, 1), Colour(1, 2), Colour(9, 1)],
    ids=["bt601-tv", "bt709-tv", "bt709-pc", "bt2020-tv"],
)
def test_planes_made_rgb_in_a_graph_read_as_swscale_reads_them_within_three_levels(colour: Colour) -> None:
    """The graph a model that takes planes starts with: each chroma sample for its 2x2 block and the
    exact matrix, against swscale's fixed-point tables (what a source's ``to_rgb`` gives)."""
    rng = np.random.default_rng(3)
    lo, hi = (16, 236) if colour.range == 1 else (0, 256)
    y = rng.integers(lo, hi, (HEIGHT, WIDTH), dtype=np.uint8)
    u, v = (rng.integers(lo, hi, (HEIGHT // 2, WIDTH // 2), dtype=np.uint8) for _ in range(2))
    planes = Yuv420(y, u, v, colour)
    nodes, consts = rgb_nodes("y", "uv", colour, "rgb")
    graph = helper.make_graph(
        nodes,
        "planes_to_rgb",
        [
            helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 1, "H", "W"]),
            helper.make_tensor_value_info("uv", TensorProto.UINT8, [1, 2, "H2", "W2"]),
        ],
        [helper.make_tensor_value_info("rgb", TensorProto.UINT8, None)],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (rgb,) = session.run(None, {"y": y[None, None], "uv": np.stack([u, v])[None]})
    reference = to_rgb(yuv_frame(planes)).astype(np.int16)
    assert rgb.shape == (1, 3, HEIGHT, WIDTH)
    difference = np.abs(rgb[0].transpose(1, 2, 0).astype(np.int16) - reference)
    assert int(difference.max()) <= 3
    assert float(difference.mean()) < 1.0


def test_the_gate_and_the_noise_estimate_read_planes_luma_as_they_read_rgbs() -> None:
    """Planes are not converted for the gate's thumbnails or the noise estimate: their Y plane, tv
    range stretched, reads within 3 levels of the RGB's luma, and the same noise."""
    clip, _ = camera_clip(320, 192, frames=1, fps=30)
    with av.open(io.BytesIO(clip), "r", format="h264") as given:
        decoded = next(given.decode(video=0))
    planes, rgb = yuv_of(decoded), to_rgb(decoded)
    assert planes is not None
    thumbs = luma_thumbnail(planes, 64), luma_thumbnail(rgb, 64)
    assert thumbs[0].shape == thumbs[1].shape == (38, 64)
    assert float(np.abs(thumbs[0] - thumbs[1]).max()) < 3.0
    noisy = np.clip(rgb + np.random.default_rng(1).normal(0, 10, rgb.shape), 0, 255).astype(np.uint8)
    noisy_planes = yuv_of(av.VideoFrame.from_ndarray(noisy, format="rgb24").reformat(format="yuv420p"))
    assert noisy_planes is not None
    assert noise_sigma(noisy_planes) == pytest.approx(noise_sigma(noisy), rel=0.05)
