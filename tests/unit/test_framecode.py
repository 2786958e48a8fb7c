"""Frame codes survive what a frame goes through on its way: H.264 at a low bitrate, 4:2:0, the model."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import av
import numpy as np
import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.errors import FrameError
from streamer.media import framecode

VALUES = [0, 1, 2, 0x5A5A5A, 0x123456, framecode.MAX_VALUE]


def noisy(seed: int, height: int = 144, width: int = 256, sigma: float = 20.0) -> np.ndarray:
    """A mid-grey ramp under Gaussian noise: the kind of picture the denoiser is for."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(40, 215, width, dtype=np.float32)[None, :, None].repeat(height, 0).repeat(3, 2)
    return np.clip(ramp + rng.normal(0, sigma, ramp.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("value", VALUES)
def test_round_trip_is_exact(value: int) -> None:
    assert framecode.read(framecode.stamp(noisy(value % 7), value)) == value


def test_stamp_copies_and_leaves_the_rest_of_the_picture() -> None:
    pixels = noisy(0)
    stamped = framecode.stamp(pixels, 77)
    assert stamped is not pixels
    assert framecode.read(pixels) is None
    code_h, code_w = framecode.ROWS * framecode.CELL, framecode.COLUMNS * framecode.CELL
    assert np.array_equal(stamped[code_h:], pixels[code_h:])
    assert np.array_equal(stamped[:, code_w:], pixels[:, code_w:])


def test_a_picture_without_a_code_reads_none() -> None:
    assert framecode.read(np.zeros((144, 256, 3), np.uint8)) is None
    assert framecode.read(np.full((144, 256, 3), 255, np.uint8)) is None
    assert framecode.read(noisy(3)) is None
    assert framecode.read(np.zeros((32, 32, 3), np.uint8)) is None  # too small to hold one


def test_a_flipped_bit_reads_none_not_a_wrong_number() -> None:
    stamped = framecode.stamp(noisy(1), 0x00F00F)
    cell = framecode.CELL
    row, col = divmod(10, framecode.COLUMNS)  # a data cell
    stamped[row * cell : (row + 1) * cell, col * cell : (col + 1) * cell] ^= 255
    assert framecode.read(stamped) is None


def test_values_that_do_not_fit_and_pictures_too_small_are_refused() -> None:
    with pytest.raises(FrameError, match="24 bits"):
        framecode.stamp(noisy(0), framecode.MAX_VALUE + 1)
    with pytest.raises(FrameError, match="24 bits"):
        framecode.stamp(noisy(0), -1)
    with pytest.raises(FrameError, match="at least 128x64"):
        framecode.stamp(np.zeros((48, 256, 3), np.uint8), 1)


def test_codes_survive_libx264_at_a_low_bitrate_in_4_2_0_read_as_rgb_or_from_the_luma_plane() -> None:
    width, height, fps = 256, 144, 30
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuv420p"
    encoder.time_base, encoder.framerate = Fraction(1, fps), Fraction(fps)
    encoder.bit_rate = 150_000  # ~0.14 bit per pixel: visibly blocky on this noise
    encoder.options = {"preset": "ultrafast", "tune": "zerolatency", "bf": "0", "g": "30"}
    decoder = av.CodecContext.create("h264", "r")
    sent = list(range(1000, 1060))
    got: list[int | None] = []
    from_planes: list[int | None] = []

    def decode(packets: list[av.Packet[Any]]) -> None:
        for packet in packets:
            for f in decoder.decode(packet):
                got.append(framecode.read(np.asarray(f.to_ndarray(format="rgb24"), np.uint8)))
                from_planes.append(framecode.read_frame(f))

    for i, value in enumerate(sent):
        frame = av.VideoFrame.from_ndarray(framecode.stamp(noisy(i, height, width), value), format="rgb24")
        frame.pts = i
        decode(encoder.encode(frame))
    decode(encoder.encode(None))
    assert got == sent
    assert from_planes == sent


def test_a_frame_that_is_not_4_2_0_is_read_through_rgb() -> None:
    frame = av.VideoFrame.from_ndarray(framecode.stamp(noisy(0), 4242), format="rgb24")
    assert framecode.read_frame(frame) == 4242
    assert framecode.read_frame(frame.reformat(format="yuv420p")) == 4242


def test_codes_survive_the_shipped_denoiser() -> None:
    backend = OnnxBackend(TEMPORAL_FILTER)
    t, center = backend.info.t, backend.info.t // 2
    # Neighbours whose codes differ from the center's in many bits, and in one bit.
    for values in ([0, framecode.MAX_VALUE, 0x555555, 0xAAAAAA, 7], [40, 41, 42, 43, 44]):
        frames = [framecode.stamp(noisy(i), v) for i, v in enumerate(values[:t])]
        batch = np.stack(frames).transpose(0, 3, 1, 2)[None]
        out = backend.infer(batch)[0].transpose(1, 2, 0)
        assert framecode.read(np.ascontiguousarray(out)) == values[center]
