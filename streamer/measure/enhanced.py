"""A clip enhanced frame by frame as the live pipeline enhances it, without the pipeline around it.

Scoring a model on RGB frames (the quality bench's per-method figures, the calibrations and checks of
``export``) needs the frames the model gives a live stream, not one call per window taken by hand: the
windower's tasks in order, recurrent state carried across windows, each frame encoded once for
streaming models and the strength ``model.strength: auto`` would give. :func:`model_frames` makes those.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

from streamer.backend.base import Backend, FrameFeatures
from streamer.core.features import FeatureCache
from streamer.core.noise import NoiseEstimator
from streamer.core.windower import EdgePolicy, Windower
from streamer.frame import Frame, Hyperframe, Pixels
from streamer.measure.metrics import Clip

__all__ = ["model_frames"]


def model_frames(
    backend: Backend, clip: Clip, fps: Fraction = Fraction(25), strength: float | None = None
) -> Iterator[Pixels]:
    """One output per frame, as the live pipeline makes it: the windower's tasks in order, replicate
    edges, state carried from window to window for recurrent models (``step`` is ``infer`` otherwise),
    each frame encoded once through a feature cache for streaming models, and a model that takes a
    strength given ``strength``, or where None what ``model.strength: auto`` gives it live for the
    clip's running noise estimate."""
    info = backend.info
    noise = NoiseEstimator() if info.strength and strength is None else None
    windower = Windower(info.t, position=info.output_position, edge=EdgePolicy.REPLICATE, max_gap=None)
    planes = clip.transpose(0, 3, 1, 2)
    state = backend.initial_state(1, clip.shape[1], clip.shape[2])
    cache: FeatureCache[FrameFeatures] = FeatureCache(info.t)
    frames: dict[int, Frame] = {}
    last = len(clip) - 1
    for index in range(len(clip)):
        # No timestamps: the clip is one run, broken by nothing but its ends.
        frames[index] = Frame(clip[index], index, None, Fraction(1), 0.0)
        if noise is not None:
            noise.observe(clip[index], index / float(fps))
            sigma = noise.sigma
            strength = None if sigma is None else info.auto_strength(sigma)
        tasks = windower.push(frames[index])
        if index == last:
            tasks += windower.flush()
        for task in tasks:
            if info.streaming:
                window = Hyperframe(tuple(frames[i] for i in task.indices), task.slot, strength=strength)
                yield backend.enhance_cached(window, task.run, cache)
                continue
            enhanced, state = backend.step(
                planes[list(task.indices)][None], state, None if strength is None else [strength]
            )
            yield enhanced[0].transpose(1, 2, 0)
