"""Values that travel between stages: frames, hyperframes and what a stream is."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from streamer.errors import FrameError

__all__ = ["Colour", "Frame", "Hyperframe", "Picture", "Pixels", "StreamInfo", "Yuv420"]

Pixels = npt.NDArray[np.uint8]
"""An RGB image, shape (H, W, 3), dtype uint8, read-only once inside a :class:`Frame`."""


@dataclass(frozen=True, slots=True)
class Colour:
    """How a stream's YUV samples map to colour, as the source stated it, in FFmpeg's own codes.

    Kept so a sink encodes with the matrix and range the source was decoded with and tags its output
    the same way: without it, an identity model would shift every colour of a BT.709 or full-range
    input. The defaults mean "unspecified"; :func:`streamer.media.colour.resolve` says what is assumed then.
    """

    matrix: int = 2
    """AVColorSpace: 1 BT.709, 5 BT.470BG and 6 SMPTE 170M (both BT.601), 9 BT.2020; 2 unspecified."""
    range: int = 0
    """AVColorRange: 1 tv (limited, Y 16-235), 2 pc (full, 0-255); 0 unspecified."""
    primaries: int = 2
    """AVColorPrimaries, carried to the output's tags only (pixels are not converted); 2 unspecified."""
    transfer: int = 2
    """AVColorTransferCharacteristic, carried to the output's tags only; 2 unspecified."""

    @property
    def limited(self) -> bool:
        """Whether the samples are tv range (Y 16-235, UV 16-240) as the source stated: the one test of it."""
        return self.range == 1


@dataclass(frozen=True, slots=True)
class Yuv420:
    """A picture as 4:2:0 planes (an H.264 decoder's and encoder's own format), in ``colour``'s matrix and
    range: what a decoder hands a model on the device and the model hands an encoder (``model.yuv420``), so
    the host converts nothing between RGB and YUV (a conversion that costs the host a large share of what
    libx264's encode does). The planes may be views of larger buffers (a decoder's frame, padding)."""

    y: npt.NDArray[np.uint8]
    """(H, W), H and W even."""
    u: npt.NDArray[np.uint8]
    """(H/2, W/2)."""
    v: npt.NDArray[np.uint8]
    """(H/2, W/2)."""
    colour: Colour
    """The matrix and range the planes are in, resolved (``streamer.media.colour.resolve``)."""

    def __post_init__(self) -> None:
        h, w = self.y.shape if self.y.ndim == 2 else (0, 0)
        planes = (self.y, self.u, self.v)
        if (
            any(p.dtype != np.uint8 for p in planes)
            or h % 2
            or w % 2
            or not h
            or self.u.shape != (h // 2, w // 2)
            or self.v.shape != (h // 2, w // 2)
        ):
            raise FrameError(
                f"4:2:0 planes of shapes {self.y.shape}, {self.u.shape}, {self.v.shape} "
                f"({self.y.dtype}); expected uint8 (H, W), (H/2, W/2), (H/2, W/2) with H and W even"
            )
        for plane in planes:
            if plane.flags.writeable:
                plane.flags.writeable = False

    @property
    def height(self) -> int:
        return int(self.y.shape[0])

    @property
    def width(self) -> int:
        return int(self.y.shape[1])


Picture = Pixels | Yuv420
"""A frame's picture: RGB, or 4:2:0 planes (a decoder's, or those a model on the device made)."""


def _toward(old: Pixels, new: Pixels, weight: float) -> Pixels:
    """``old`` moved ``weight`` of the way to ``new``, rounded: a share of a model's change."""
    change = np.subtract(new, old, dtype=np.float32) * np.float32(weight)
    moved: Pixels = np.clip(np.rint(change + old), 0, 255).astype(np.uint8)
    return moved


def _part_of(made: Yuv420, source: Yuv420, weight: float) -> tuple[Pixels, Pixels, Pixels]:
    """``source``'s planes moved ``weight`` of the way to ``made``'s (both in one colour)."""
    return (
        _toward(source.y, made.y, weight),
        _toward(source.u, made.u, weight),
        _toward(source.v, made.v, weight),
    )


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
    """A file's container metadata to carry over (``streamer.media.metadata.kept_tags``)."""
    planes: bool = False
    """The source hands on its frames as 4:2:0 planes (asked for, and its decoder makes yuv420p), so
    warm-up readies the graphs that take them."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded picture of one stream, immutable so stages can share it without copying."""

    picture: Picture
    """RGB pixels, or 4:2:0 planes that :attr:`pixels` converts to RGB only where a stage asks."""
    index: int
    """Position in the stream, counted by the source from 0, with no gaps."""
    pts: int | None
    time_base: Fraction
    arrival: float
    """Monotonic seconds when the frame entered streamer; end-to-end latency is measured from here."""
    stream_id: str = "0"
    discontinuity: bool = False
    """True on the first frame after a reconnect or timestamp jump: no window may span it."""
    quantizer: float | None = None
    """How hard the camera's encoder quantized this frame: its decoder's mean H.264 QP (0..51,
    ``streamer.media.quantizer``); None where the decoder does not say, or where the picture is no longer
    what it decoded (a file source's added noise)."""
    _rgb: Pixels | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    """The RGB of a 4:2:0 picture, or of an enhanced frame given part of the change, made on first use."""
    _base: Frame | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    """The decoded frame this RGB picture is a model's change of (:meth:`enhanced`)."""
    _weight: float = dataclasses.field(default=1.0, init=False, repr=False, compare=False)
    """The share of the model's change an enhanced frame carries (:meth:`enhanced`)."""
    _planes: Yuv420 | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    """The planes of an enhanced frame, made on first use."""

    def __post_init__(self) -> None:
        px = self.picture
        if isinstance(px, Yuv420):
            return
        if px.dtype != np.uint8 or px.ndim != 3 or px.shape[2] != 3:
            raise FrameError(
                f"frame {self.index} of stream {self.stream_id!r} has pixels of shape {px.shape} and "
                f"dtype {px.dtype}; expected (H, W, 3) uint8 RGB"
            )
        if px.flags.writeable:
            px.flags.writeable = False

    @property
    def pixels(self) -> Pixels:
        """The picture as (H, W, 3) uint8 RGB; 4:2:0 planes are converted once, on first use, and an
        enhanced frame given part of the model's change is blended with its base once."""
        picture = self.picture
        base = self._base
        if not isinstance(picture, Yuv420) and (base is None or self._weight == 1.0):
            return picture
        rgb = self._rgb
        if rgb is None:
            if isinstance(picture, Yuv420):
                from streamer.media.planes import (
                    planes_rgb,  # PyAV's swscale, read at the edge of this module
                )

                shown = self.planes
                assert shown is not None
                colour = shown.colour
                rgb = planes_rgb(shown.y, shown.u, shown.v, colour.matrix, colour.range)
            else:
                assert base is not None
                rgb = _toward(base.pixels, picture, self._weight)
            rgb.flags.writeable = False
            object.__setattr__(self, "_rgb", rgb)  # a cache: two threads racing both make the same
        return rgb

    @property
    def planes(self) -> Yuv420 | None:
        """The picture as the 4:2:0 planes it leaves as, where it has them: a decoder's own, or for an
        enhanced frame (:meth:`enhanced`) its base's planes with the model's change carried onto them,
        made once, on first use. None for RGB made otherwise (a synthetic source, a card, a scaled
        frame), which an encoder converts.

        Carrying the change, not converting the model's RGB back, is what makes the path transparent:
        a model that changes nothing returns the decoder's planes exactly, where the trip through RGB
        and back resamples the chroma twice."""
        picture, made, base = self.picture, self._planes, self._base
        if made is not None or base is None or not isinstance(base.picture, Yuv420):
            return picture if isinstance(picture, Yuv420) else made
        source = base.picture
        colour = source.colour
        if isinstance(picture, Yuv420):  # planes a model made (on a device), given part of their change
            if picture.colour != colour:
                return picture
            made = Yuv420(*_part_of(picture, source, self._weight), colour)
        else:
            from streamer.media.planes import (
                changed_planes,  # PyAV's swscale, read at the edge of this module
            )

            planes = (source.y, source.u, source.v)
            y, u, v = changed_planes(planes, colour.matrix, colour.range, base.pixels, picture, self._weight)
            made = Yuv420(y, u, v, colour)
        object.__setattr__(self, "_planes", made)  # a cache, as ``_rgb``
        return made

    @property
    def planes_out(self) -> Colour | None:
        """The colour of the planes the frame leaves as (:attr:`planes`), known without making them;
        None where it leaves as RGB."""
        picture = self.picture
        if isinstance(picture, Yuv420):
            return picture.colour
        base = self._base
        return None if base is None else base.planes_colour

    @property
    def planes_colour(self) -> Colour | None:
        """The colour of a 4:2:0 picture; None for RGB. With the size, what a window run keeps: a
        window's frames are all RGB or all planes in one colour."""
        picture = self.picture
        return picture.colour if isinstance(picture, Yuv420) else None

    @property
    def height(self) -> int:
        picture = self.picture
        return picture.height if isinstance(picture, Yuv420) else int(picture.shape[0])

    @property
    def width(self) -> int:
        picture = self.picture
        return picture.width if isinstance(picture, Yuv420) else int(picture.shape[1])

    @property
    def time(self) -> float | None:
        """Presentation time in seconds, or None when the source gave no PTS."""
        return None if self.pts is None else float(self.pts * self.time_base)

    def with_pixels(self, picture: Picture) -> Frame:
        """The same frame (index, timestamps, arrival) carrying another picture made apart from this
        one's (a crop, a card, a scaled copy)."""
        return dataclasses.replace(self, picture=picture)

    def enhanced(self, picture: Picture, weight: float = 1.0) -> Frame:
        """The same frame carrying ``picture``, which a model made from this frame's: RGB of this
        frame's size from a frame that came as 4:2:0 planes leaves as those planes with the model's
        change (:attr:`planes`). With ``weight`` below 1, RGB of this frame's size carries that share
        of the change (``streamer.core.blend``), in its planes and its RGB alike, and so do 4:2:0
        planes a model made (on a device) from a frame that came as planes; at 0, the frame is this
        one."""
        planes = isinstance(picture, Yuv420)
        size = (picture.height, picture.width) if isinstance(picture, Yuv420) else picture.shape[:2]
        same_size = size == (self.height, self.width)
        if same_size and weight <= 0.0:
            return self
        out = dataclasses.replace(self, picture=picture)
        if same_size and (weight < 1.0 or not planes):
            object.__setattr__(out, "_base", self)
            object.__setattr__(out, "_weight", min(weight, 1.0))
        return out

    def showing(self, other: Frame) -> Frame:
        """The same frame (index, timestamps, arrival) carrying ``other``'s picture as ``other`` leaves
        (the last enhanced output, reused)."""
        out = dataclasses.replace(self, picture=other.picture)
        for cache in ("_rgb", "_base", "_weight", "_planes"):
            object.__setattr__(out, cache, getattr(other, cache))
        return out


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
    colour: Colour | None = None
    """The matrix and range (resolved) of the stream's encoder, for a model on the device that hands
    it 4:2:0 planes (``model.yuv420``); None: RGB."""

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
            if (f.height, f.width) != (first.height, first.width):
                raise FrameError(
                    f"hyperframe of stream {first.stream_id!r} mixes frame sizes "
                    f"{(first.height, first.width)} and {(f.height, f.width)}; a resolution change must "
                    "end the window run"
                )
            if f.planes_colour != first.planes_colour:
                raise FrameError(
                    f"hyperframe of stream {first.stream_id!r} mixes pictures {first.planes_colour} and "
                    f"{f.planes_colour} (None: RGB); a change of picture format must end the window run"
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
