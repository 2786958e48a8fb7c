"""The colour rule and conversions of streamer.media.colour, on single PyAV frames and an unopened encoder."""

from __future__ import annotations

import av
import numpy as np
import pytest
from av.video.codeccontext import VideoCodecContext

from streamer.frame import Colour
from streamer.media.colour import colour_of, from_rgb, resolve, rgb_frame, tag, to_rgb

BT709_TV = Colour(matrix=1, range=1, primaries=1, transfer=1)


def flat(y: int, u: int, v: int, fmt: str = "yuv420p", size: tuple[int, int] = (16, 16)) -> av.VideoFrame:
    """A frame of one colour given as Y, U, V levels."""
    frame = av.VideoFrame(*size, fmt)
    for plane, level in zip(frame.planes, (y, u, v), strict=True):
        np.frombuffer(memoryview(plane), np.uint8).reshape(plane.height, plane.line_size)[:] = level
    return frame


def encoder(width: int, height: int) -> VideoCodecContext:
    codec = av.CodecContext.create("libx264", "w")
    assert isinstance(codec, VideoCodecContext)
    codec.width, codec.height, codec.pix_fmt = width, height, "yuv420p"
    return codec


@pytest.mark.parametrize(
    ("height", "matrix"),
    [(480, 6), (719, 6), (720, 1), (2160, 1)],
)
def test_unspecified_matrix_is_bt601_below_720_lines_and_bt709_from_there(height: int, matrix: int) -> None:
    assert resolve(Colour(), height) == Colour(matrix=matrix, range=1)


def test_stated_colour_is_kept_and_a_matrix_swscale_cannot_apply_is_assumed() -> None:
    assert resolve(Colour(matrix=9, range=2, primaries=9, transfer=16), 480) == Colour(9, 2, 9, 16)
    assert resolve(Colour(matrix=8, range=2), 1080) == Colour(matrix=1, range=2)  # YCgCo: not in swscale


def test_a_frames_tags_are_its_colour_and_yuvj_means_full_range() -> None:
    tagged = flat(128, 128, 128)
    tagged.colorspace, tagged.color_range, tagged.color_primaries, tagged.color_trc = 1, 1, 1, 1
    assert colour_of(tagged) == BT709_TV
    assert colour_of(flat(128, 128, 128, "yuvj420p")) == Colour(range=2)
    assert colour_of(flat(128, 128, 128)) == Colour()


def test_to_rgb_reads_the_frames_own_matrix_and_range() -> None:
    # Pure red in BT.709 tv range is Y 63, U 102, V 240; read as BT.601 it comes out (233, 0, 2).
    red = flat(63, 102, 240)
    red.colorspace, red.color_range = 1, 1
    assert np.abs(to_rgb(red)[8, 8].astype(int) - (255, 0, 0)).max() <= 3
    white = flat(255, 128, 128)
    white.color_range = 2
    assert to_rgb(white)[8, 8].tolist() == [255, 255, 255]


def test_from_rgb_makes_the_yuv_the_encoder_is_tagged_with() -> None:
    red = np.zeros((16, 16, 3), np.uint8)
    red[..., 0] = 255
    codec = encoder(16, 16)
    tag(codec, BT709_TV)
    frame = from_rgb(red, codec)
    assert (frame.format.name, frame.colorspace, frame.color_range) == ("yuv420p", 1, 1)
    levels = [np.frombuffer(memoryview(p), np.uint8)[0] for p in frame.planes]
    assert np.abs(np.array(levels) - (63, 102, 240)).max() <= 1


def test_tag_writes_what_an_untagged_stream_is_assumed_to_be() -> None:
    codec = encoder(1280, 720)
    tag(codec, Colour())
    assert (codec.colorspace, codec.color_range, codec.color_primaries, codec.color_trc) == (1, 1, 2, 2)


def test_rgb_frame_reads_views_in_place_and_copies_only_what_it_cannot() -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (36, 66, 3), dtype=np.uint8)
    pixels.flags.writeable = False  # as inside a Frame
    for view in (pixels, pixels[:, :64], pixels[::2], pixels.transpose(1, 0, 2)):
        got = rgb_frame(view).to_ndarray(format="rgb24")
        np.testing.assert_array_equal(got, view)
