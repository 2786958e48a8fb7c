"""A source of generated test pictures (FFmpeg's lavfi sources), optionally noisy and paced.

It gives demos and tests a stream without a file or camera: seeded Gaussian noise makes something to
denoise, and ``realtime=True`` makes it behave like a live feed (wall-clock pacing, DROP_OLDEST).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from fractions import Fraction

import av
import av.error
import numpy as np
from av.container import InputContainer
from av.video.stream import VideoStream

from streamer.channel import DropPolicy
from streamer.errors import ConfigError, SourceError
from streamer.frame import Frame, Pixels, StreamInfo
from streamer.media.planes import convert
from streamer.sources.base import ThreadedSource
from streamer.sources.noise import GaussianNoise

__all__ = ["SyntheticSource"]

SUGGESTED_PATTERNS = ("testsrc2", "smptebars", "mandelbrot")


class SyntheticSource(ThreadedSource):
    """Frames of a lavfi pattern as rgb24, with PTS = index in a time base of 1/fps."""

    def __init__(
        self,
        width: int = 640,
        height: int = 360,
        fps: int | Fraction = 30,
        frames: int | None = 300,
        pattern: str = "testsrc2",
        noise_sigma: float = 0.0,
        seed: int = 0,
        realtime: bool = False,
        stream_id: str = "0",
        capacity: int = 8,
    ) -> None:
        if width < 1 or height < 1:
            raise ConfigError(f"synthetic source size {width}x{height} is empty; use at least 1x1")
        if fps <= 0:
            raise ConfigError(f"synthetic source fps must be positive, got {fps}")
        if frames is not None and frames < 0:
            raise ConfigError(f"synthetic source frames must be >= 0 or None (endless), got {frames}")
        self._noise = GaussianNoise(noise_sigma, seed)
        super().__init__(stream_id, capacity, DropPolicy.DROP_OLDEST if realtime else DropPolicy.BLOCK)
        self.width = width
        self.height = height
        self.fps = Fraction(fps)
        self.frames = frames
        self.pattern = pattern
        self.noise_sigma = noise_sigma
        self.seed = seed
        self.realtime = realtime
        self._container: InputContainer | None = None
        self._stream: VideoStream | None = None

    def _open(self) -> StreamInfo:
        rate = f"{self.fps.numerator}/{self.fps.denominator}"
        spec = f"{self.pattern}=size={self.width}x{self.height}:rate={rate}"
        try:
            container = av.open(spec, format="lavfi")
        except av.error.FFmpegError as exc:
            raise SourceError(
                f"lavfi cannot make pattern {self.pattern!r} ({exc.strerror or exc}); "
                f"use one of {', '.join(SUGGESTED_PATTERNS)}"
            ) from exc
        self._container = container
        if not container.streams.video:
            raise SourceError(
                f"lavfi pattern {self.pattern!r} gives no video; use one of {', '.join(SUGGESTED_PATTERNS)}"
            )
        self._stream = container.streams.video[0]
        return StreamInfo(
            width=self.width,
            height=self.height,
            fps=self.fps,
            time_base=1 / self.fps,
            frame_count=self.frames,
            live=self.realtime,
        )

    def _frames(self) -> Iterator[Frame]:
        container, stream = self._container, self._stream
        assert container is not None
        assert stream is not None
        time_base = 1 / self.fps
        period = float(time_base)
        if self.frames == 0:
            return
        start = time.monotonic()
        decoded = container.decode(stream)
        for index in itertools.count():
            started = time.perf_counter()
            av_frame = next(decoded, None)
            if av_frame is None:
                return
            rgb = convert(av_frame, format="rgb24").to_ndarray()
            pixels: Pixels = np.ascontiguousarray(rgb, dtype=np.uint8)
            self._decoded(time.perf_counter() - started)
            pixels = self._noise(pixels)
            if self.realtime:
                delay = start + index * period - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
            yield Frame(pixels, index, index, time_base, time.monotonic(), self.stream_id)
            if self.frames is not None and index + 1 >= self.frames:
                return

    def _close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None
            self._stream = None
