"""Values that travel between stages: frames, hyperframes and what a stream is."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from streamer.errors import FrameError

__all__ = ["Colour", "Frame", "Hyperframe", "Pixels", "StreamInfo"]

Pixels = npt.NDArray[np.uint8]
"""An RGB image, shape (H, W, 3), dtype uint8, read-only once inside a :class:`Frame`."""


@dataclass(frozen=True, slots=True)
class Colour:
    """How a stream's YUV samples map to colour, as the source stated it, in FFmpeg's own codes.

    Kept so a sink encodes with the matrix and range the source was decoded with and tags its output
    the same way: without it, an identity model would shift every colour of a BT.709 or full-range
    input. The defaults mean "unspecified"; :func:`streamer.colour.resolve` says what is assumed then.
    """

    matrix: int = 2
    """AVColorSpace: 1 BT.709, 5 BT.470BG and 6 SMPTE 170M (both BT.601), 9 BT.2020; 2 unspecified."""
    range: int = 0
    """AVColorRange: 1 tv (limited, Y 16-235), 2 pc (full, 0-255); 0 unspecified."""
    primaries: int = 2
    """AVColorPrimaries, carried to the output's tags only (pixels are not converted); 2 unspecified."""
    transfer: int = 2
    """AVColorTransferCharacteristic, carried to the output's tags only; 2 unspecified."""


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What a source knows about its stream once opened; sinks size their encoder from it."""

    width: int
    height: int
    fps: Fraction
    time_base: Fraction
    frame_count: int | None = None
    """Frames the source expects to deliver, when it knows (files); None for live streams."""
    live: bool = False
    """True when frames arrive at the source's pace (cameras, paced synthetic), not on demand."""
    colour: Colour = Colour()
    """The source's colour description; unspecified for sources that make RGB themselves."""
    rotation: int = 0
    """Degrees counterclockwise a player turns the frames by (a file's display matrix); frames travel
    as coded, and a file sink writes the same rotation."""
    tags: tuple[tuple[str, str], ...] = ()
    """A file's container metadata to carry over (``streamer.metadata.kept_tags``)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded picture of one stream, immutable so stages can share it without copying."""

    pixels: Pixels
    index: int
    """Position in the stream, counted by the source from 0, with no gaps."""
    pts: int | None
    time_base: Fraction
    arrival: float
    """Monotonic seconds when the frame entered streamer; end-to-end latency is measured from here."""
    stream_id: str = "0"
    discontinuity: bool = False
    """True on the first frame after a reconnect or timestamp jump: no window may span it."""

    def __post_init__(self) -> None:
        px = self.pixels
        if px.dtype != np.uint8 or px.ndim != 3 or px.shape[2] != 3:
            raise FrameError(
                f"frame {self.index} of stream {self.stream_id!r} has pixels of shape {px.shape} and "
                f"dtype {px.dtype}; expected (H, W, 3) uint8 RGB"
            )
        if px.flags.writeable:
            px.flags.writeable = False

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def time(self) -> float | None:
        """Presentation time in seconds, or None when the source gave no PTS."""
        return None if self.pts is None else float(self.pts * self.time_base)

    def with_pixels(self, pixels: Pixels) -> Frame:
        """The same frame (index, timestamps, arrival) carrying other pixels, e.g. the enhanced ones."""
        return dataclasses.replace(self, pixels=pixels)


@dataclass(frozen=True, slots=True)
class Hyperframe:
    """T consecutive frames of one stream and the position of the frame the model enhances.

    At a run's edges the same frame may stand in several slots (replicate or mirror padding), so
    ``indices`` can repeat; it never mixes streams or spans a discontinuity.
    """

    frames: tuple[Frame, ...]
    target: int
    """Slot in ``frames`` whose enhanced version the model outputs (T//2 for center, T-1 for last)."""
    fps: Fraction | None = None
    """The source's frame rate, for models or policies that care about time between slots."""
    strength: float | None = None
    """The noise sigma (0..255 levels) a model that takes a strength gets for this window; None: its
    default."""

    def __post_init__(self) -> None:
        if not self.frames:
            raise FrameError("a hyperframe needs at least one frame")
        if not 0 <= self.target < len(self.frames):
            raise FrameError(f"target slot {self.target} is outside a hyperframe of {len(self.frames)}")
        first = self.frames[0]
        for f in self.frames[1:]:
            if f.stream_id != first.stream_id:
                raise FrameError(
                    f"hyperframe mixes streams {first.stream_id!r} and {f.stream_id!r}; "
                    "windows are per stream"
                )
            if f.pixels.shape != first.pixels.shape:
                raise FrameError(
                    f"hyperframe of stream {first.stream_id!r} mixes frame sizes {first.pixels.shape} "
                    f"and {f.pixels.shape}; a resolution change must end the window run"
                )

    @property
    def t(self) -> int:
        return len(self.frames)

    @property
    def stream_id(self) -> str:
        return self.frames[0].stream_id

    @property
    def target_frame(self) -> Frame:
        return self.frames[self.target]

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(f.index for f in self.frames)

    @property
    def pts(self) -> tuple[int | None, ...]:
        return tuple(f.pts for f in self.frames)

    def pixels(self) -> Pixels:
        """The frames stacked as (T, C, H, W) uint8, the hyperframe layout the backend takes."""
        return np.stack([f.pixels for f in self.frames]).transpose(0, 3, 1, 2)
