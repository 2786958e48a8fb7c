"""File and synthetic sources, file and null sinks, against real files and real encoders."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.errors import (
    ConfigError,
    EndOfStream,
    FrameError,
    SinkError,
    SourceError,
    SourceNotFoundError,
)
from streamer.frame import Frame, StreamInfo, Yuv420
from streamer.media.hwcodec import nvdec_unavailable, nvenc_unavailable
from streamer.sinks import FileSink, NullSink
from streamer.sources import FileSource, Source, SyntheticSource

MakeClip = Callable[..., Path]


@dataclass
class Drained:
    info: StreamInfo
    frames: list[Frame]
    error: BaseException | None


async def _drain(source: Source) -> Drained:
    """Every frame the source gives, and the error it stopped with, if any."""
    info = await source.open()
    frames: list[Frame] = []
    try:
        while True:
            frames.append(await source.recv())
    except EndOfStream:
        return Drained(info, frames, None)
    except SourceError as exc:
        return Drained(info, frames, exc)
    finally:
        await source.aclose()


def drain(source: Source) -> Drained:
    return asyncio.run(_drain(source))


@dataclass
class ReadBack:
    times: list[Fraction]
    width: int
    height: int
    pix_fmt: str | None
    blue: list[float]


def read_back(path: Path) -> ReadBack:
    """What an independent PyAV reader sees in a written file: presentation times, size, content."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        tb = stream.time_base
        assert tb is not None
        times, blue = [], []
        for frame in container.decode(stream):
            assert frame.pts is not None
            times.append(frame.pts * tb)
            blue.append(float(frame.to_ndarray(format="rgb24")[..., 2].mean()))
        return ReadBack(times, stream.width, stream.height, stream.codec_context.pix_fmt, blue)


async def _copy(source: Source, sink: FileSink) -> list[Frame]:
    info = await source.open()
    await sink.open(info)
    frames = []
    try:
        async for frame in source:
            await sink.send(frame)
            frames.append(frame)
    finally:
        await source.aclose()
        await sink.aclose()
    return frames


def _frame(pixels: np.ndarray, index: int, pts: int | None = None, tb: Fraction = Fraction(1, 25)) -> Frame:
    return Frame(pixels, index, index if pts is None else pts, tb, 0.0)


def _info(width: int, height: int, fps: int = 25) -> StreamInfo:
    return StreamInfo(width=width, height=height, fps=Fraction(fps), time_base=Fraction(1, fps))


# --- FileSource ----------------------------------------------------------------------------------------


def test_file_source_reports_bikes_stream_info_and_gapless_frames(real_clip: Path) -> None:
    got = drain(FileSource(real_clip, stream_id="cam"))

    assert got.error is None
    assert got.info == StreamInfo(
        width=640,
        height=272,
        fps=Fraction(25),
        time_base=Fraction(1, 12800),
        frame_count=250,
        live=False,
        planes=True,
    )
    assert [f.index for f in got.frames] == list(range(250))
    assert [f.pts for f in got.frames] == [512 * i for i in range(250)]
    first = got.frames[0]
    assert isinstance(first.picture, Yuv420)  # the decoder's own planes; RGB made where asked
    assert first.pixels.shape == (272, 640, 3)
    assert first.pixels.dtype == np.uint8
    assert not first.pixels.flags.writeable
    assert {f.stream_id for f in got.frames} == {"cam"}
    assert all(f.time_base == Fraction(1, 12800) for f in got.frames)
    assert all(a.arrival <= b.arrival for a, b in zip(got.frames, got.frames[1:], strict=False))


def test_file_source_decodes_rgb_in_channel_order(make_clip: MakeClip) -> None:
    got = drain(FileSource(make_clip(frames=12)))

    assert len(got.frames) == 12
    # The clip's blue channel is 6 * index; red ramps 0..255 left to right.
    blue = [float(f.pixels[..., 2].mean()) for f in got.frames]
    assert blue == pytest.approx([6.0 * i for i in range(12)], abs=3)
    assert got.frames[0].pixels[:, :4, 0].mean() < 20
    assert got.frames[0].pixels[:, -4:, 0].mean() > 235


def test_auto_decode_and_encode_without_a_gpu_take_the_cpu_and_give_the_same_frames(
    make_clip: MakeClip, tmp_path: Path
) -> None:
    """``decode: auto`` and ``codec: auto`` on a machine whose probes find no NVDEC or NVENC (this one,
    CI's): the CPU's decoder and libx264, the same frames as asked for by name."""
    if nvdec_unavailable() is None or nvenc_unavailable() is None:
        pytest.skip("this machine's GPU decodes or encodes: auto takes it")
    clip = make_clip(frames=12)
    plain = drain(FileSource(clip))
    auto = drain(FileSource(clip, decode="auto"))
    assert [f.pixels.tobytes() for f in auto.frames] == [f.pixels.tobytes() for f in plain.frames]
    sink = FileSink(tmp_path / "auto.mp4", codec="auto")
    assert sink.codec == "libx264"
    asyncio.run(_copy(FileSource(clip), sink))
    asyncio.run(_copy(FileSource(clip), FileSink(tmp_path / "named.mp4", codec="libx264")))
    written, named = read_back(tmp_path / "auto.mp4"), read_back(tmp_path / "named.mp4")
    assert (written.times, written.width, written.height, written.pix_fmt) == (
        named.times,
        named.width,
        named.height,
        named.pix_fmt,
    )
    # libx264's threads may settle a frame's bits differently from run to run: the pictures, not the bytes
    assert written.blue == pytest.approx(named.blue, abs=1)


def test_missing_file_is_source_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nope.mp4"

    with pytest.raises(SourceNotFoundError, match=re.escape(str(missing))) as caught:
        drain(FileSource(missing))

    assert isinstance(caught.value, FileNotFoundError)


def test_a_fifo_or_folder_is_refused_without_blocking_on_open(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer for ever

    for path in (fifo, tmp_path):
        with pytest.raises(SourceError, match="is not a regular file"):
            drain(FileSource(path))


def test_random_bytes_are_a_source_error_naming_the_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(np.random.default_rng(7).integers(0, 256, 20_000, dtype=np.uint8).tobytes())

    with pytest.raises(SourceError, match=re.escape(str(junk))) as caught:
        drain(FileSource(junk))

    assert not isinstance(caught.value, SourceNotFoundError)
    assert "Invalid data" in str(caught.value)


def test_audio_only_file_has_no_video_stream(tmp_path: Path) -> None:
    wav = tmp_path / "tone.wav"
    with av.open(str(wav), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), dtype=np.int16), format="s16", layout="mono")
        frame.sample_rate = 8000
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))

    with pytest.raises(SourceError, match=r"tone\.wav' has no video stream \(streams: audio\)"):
        drain(FileSource(wav))


def test_truncated_mp4_with_index_at_the_end_fails_to_open(real_clip: Path, tmp_path: Path) -> None:
    data = real_clip.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) * 6 // 10])

    # bikes.mp4 keeps its moov atom at the end: 60% of it has no index, so nothing is decodable.
    with pytest.raises(SourceError, match=r"PyAV cannot open '.*cut\.mp4'"):
        drain(FileSource(cut))


def test_truncated_faststart_mp4_ends_cleanly_with_a_prefix(make_clip: MakeClip, tmp_path: Path) -> None:
    data = make_clip(frames=40, faststart=True).read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) * 6 // 10])

    got = drain(FileSource(cut))

    # The index promises 40 frames; the decoder stops where the bytes do, without an error.
    assert got.error is None
    assert got.info.frame_count == 40
    assert 10 < len(got.frames) < 40
    assert [f.index for f in got.frames] == list(range(len(got.frames)))
    assert [f.pts for f in got.frames] == [512 * i for i in range(len(got.frames))]


def test_zeroed_data_mid_file_loses_frames_and_plays_on(real_clip: Path, tmp_path: Path) -> None:
    data = bytearray(real_clip.read_bytes())
    start = len(data) // 3
    data[start : start + 20_000] = bytes(20_000)
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(bytes(data))

    source = FileSource(bad)
    got = drain(source)

    assert got.error is None  # the frames after the damage play on, as FFmpeg's own player goes on
    assert 0 < len(got.frames) < 250
    assert source.undecodable > 0


def test_garbage_mid_file_is_counted_as_frames_lost_and_said_once(
    real_clip: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = bytearray(real_clip.read_bytes())
    start = len(data) // 2
    data[start : start + 4096] = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    bad = tmp_path / "garbage.mp4"
    bad.write_bytes(bytes(data))
    source = FileSource(bad)
    with caplog.at_level(logging.WARNING, logger="streamer.sources.file"):
        got = drain(source)
    with av.open(str(real_clip)) as container:
        packets = sum(1 for p in container.demux(video=0) if p.size)
    assert got.error is None
    assert source.undecodable == packets - len(got.frames) > 0
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"'{bad}': {source.undecodable} frames could not be decoded")


@pytest.mark.timeout(20)
def test_aclose_returns_while_a_block_source_waits_on_a_full_channel(real_clip: Path) -> None:
    async def scenario() -> tuple[int, int]:
        source = FileSource(real_clip, capacity=2)
        await source.open()
        while (stats := source.stats()) is not None and stats.depth < 2:
            await asyncio.sleep(0)
        await source.aclose()
        stats = source.stats()
        assert stats is not None
        leftovers = [frame async for frame in source]
        return stats.put, len(leftovers)

    put, leftovers = asyncio.run(scenario())

    # The decode thread stopped near the channel's capacity instead of decoding the whole file.
    assert put < 10
    assert leftovers <= 2


# --- FileSink ------------------------------------------------------------------------------------------


def test_bikes_round_trip_keeps_count_size_and_pts(real_clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.mp4"
    sink = FileSink(out)

    sent = asyncio.run(_copy(FileSource(real_clip), sink))

    assert sink.frames_written == len(sent) == 250
    back = read_back(out)
    assert back.times == [f.pts * f.time_base for f in sent if f.pts is not None]
    assert back.times == sorted(back.times)
    assert (back.width, back.height) == (640, 272)
    assert back.pix_fmt == "yuv420p"


def test_synthetic_to_mkv_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "out.mkv"
    sink = FileSink(out, preset="ultrafast", gop=10)

    sent = asyncio.run(_copy(SyntheticSource(width=128, height=72, fps=30, frames=45), sink))

    back = read_back(out)
    assert len(back.times) == sink.frames_written == len(sent) == 45
    # Matroska stores milliseconds, so 1/30 s steps come back rounded to the nearest one.
    assert back.times == [Fraction(round(Fraction(1000 * i, 30)), 1000) for i in range(45)]
    assert (back.width, back.height) == (128, 72)


def test_odd_size_frames_encode_as_yuv444(tmp_path: Path) -> None:
    out = tmp_path / "odd.mp4"

    async def write() -> None:
        sink = FileSink(out, preset="ultrafast")
        await sink.open(_info(97, 63))
        for i in range(10):
            await sink.send(_frame(np.full((63, 97, 3), 20 * i, dtype=np.uint8), i))
        await sink.aclose()

    asyncio.run(write())

    back = read_back(out)
    assert (back.width, back.height) == (97, 63)
    assert back.pix_fmt == "yuv444p"
    assert back.times == [Fraction(i, 25) for i in range(10)]
    assert back.blue == pytest.approx([20.0 * i for i in range(10)], abs=2)


def test_frames_without_pts_get_times_from_their_index(tmp_path: Path) -> None:
    out = tmp_path / "nopts.mp4"

    async def write() -> None:
        sink = FileSink(out, preset="ultrafast")
        await sink.open(StreamInfo(width=64, height=48, fps=Fraction(30), time_base=Fraction(1, 90_000)))
        for i in range(6):
            pixels = np.zeros((48, 64, 3), dtype=np.uint8)
            await sink.send(Frame(pixels, i, None, Fraction(1, 90_000), 0.0))
        await sink.aclose()

    asyncio.run(write())

    assert read_back(out).times == [Fraction(i, 30) for i in range(6)]


def test_wrong_size_frame_is_a_frame_error_and_the_file_stays_valid(tmp_path: Path) -> None:
    out = tmp_path / "sized.mp4"

    async def write() -> FileSink:
        sink = FileSink(out, preset="ultrafast")
        await sink.open(_info(96, 64))
        await sink.send(_frame(np.zeros((64, 96, 3), dtype=np.uint8), 0))
        with pytest.raises(FrameError, match=r"is 128x72 but '.*sized\.mp4' was opened for 96x64"):
            await sink.send(_frame(np.zeros((72, 128, 3), dtype=np.uint8), 1))
        await sink.send(_frame(np.zeros((64, 96, 3), dtype=np.uint8), 2))
        await sink.aclose()
        await sink.aclose()
        return sink

    sink = asyncio.run(write())

    assert sink.frames_written == 2
    assert read_back(out).times == [Fraction(0), Fraction(2, 25)]


def test_missing_output_directory_is_a_sink_error(tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "dir" / "out.mp4"

    with pytest.raises(SinkError, match=r"out\.mp4'.*does not exist") as caught:
        asyncio.run(FileSink(out).open(_info(96, 64)))

    assert isinstance(caught.value, OSError)
    assert not out.parent.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to a read-only directory")
def test_read_only_output_directory_is_a_sink_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)

    with pytest.raises(SinkError, match="not writable"):
        asyncio.run(FileSink(locked / "out.mp4").open(_info(96, 64)))


def test_output_under_a_file_is_a_sink_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("not a directory")

    with pytest.raises(SinkError, match="is a file, not a directory"):
        asyncio.run(FileSink(tmp_path / "taken" / "out.mp4").open(_info(96, 64)))


@pytest.mark.parametrize(
    ("name", "codec", "options", "reason"),
    [
        ("out.notacontainer", "libx264", None, "use a suffix FFmpeg knows"),
        ("out.mp4", "no-such-codec", None, "no encoder 'no-such-codec'"),
        ("out.mp4", "aac", None, "'aac' encodes audio, not video"),
        ("out.mp4", "libx264", {"preset": "bogus"}, "check the codec name and its options"),
    ],
)
def test_unusable_container_or_encoder_is_a_sink_error(
    tmp_path: Path, name: str, codec: str, options: dict[str, str] | None, reason: str
) -> None:
    sink = FileSink(tmp_path / name, codec=codec, options=options)

    with pytest.raises(SinkError, match=reason) as caught:
        asyncio.run(sink.open(_info(96, 64)))

    assert name in str(caught.value)


def test_null_sink_counts_frames() -> None:
    async def scenario() -> tuple[int, int]:
        source, sink = SyntheticSource(width=32, height=32, frames=7), NullSink()
        await sink.open(await source.open())
        sent = 0
        async for frame in source:
            await sink.send(frame)
            sent += 1
        await source.aclose()
        await sink.aclose()
        return sent, sink.frames_written

    assert asyncio.run(scenario()) == (7, 7)


# --- SyntheticSource -----------------------------------------------------------------------------------


def test_synthetic_gives_exactly_n_frames_then_end_of_stream() -> None:
    async def scenario() -> tuple[StreamInfo, list[Frame]]:
        source = SyntheticSource(width=320, height=180, fps=24, frames=5)
        info = await source.open()
        frames = [await source.recv() for _ in range(5)]
        with pytest.raises(EndOfStream):
            await source.recv()
        await source.aclose()
        return info, frames

    info, frames = asyncio.run(scenario())

    assert info == StreamInfo(
        width=320, height=180, fps=Fraction(24), time_base=Fraction(1, 24), frame_count=5, live=False
    )
    assert [(f.index, f.pts, f.time_base) for f in frames] == [(i, i, Fraction(1, 24)) for i in range(5)]
    assert frames[0].pixels.shape == (180, 320, 3)
    assert not np.array_equal(frames[0].pixels, frames[1].pixels), "testsrc2 moves between frames"


def test_synthetic_zero_frames_ends_at_once() -> None:
    assert drain(SyntheticSource(width=32, height=32, frames=0)).frames == []


def test_synthetic_is_deterministic_for_a_seed() -> None:
    def pixels(seed: int) -> list[np.ndarray]:
        got = drain(SyntheticSource(width=64, height=48, frames=4, noise_sigma=10, seed=seed))
        return [f.pixels for f in got.frames]

    first, again, other = pixels(3), pixels(3), pixels(4)

    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not any(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_synthetic_noise_has_the_requested_sigma() -> None:
    sigma = 12.0
    clean = drain(SyntheticSource(width=320, height=180, frames=3)).frames
    noisy = drain(SyntheticSource(width=320, height=180, frames=3, noise_sigma=sigma, seed=1)).frames

    for c, n in zip(clean, noisy, strict=True):
        base = c.pixels.astype(np.float64)
        diff = n.pixels.astype(np.float64) - base
        # Clipping at 0 and 255 shrinks the noise, so measure where it cannot clip.
        unclipped = (base > 4 * sigma) & (base < 255 - 4 * sigma)
        assert unclipped.sum() > 5_000
        assert diff[unclipped].std() == pytest.approx(sigma, rel=0.05)
        assert abs(diff[unclipped].mean()) < 0.5


def test_realtime_synthetic_is_live_and_keeps_the_newest_frame() -> None:
    got = drain(SyntheticSource(width=32, height=32, fps=100, frames=6, realtime=True, capacity=2))

    assert got.info.live is True
    assert got.info.frame_count == 6
    indices = [f.index for f in got.frames]
    # DROP_OLDEST may drop under load, but never the newest frame and never out of order.
    assert indices == sorted(indices)
    assert indices[-1] == 5


@pytest.mark.timeout(20)
def test_endless_synthetic_stops_on_aclose() -> None:
    async def scenario() -> list[int]:
        source = SyntheticSource(width=32, height=32, frames=None)
        info = await source.open()
        assert info.frame_count is None
        indices = [(await source.recv()).index for _ in range(50)]
        await source.aclose()
        return indices

    assert asyncio.run(scenario()) == list(range(50))


def test_unknown_pattern_names_it_and_suggests_real_ones() -> None:
    with pytest.raises(SourceError, match=r"'plaid'.*testsrc2, smptebars, mandelbrot"):
        drain(SyntheticSource(pattern="plaid"))


@pytest.mark.parametrize("pattern", ["smptebars", "mandelbrot"])
def test_suggested_patterns_decode(pattern: str) -> None:
    got = drain(SyntheticSource(width=64, height=48, frames=2, pattern=pattern))

    assert [f.pixels.shape for f in got.frames] == [(48, 64, 3)] * 2


@pytest.mark.parametrize(
    "kwargs",
    [{"noise_sigma": 300.0}, {"width": 0}, {"fps": 0}, {"frames": -1}],
)
def test_synthetic_rejects_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        SyntheticSource(**kwargs)  # type: ignore[arg-type]
