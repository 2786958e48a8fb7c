"""A streaming model's two graphs called on host tensors: the encoder on frames, making the feature
maps a stream's :class:`~streamer.core.features.FeatureCache` keeps, and the fusion graph on windows of
those maps, making each window's target frame.

The graphs' inputs and outputs are the streaming contract's (``streamer.backend.onnx``); the calls
check what comes back against it, so a graph that breaks the contract fails here, by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from streamer.backend.base import FrameFeatures, ModelInfo, Strengths
from streamer.backend.tensors import check_frames, pad_frames, strength_feed
from streamer.contract import FRAME_INPUT, TARGET_INPUT, Session
from streamer.errors import BackendError, FrameError, ModelUnavailableError
from streamer.frame import Pixels

__all__ = ["encode", "fuse"]

Starved = Callable[[Exception, str], None]
"""Called with a failed call's error and what it ran on, to raise its own error where the device ran
out of memory, before the BackendError a failed call raises."""


def encode(
    encoder: Session, info: ModelInfo, frames: npt.NDArray[np.uint8], starved: Starved
) -> list[FrameFeatures]:
    """Each of ``frames``' (N, H, W, 3) uint8 RGB feature maps, as ``info.features`` lists them."""
    check_frames(frames, info.name, "encode")
    n, h, w, _ = frames.shape
    padded = pad_frames(frames, info.pad_multiple)
    hp, wp = padded.shape[1:3]
    try:
        maps = encoder.run([f.name for f in info.features], {FRAME_INPUT: padded})
    except ModelUnavailableError:  # a remote model's outage: the pipeline passes frames through
        raise
    except Exception as err:
        starved(err, f"encoding {n} frames of {w}x{h}")
        raise BackendError(
            f"onnxruntime failed encoding {n} frames of {w}x{h} with {info.name}: {err}"
        ) from err
    for spec, got in zip(info.features, maps, strict=True):
        expected = (n, spec.channels, math.ceil(hp / spec.scale), math.ceil(wp / spec.scale))
        if not isinstance(got, np.ndarray) or got.shape != expected:
            raise BackendError(
                f"encoder of {info.name} returned {getattr(got, 'shape', got)} for feature "
                f"{spec.name!r}; streamer.features promises {expected} for frames padded to {wp}x{hp}"
            )
    return [tuple(m[i] for m in maps) for i in range(n)]


def fuse(
    session: Session,
    output: str,
    info: ModelInfo,
    windows: Sequence[Sequence[FrameFeatures]],
    targets: npt.NDArray[np.uint8],
    strength: Strengths,
    starved: Starved,
) -> Pixels:
    """Each window's enhanced target frame, (N, H, W, 3) uint8 RGB, from its T frames' feature maps
    and its target frame among ``targets``, with the fusion graph ``session`` (its ``output``)."""
    check_frames(targets, info.name, "fuse")
    t = info.t
    if len(windows) != targets.shape[0] or any(len(window) != t for window in windows):
        raise FrameError(
            f"model {info.name} fuses windows of T={t} frames' features, one per target frame; "
            f"got {[len(window) for window in windows]} for {targets.shape[0]} targets"
        )
    _, h, w, _ = targets.shape
    feeds: dict[str, npt.NDArray[np.generic]] = {
        TARGET_INPUT: pad_frames(targets, info.pad_multiple),
        **strength_feed(info, len(windows), strength),
    }
    for k, spec in enumerate(info.features):
        for slot in range(t):
            maps = [window[slot][k] for window in windows]
            feeds[f"{spec.name}_{slot}"] = maps[0][None] if len(maps) == 1 else np.stack(maps)
    try:
        (out,) = session.run([output], feeds)
    except ModelUnavailableError:  # a remote model's outage: the pipeline passes frames through
        raise
    except Exception as err:
        starved(err, f"fusing {len(windows)} windows of {w}x{h}")
        raise BackendError(
            f"onnxruntime failed fusing {len(windows)} windows of {w}x{h} with {info.name}: "
            f"{err}; were the features encoded from frames of this size?"
        ) from err
    if out.shape[1:3] == (h, w):
        return cast(Pixels, out)
    return np.ascontiguousarray(out[:, :h, :w])
