"""A stream's frames run by a model whose frames are kept on the device: the backend port's calls
(``enhance_cached``, ``step``, ``step_streams``, ``step_windows``, ``warm_up``) on
:class:`~streamer.backend.device_frames.DeviceFrames`.

This is where a :class:`~streamer.frame.Frame` meets device memory: each frame goes up once, padded to
the model's multiple, as the decoder's 4:2:0 planes where the backend takes them (``model.yuv420``) and
the size allows, else as RGB; the stream's cache keeps the device copy for the windows it belongs to.
What comes down is cut back to the frame's size, as 4:2:0 planes in the stream's colour where the
whole batch can come down as planes, else as RGB.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from streamer.backend.base import CachedWindow, FrameFeatures, ModelInfo, State, Strengths
from streamer.backend.device_frames import DeviceFrames
from streamer.backend.tensors import check_states, pad, pad_frames, state_shapes
from streamer.core.features import FeatureCache
from streamer.errors import FrameError
from streamer.frame import Colour, Frame, Hyperframe, Picture, Pixels, Yuv420

__all__ = ["DeviceWindows"]


class DeviceWindows:
    """The windows and steps of one model's streams on its :class:`DeviceFrames`; ``info`` is the
    model's, with ``device_frames`` on and ``yuv420`` where its frames cross as 4:2:0 planes."""

    def __init__(self, frames: DeviceFrames, info: ModelInfo) -> None:
        self.frames = frames
        self._info = info

    def enhance(
        self,
        window: Hyperframe,
        run: int,
        cache: FeatureCache[FrameFeatures],
        crop: tuple[int, int, int, int] | None,
        guard: contextlib.AbstractContextManager[object] | None,
    ) -> Pixels:
        """The window's enhanced frame (the part ``crop`` names), its frames uploaded into ``cache``
        where it lacks them."""
        values = self._window(window, run, cache, guard)
        return self._cropped(self.frames.run(values, window.strength), window, crop)

    def enhance_batch(self, windows: Sequence[CachedWindow]) -> list[Picture]:
        """Windows of several streams (of one size) in one call: each stream's new frames uploaded
        into its own cache, the windows made and run together, their frames back as 4:2:0 planes where
        ``model.yuv420`` is on and the windows allow."""
        values = [self._window(w.window, w.run, w.cache, w.guard) for w in windows]
        strengths = [w.window.strength for w in windows]
        colour = self._planes_colour(windows)
        if colour is not None:
            planes = self.frames.run_batch_yuv(values, strengths, colour)
            target = windows[0].window.target_frame
            return [self._yuv420(y, uv, target.height, target.width, colour) for y, uv in planes]
        out = self.frames.run_batch(values, strengths)
        return [self._cropped(pixels, w.window, w.crop) for pixels, w in zip(out, windows, strict=True)]

    def _window(
        self,
        window: Hyperframe,
        run: int,
        cache: FeatureCache[FrameFeatures],
        guard: contextlib.AbstractContextManager[object] | None,
    ) -> list[ort.OrtValue]:
        """The window's frames in device memory, uploading those its stream's cache lacks: as their
        4:2:0 planes where they come as planes and this backend takes them (``model.yuv420``), else as
        RGB; made RGB on the device either way, so one window may hold both."""
        frames = {f.index: f for f in window.frames}
        with guard if guard is not None else contextlib.nullcontext():
            for index in cache.missing(frames, run):
                # The cache is the stream's and holds what its model makes per frame: here, device frames.
                cache.put(index, run, cast(FrameFeatures, (self._upload(frames[index]),)))
            return [cast(ort.OrtValue, cache.get(i)[0]) for i in window.indices]

    def _upload(self, frame: Frame) -> ort.OrtValue:
        picture = frame.picture
        if isinstance(picture, Yuv420) and self._info.yuv420 and self.planes_fit(frame.height, frame.width):
            m = self._info.pad_multiple
            ph, pw = -frame.height % m, -frame.width % m
            y, u, v = picture.y, picture.u, picture.v  # the decoder's own, copied once on the way up
            if ph or pw:
                y = pad(y, ((0, ph), (0, pw)))
                u, v = (pad(c, ((0, ph // 2), (0, pw // 2))) for c in (u, v))
            return self.frames.upload_planes(y, u, v, picture.colour)
        return self.frames.upload(pad_frames(frame.pixels[None], self._info.pad_multiple)[0])

    def _cropped(
        self, out: npt.NDArray[np.uint8], window: Hyperframe, crop: tuple[int, int, int, int] | None
    ) -> Pixels:
        """The part of a whole (padded) frame's output that the window asked for."""
        target, s = window.target_frame, self._info.scale
        top, bottom, left, right = crop if crop is not None else (0, target.height, 0, target.width)
        return np.ascontiguousarray(out[top * s : bottom * s, left * s : right * s])

    def _planes_colour(self, windows: Sequence[CachedWindow]) -> Colour | None:
        """The colour to make 4:2:0 planes in, where this batch can come down as planes: whole frames
        of an even size, padded and not, all of one stream colour."""
        colour = windows[0].window.colour
        if not self._info.yuv420 or colour is None:
            return None
        target = windows[0].window.target_frame
        if not self.planes_fit(target.height, target.width):
            return None
        if any(w.crop is not None or w.window.colour != colour for w in windows):
            return None
        return colour

    def planes_fit(self, height: int, width: int) -> bool:
        """Whether frames of this size come out even, padded and not, as 4:2:0 planes need."""
        s, m = self._info.scale, self._info.pad_multiple
        return not any(n * s % 2 for n in (height, width, height + -height % m, width + -width % m))

    def planes_out(self, colour: Colour | None, h: int, w: int) -> Colour | None:
        """``colour`` where this backend makes 4:2:0 planes and frames ``h`` x ``w`` allow them; else
        None (RGB)."""
        return colour if self._info.yuv420 and self.planes_fit(h, w) else None

    def _yuv420(
        self, y: npt.NDArray[np.uint8], uv: npt.NDArray[np.uint8], height: int, width: int, colour: Colour
    ) -> Yuv420:
        """The planes of a (padded) whole frame's output, cut to a ``height`` x ``width`` frame's:
        views, no copy."""
        h, w = height * self._info.scale, width * self._info.scale
        return Yuv420(y[:h, :w], uv[0, : h // 2, : w // 2], uv[1, : h // 2, : w // 2], colour)

    def initial_state(self, batch: int, height: int, width: int) -> State:
        """A recurrent model's zero state in device memory: values only a step reads."""
        return self.frames.zero_state(state_shapes(self._info, batch, height, width))

    def step(
        self, batch: npt.NDArray[np.uint8], state: State, strength: Strengths
    ) -> tuple[npt.NDArray[np.uint8], State]:
        """One stream's step of a (1, T, C, H, W) batch, as the host path gives it: (1, 3, H*scale,
        W*scale) RGB and the next state, which stays on the device."""
        b = batch.shape[0]
        if b != 1:
            raise FrameError(
                f"model {self._info.name} keeps each stream's state on the device: a batch of 1, got "
                f"{b}; step several streams with step_streams, or set model.device_frames: false"
            )
        (rgb,), (next_state,) = self.steps(batch, [state], strength)
        assert isinstance(rgb, np.ndarray)  # no colour asked: RGB
        return rgb.transpose(2, 0, 1)[None], next_state

    def step_windows(
        self, windows: Sequence[Hyperframe], states: Sequence[State], colour: Colour | None
    ) -> tuple[list[Picture], list[State]]:
        """Each window's frames go up as they come: a decoder's 4:2:0 planes as they are where
        ``model.yuv420`` takes them (half the bytes of RGB, made RGB in the graph), so no step converts
        a frame on the host."""
        first = windows[0].target_frame
        h, w = first.height, first.width
        for window in windows:
            frame = window.target_frame
            if window.t != self._info.t or (frame.height, frame.width) != (h, w):
                raise FrameError(
                    f"model {self._info.name} steps windows of T={self._info.t} frames of one size "
                    f"({w}x{h} here); got T={window.t} of {frame.width}x{frame.height}"
                )
        check_states(self._info, states, f"{len(windows)} windows", len(windows), h, w)
        uploaded = [[self._upload(frame) for frame in window.frames] for window in windows]
        strengths = [window.strength for window in windows]
        planes = self.planes_out(colour, h, w)
        return self._steps(uploaded, (h, w), states, strengths, planes)

    def steps(
        self,
        batch: npt.NDArray[np.uint8],
        states: Sequence[State],
        strength: Strengths,
        colour: Colour | None = None,
    ) -> tuple[list[Picture], list[State]]:
        """Each stream's step with its state in device memory, in one call: the frames go up as RGB."""
        b, _, _, h, w = batch.shape
        if strength is not None and len(strength) != b:
            raise FrameError(f"model {self._info.name}: {len(strength)} strengths for a batch of {b}")
        windows = []
        for row in batch:
            frames = pad_frames(np.ascontiguousarray(row.transpose(0, 2, 3, 1)), self._info.pad_multiple)
            windows.append([self.frames.upload(frame) for frame in frames])
        return self._steps(windows, (h, w), states, strength, colour)

    def _steps(
        self,
        windows: Sequence[Sequence[ort.OrtValue]],
        size: tuple[int, int],
        states: Sequence[State],
        strength: Strengths,
        colour: Colour | None,
    ) -> tuple[list[Picture], list[State]]:
        """Each stream's step of its frames in device memory (frames ``size`` before padding), in one
        call: the frames come down (as 4:2:0 planes in ``colour`` where given), the next states stay (a
        host array given as a state goes up once)."""
        h, w = size
        device = self.frames
        kept = [tuple(device.to_device(v) if isinstance(v, np.ndarray) else v for v in s) for s in states]
        if colour is not None:
            planes, made = device.step_batch_yuv(windows, kept, strength, colour)
            return [self._yuv420(y, uv, h, w, colour) for y, uv in planes], list(made)
        outs, made = device.step_batch(windows, kept, strength)
        s = self._info.scale
        return [out[: h * s, : w * s] for out in outs], list(made)

    def warm_up(
        self, width: int, height: int, batch: int, colour: Colour | None, planes_in: Colour | None
    ) -> None:
        """Each graph a call of up to ``batch`` windows of frames ``width`` x ``height`` runs, run once
        (making 4:2:0 planes in ``colour`` where this backend does), and the upload graphs of RGB frames
        and of planes in ``planes_in``."""
        device = self.frames
        m = self._info.pad_multiple
        hp, wp = height + -height % m, width + -width % m
        fit = self._info.yuv420 and self.planes_fit(height, width)
        frame = device.upload(np.zeros((hp, wp, 3), np.uint8))
        if fit and planes_in is not None:  # the upload graph of its planes; windows take either alike
            half = np.zeros((hp // 2, wp // 2), np.uint8)
            device.upload_planes(np.zeros((hp, wp), np.uint8), half, half, planes_in)
        state = state_shapes(self._info, 1, height, width)
        device.warm(frame, batch, device.zero_state(state) if state else None, colour if fit else None)
