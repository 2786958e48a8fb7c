"""A file's audio through a file-to-file run: real files made with PyAV, the real pipeline and encoders.

Each clip has a white flash frame and a 1 kHz beep starting at the same instants, near its start and
near its end, on a dark, silent background: the output's A/V offset is the beep's onset minus the
flash frame's time, read back by an independent PyAV decoder.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.app import build_pipeline
from streamer.assets import TEMPORAL_FILTER
from streamer.config import load_config
from streamer.engine.pipeline import Pipeline, PipelineReport
from streamer.media.audio import AUDIO_QUEUE_PACKETS

FPS = 30
SIZE = (64, 48)
BEEP_S = 0.1


@dataclass(frozen=True)
class Clip:
    path: Path
    flashes: tuple[float, ...]
    """When the flash frames and the beeps start, in seconds."""


def make_clip(
    path: Path, codec: str = "aac", rate: int = 48000, seconds: float = 4.0, audio: bool = True
) -> Clip:
    """H.264 at 30 fps (the container from the suffix), mono audio in ``codec``; flashes and beeps at
    0.5 s and at the frame about 0.5 s before the end."""
    flashes = (0.5, round((seconds - 0.5) * FPS) / FPS)
    flash_frames = {round(t * FPS) for t in flashes}
    samples = int(seconds * rate)
    t = np.arange(samples) / rate
    wave = np.zeros(samples)
    for start in flashes:
        on = (t >= start) & (t < start + BEEP_S)
        wave[on] = 0.5 * np.sin(2 * np.pi * 1000 * (t[on] - start))
    pcm = (wave * 32767).astype(np.int16)
    width, height = SIZE
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=FPS, options={"preset": "ultrafast", "crf": "18"})
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        sound = container.add_stream(codec, rate=rate, layout="mono") if audio else None
        assert sound is None or isinstance(sound, av.AudioStream)
        written = 0
        for start in range(0, samples, 1024):
            if sound is not None:
                frame = av.AudioFrame.from_ndarray(
                    pcm[None, start : start + 1024], format="s16", layout="mono"
                )
                frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
                container.mux(sound.encode(frame))
            while written < seconds * FPS and written / FPS <= (start + 1024) / rate:
                level = 255 if written in flash_frames else 20
                picture = av.VideoFrame.from_ndarray(
                    np.full((height, width, 3), level, np.uint8), format="rgb24"
                )
                picture.pts, picture.time_base = written, Fraction(1, FPS)
                container.mux(video.encode(picture))
                written += 1
        if sound is not None:
            container.mux(sound.encode(None))
        container.mux(video.encode(None))
    return Clip(path, flashes)


def run(clip: Clip, out: Path, **overrides: object) -> tuple[PipelineReport, Pipeline]:
    config = load_config(
        None,
        {
            "source": {"kind": "file", "path": str(clip.path)},
            "sink.kind": "file",
            "sink.path": str(out),
            "model.path": str(TEMPORAL_FILTER),
            **overrides,
        },
    )
    pipeline = build_pipeline(config)
    return asyncio.run(pipeline.run()), pipeline


@dataclass(frozen=True)
class AudioInfo:
    codec: str
    rate: int
    channels: int
    packets: list[tuple[int | None, bytes]]
    """Each packet's PTS and bytes, in file order."""
    time_base: Fraction

    @property
    def times(self) -> list[Fraction]:
        return [pts * self.time_base for pts, _ in self.packets if pts is not None]


def has_audio(path: Path) -> bool:
    with av.open(str(path)) as container:
        return bool(container.streams.audio)


def audio_of(path: Path) -> AudioInfo:
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        packets = [(p.pts, bytes(p)) for p in container.demux(stream) if p.size]
        assert stream.time_base is not None
        return AudioInfo(
            stream.codec_context.name, stream.sample_rate, stream.channels, packets, stream.time_base
        )


def copied(written: list[tuple[int | None, bytes]], source: list[tuple[int | None, bytes]]) -> bool:
    """The same packets, each moved by one amount at most: a fragmented mp4 starts each track at 0, so
    an AAC encoder's priming (its first 1024 samples, at a negative time in the source) moves every
    packet alike, and the sync the tests measure holds."""
    shifts = {(w or 0) - (s or 0) for (w, _), (s, _) in zip(written, source, strict=True)}
    return (
        [b for _, b in written] == [b for _, b in source]
        and len(shifts) <= 1
        and max(shifts, default=0) <= 1024
    )


def seconds(frame: av.VideoFrame | av.AudioFrame) -> float:
    assert frame.time is not None
    return frame.time


def pictures_and_sound(path: Path) -> tuple[list[tuple[float, float]], np.ndarray, np.ndarray]:
    """Each frame's (time, mean luma), and each audio sample's time and peak level (0..1) of a file."""
    with av.open(str(path)) as container:
        frames = [
            (seconds(f), float(f.to_ndarray(format="gray").mean()))
            for f in container.decode(container.streams.video[0])
        ]
    with av.open(str(path)) as container:
        times, levels = [], []
        for f in container.decode(container.streams.audio[0]):
            samples = np.abs(f.to_ndarray().astype(np.float64)).max(axis=0)
            if f.format.name.startswith("s16"):
                samples /= 32768
            times.append(seconds(f) + np.arange(samples.size) / f.sample_rate)
            levels.append(samples)
    return frames, np.concatenate(times), np.concatenate(levels)


def offsets(path: Path, flashes: tuple[float, ...]) -> list[float]:
    """Beep onset minus flash frame time, in seconds, at each flash: the brightest frame within 0.3 s,
    the first sample at half the beep's amplitude within 0.3 s."""
    frames, at, level = pictures_and_sound(path)
    measured = []
    for start in flashes:
        flash = max((f for f in frames if abs(f[0] - start) < 0.3), key=lambda f: f[1])[0]
        onset = float(at[(np.abs(at - start) < 0.3) & (level > 0.25)][0])
        measured.append(onset - flash)
    return measured


def video_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(container.streams.video[0]))


def test_aac_is_copied_packet_for_packet_and_stays_in_sync(tmp_path: Path) -> None:
    """The issue's target: a minute of H.264 + AAC, flashes and beeps 0.5 s from each end."""
    clip = make_clip(tmp_path / "camera.mp4", seconds=60.0)
    out = tmp_path / "out.mp4"
    report, pipeline = run(clip, out)
    source, written = audio_of(clip.path), audio_of(out)
    assert (written.codec, written.rate, written.channels) == (source.codec, source.rate, source.channels)
    assert copied(written.packets, source.packets)
    assert report.frames_out == video_frames(out) == 60 * FPS
    measured = offsets(out, clip.flashes)
    assert all(abs(offset) < 1 / FPS for offset in measured), measured
    queue = pipeline.queue_stats()[-1]
    assert queue.name == "audio:0"
    assert queue.put == queue.got == len(source.packets)
    assert queue.max_depth <= queue.capacity == AUDIO_QUEUE_PACKETS


def test_audio_drop_writes_video_only(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "camera.mp4")
    out = tmp_path / "out.mp4"
    report, pipeline = run(clip, out, **{"sink.audio": "drop"})
    assert not has_audio(out)
    assert report.frames_out == video_frames(out) == 4 * FPS
    assert not any(q.name.startswith("audio") for q in pipeline.queue_stats())


def test_a_file_without_audio_gives_a_file_without_audio(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "silent.mp4", audio=False)
    out = tmp_path / "out.mp4"
    report, _ = run(clip, out)
    assert not has_audio(out)
    assert report.frames_out == video_frames(out) == 4 * FPS


def test_g711_that_mp4_cannot_hold_is_transcoded_to_aac_in_sync(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clip = make_clip(tmp_path / "camera.mov", codec="pcm_mulaw", rate=8000)
    out = tmp_path / "out.mp4"
    with caplog.at_level(logging.INFO, logger="streamer.sinks.audio"):
        run(clip, out)
    written = audio_of(out)
    assert (written.codec, written.rate, written.channels) == ("aac", 8000, 1)
    assert any(
        r.levelno == logging.WARNING
        and "mp4 cannot hold the source's pcm_mulaw audio; transcoding it to aac" in r.message
        for r in caplog.records
    )
    measured = offsets(out, clip.flashes)
    assert all(abs(offset) < 1 / FPS for offset in measured), measured


@pytest.mark.parametrize("on_miss", ["passthrough", "drop"])
def test_frames_the_budget_passes_through_or_drops_leave_every_audio_packet(
    tmp_path: Path, on_miss: str
) -> None:
    # Longer than the audio queue holds: with every frame dropped the sink writes no video at all, so
    # the queue spills past its bound instead of stalling the demuxer.
    seconds = 1.5 * AUDIO_QUEUE_PACKETS * 1024 / 48000
    clip = make_clip(tmp_path / "camera.mp4", seconds=seconds)
    out = tmp_path / "out.mp4"
    overrides = {"latency.budget_ms": 1.0, "latency.on_miss": on_miss, "gate.enabled": False}
    report, pipeline = run(clip, out, **overrides)
    missed = report.outcomes["budget_drop" if on_miss == "drop" else "budget_passthrough"]
    assert missed > 0
    source, written = audio_of(clip.path), audio_of(out)
    assert copied(written.packets, source.packets)
    assert pipeline.queue_stats()[-1].max_depth <= AUDIO_QUEUE_PACKETS + 1
    if on_miss == "passthrough":
        measured = offsets(out, clip.flashes)
        assert all(abs(offset) < 1 / FPS for offset in measured), measured


def test_a_run_cut_at_max_frames_keeps_the_audio_up_to_the_last_frame(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "camera.mp4")
    out = tmp_path / "out.mp4"
    run(clip, out, **{"source.max_frames": 2 * FPS})
    source, written = audio_of(clip.path), audio_of(out)
    assert copied(written.packets, source.packets[: len(written.packets)])
    last, first, source_first = written.packets[-1][0], written.packets[0][0], source.packets[0][0]
    assert last is not None
    assert first is not None
    assert source_first is not None
    assert Fraction(last - (first - source_first), 48000) < 2  # in the source's time
    assert abs(offsets(out, clip.flashes[:1])[0]) < 1 / FPS


def test_spliced_recordings_whose_audio_goes_back_keep_the_first_part_and_the_file_plays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = make_clip(tmp_path / "first.ts", seconds=2.0)
    second = make_clip(tmp_path / "second.ts", seconds=2.0)
    spliced = tmp_path / "spliced.ts"
    spliced.write_bytes(first.path.read_bytes() + second.path.read_bytes())
    out = tmp_path / "out.mp4"
    with caplog.at_level(logging.WARNING, logger="streamer.sinks.audio"):
        report, _ = run(Clip(spliced, first.flashes), out)
    assert report.frames_out == video_frames(out) == 4 * FPS  # the video shifts to follow on
    # ADTS in the transport stream, raw AAC in mp4: the same packets, headers aside.
    assert audio_of(out).times == audio_of(first.path).times
    assert [r.message for r in caplog.records if "goes back in time" in r.message] != []
    assert len(caplog.records) == 1
    measured = offsets(out, first.flashes)
    assert all(abs(offset) < 1 / FPS for offset in measured), measured


def test_a_looped_file_drops_its_audio_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clip = make_clip(tmp_path / "camera.mp4", seconds=1.0)
    out = tmp_path / "out.mp4"
    with caplog.at_level(logging.WARNING):
        overrides = {"source.loop": True, "source.max_frames": 3 * FPS, "window.scene_cut": None}
        report, pipeline = run(clip, out, **overrides)
    assert not has_audio(out)
    assert report.frames_out == video_frames(out) == 3 * FPS
    assert report.discontinuities == 2  # a new run at each seam
    assert not any(q.name.startswith("audio") for q in pipeline.queue_stats())
    warnings = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "is looped (source.loop), so its audio is dropped" in warnings[0]


def test_a_realtime_file_keeps_every_audio_packet(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "camera.mp4", seconds=1.0)
    out = tmp_path / "out.mp4"
    report, pipeline = run(clip, out, **{"source.realtime": True})
    assert pipeline.source.info.live
    assert copied(audio_of(out).packets, audio_of(clip.path).packets)
    # A live source drops its oldest frames rather than wait, counted; the audio never moves.
    assert report.frames_in + report.source_dropped == FPS
    assert report.frames_out == video_frames(out) == report.frames_in
