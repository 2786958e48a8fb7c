"""The inference port: ``infer(batch)``, synchronous, run by the pipeline in a worker thread."""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamer.core.windower import OutputPosition

__all__ = ["Backend", "Layout", "ModelInfo", "State", "StateSpec"]

State = tuple[npt.NDArray[np.float32], ...]
"""A recurrent model's hidden tensors, in the order of ``ModelInfo.state``; () for stateless models."""


class Layout(enum.Enum):
    """How the model wants a batch of hyperframes laid out."""

    NTCHW = "NTCHW"
    """(B, T, C, H, W): the hyperframe layout itself."""
    NCTHW = "NCTHW"
    """(B, C, T, H, W): what Conv3d takes."""


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One hidden tensor a recurrent model reads and writes back, carried from window to window.

    Its shape is (B, channels, ceil(H / scale), ceil(W / scale)) for frames padded to H x W; zeros
    start a stream and every new run after a discontinuity.
    """

    input: str
    output: str
    channels: int
    scale: int


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the runtime read from the model file; the config must agree with it."""

    name: str
    t: int
    layout: Layout
    output_position: OutputPosition
    channels: int = 3
    value_range: tuple[float, float] = (0.0, 1.0)
    """The float range 0..255 pixel values are mapped to on input and from on output."""
    pad_multiple: int = 1
    """H and W are padded up to a multiple of this before inference and cropped back after."""
    provider: str = "CPUExecutionProvider"
    state: tuple[StateSpec, ...] = ()
    """Empty for stateless models; a recurrent model's windows of one stream must run in order."""


class Backend(abc.ABC):
    """Enhances batches of hyperframes; one instance may serve several streams."""

    @property
    @abc.abstractmethod
    def info(self) -> ModelInfo: ...

    @abc.abstractmethod
    def infer(self, batch: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """(B, T, C, H, W) uint8 RGB hyperframes -> (B, C, H, W) uint8 enhanced target frames.

        Blocking: call it from a worker thread. Raises FrameError for a batch of the wrong shape or
        dtype, BackendError when the runtime fails on a valid batch.
        """

    def initial_state(self, batch: int, height: int, width: int) -> State:
        """The zero state for ``batch`` streams of frames H x W; () for stateless models."""
        return ()

    def step(self, batch: npt.NDArray[np.uint8], state: State) -> tuple[npt.NDArray[np.uint8], State]:
        """Like ``infer``, carrying a recurrent model's state: returns the frames and the next state."""
        return self.infer(batch), state

    @abc.abstractmethod
    def close(self) -> None:
        """Release the runtime session."""
