"""Do no harm: how much of a model's change a stream is given, by how damaged the stream is.

A model trained to remove noise and compression damage also changes a picture that has little of
either, and there every change is a loss: through the pipeline, the shipped models take from a camera's
stream at moderate compression and from a clean one, while they gain on heavier compression and on
noisy feeds (``streamer bench quality --track camera``, delivered). A stream says how damaged it is in
two ways the runtime measures: its decoder's quantizer (:class:`QuantizerEstimate`, fed
``Frame.quantizer``) and its noise (``streamer.core.noise``). :class:`Blend` turns the two into a weight
in 0..1 for the model's change, each through a ramp: none of the change at or below where the model was
measured to harm, all of it from where it was measured to gain, and the larger of the two weights,
since either damage alone is worth repairing. A stream whose decoder states no quantizer gets the whole
change, as a model's own default.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from streamer.errors import ConfigError

__all__ = ["FULL", "Blend", "QuantizerEstimate"]


def _ramp(value: float, none: float, full: float) -> float:
    """0 at or below ``none``, 1 at or above ``full``, linear between."""
    if value >= full:
        return 1.0
    if value <= none:
        return 0.0
    return (value - none) / (full - none)


@dataclass(frozen=True, slots=True)
class Blend:
    """The weight of a model's change for a stream's quantizer and noise estimate."""

    quantizer: tuple[float, float]
    """(none at or below, all from) on the stream's mean H.264 QP."""
    noise: tuple[float, float]
    """(none at or below, all from) on the stream's noise sigma estimate, 0..255 levels."""

    def __post_init__(self) -> None:
        for name, (none, full) in (("quantizer", self.quantizer), ("noise", self.noise)):
            if not none <= full:
                raise ConfigError(
                    f"a blend's {name} ramp ({none:g}, {full:g}) falls; give (none at or below, all from) "
                    "with the first no larger than the second"
                )

    def weight(self, quantizer: float | None, sigma: float | None) -> float:
        """The share of the model's change the stream gets: 1 where no quantizer is known."""
        if quantizer is None:
            return 1.0
        by_noise = 0.0 if sigma is None else _ramp(sigma, *self.noise)
        return max(_ramp(quantizer, *self.quantizer), by_noise)

    @classmethod
    def parse(cls, text: str, where: str) -> Blend:
        """``QP_NONE:QP_FULL,SIGMA_NONE:SIGMA_FULL`` (``streamer.blend``, ``model.blend``)."""
        try:
            quantizer, noise = (tuple(float(v) for v in part.split(":")) for part in text.split(","))
            if len(quantizer) != 2 or len(noise) != 2:
                raise ValueError(text)
            return cls((quantizer[0], quantizer[1]), (noise[0], noise[1]))
        except ValueError:
            raise ConfigError(
                f"{where}: blend {text!r} is not QP_NONE:QP_FULL,SIGMA_NONE:SIGMA_FULL; "
                "write e.g. 28:33,0.5:1"
            ) from None

    def describe(self) -> str:
        return f"{self.quantizer[0]:g}:{self.quantizer[1]:g},{self.noise[0]:g}:{self.noise[1]:g}"


FULL = Blend((0.0, 0.0), (0.0, 0.0))
"""Every stream gets the whole change: a model without a measured blend, or the blend switched off."""


class QuantizerEstimate:
    """A stream's quantizer: the median of the last ``window`` frames' that state one, so one keyframe
    or one busy frame does not swing it; None before the first."""

    def __init__(self, window: int = 60) -> None:
        if window < 1:
            raise ConfigError(f"a quantizer estimate needs a window of at least one frame, got {window}")
        self._recent: deque[float] = deque(maxlen=window)

    def observe(self, quantizer: float | None) -> None:
        if quantizer is not None:
            self._recent.append(quantizer)

    @property
    def quantizer(self) -> float | None:
        return statistics.median(self._recent) if self._recent else None
