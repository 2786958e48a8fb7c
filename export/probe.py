"""Checks a window model's declared layout and output slot against what drives its output.

Shapes cannot tell an NCTHW model from an NTCHW one when T equals C (3): both take (B, 3, 3, H, W), the
export's parity check passes (PyTorch and onnxruntime agree on the wrong reading) and the runtime feeds
the model colour planes as frames. What can tell them apart is behaviour: replacing one frame of the
window changes a centre or last model's output mostly through its target slot. So each slot is
replaced in turn by an unrelated random frame, under the declared reading and, where T = C, under the
reading with T and C swapped, and the share of the output's change each slot causes is compared.

A declaration is refused when the other reading makes a clearly more consistent picture (its target
slot drives the output and takes a larger share by ``LAYOUT_MARGIN``), or when under the declared
reading another slot drives the output at least ``SLOT_RATIO`` times as strongly as the target. A
model that blends its frames evenly (a plain temporal mean) passes both: nothing contradicts it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from export.contract import Contract, model_input, random_pixels, state_shape
from streamer.backend.base import Layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

__all__ = ["LAYOUT_MARGIN", "PROBE_HW", "SLOT_RATIO", "check_slots", "slot_shares"]

PROBE_HW = (32, 32)
"""Frame size of the probe (rounded up to the pad multiple): cheap, and wide enough for 3x3 stacks."""
LAYOUT_MARGIN = 0.2
"""How much larger the target's share must be under the swapped reading to refuse the declared one."""
SLOT_RATIO = 2.0
"""How many times the target's effect another slot's must reach to refuse the declared output slot."""

_OTHER_READING = {
    Layout.NTCHW: "NCTHW",
    Layout.NCTHW: "NTCHW",
    Layout.STACKED: "channel-major stacking (B, C*T, H, W)",
}
"""Under which name the T<->C swapped reading of each layout goes; a per-frame model has no T to swap."""


def slot_shares(module: nn.Module, contract: Contract, *, swapped: bool = False) -> list[float]:
    """Each window slot's share (summing to 1) of the mean absolute change in the output when that
    slot alone is replaced by an unrelated random frame; all zeros when the output ignores the input.
    Fixed seeds and no gradients; put the module in eval mode first (``export_onnx`` does).

    ``swapped`` reads the window with T and C exchanged (T must equal 3): slot k is then the k-th
    plane of the declared channel axis across all frames, which is what a model of the other layout
    sees as frame k.
    """
    if swapped and contract.t != 3:
        raise ConfigError(f"a T<->C swapped reading needs T = C = 3; {contract.name!r} has T={contract.t}")
    m = contract.pad_multiple
    h, w = (-(-v // m) * m for v in PROBE_HW)
    shape = (1, contract.t, 3, h, w)
    base, other = random_pixels(shape, seed=11), random_pixels(shape, seed=12)
    states = [torch.zeros(state_shape(s, 1, (h, w))) for s in contract.states]
    if contract.strength:
        states.append(torch.full((1, 1), contract.strength_default))

    def run(pixels: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        with torch.no_grad():
            result = module(model_input(pixels, contract), *states)
        out = result[0] if isinstance(result, tuple | list) else result
        return np.asarray(out.numpy(), dtype=np.float64)

    reference = run(base)
    changes = []
    for k in range(contract.t):
        pixels = base.copy()
        if swapped:
            pixels[:, :, k] = other[:, :, k]
        else:
            pixels[:, k] = other[:, k]
        changes.append(float(np.mean(np.abs(run(pixels) - reference))))
    total = sum(changes)
    return [c / total if total > 0 else 0.0 for c in changes]


def check_slots(module: nn.Module, contract: Contract) -> None:
    """Raises ConfigError when the declared layout or output slot contradicts what drives the output.

    The module must already be in eval mode and accept the contract's input (shapes are checked
    first). Window models only: T = 1 leaves nothing to probe.
    """
    if contract.t == 1:
        return
    target = contract.target
    declared = slot_shares(module, contract)
    if not any(declared):
        return  # the output ignores its frames: no slot to contradict
    here = _shares_text(declared, target)
    other = _OTHER_READING.get(contract.layout)
    if contract.t == 3 and other is not None:
        swapped = slot_shares(module, contract, swapped=True)
        if _strongest(swapped) == target and swapped[target] >= declared[target] + LAYOUT_MARGIN:
            raise ConfigError(
                f"{contract.name!r} is declared {contract.layout.value} but reads as {other}: replacing one "
                f"frame at a time, the target slot {target} ({contract.position.value}) takes "
                f"{declared[target]:.2f} of the output's change read as {contract.layout.value} "
                f"({here}) and {swapped[target]:.2f} read as {other} ({_shares_text(swapped, target)}); "
                f"export it with the layout it takes (--layout), or fix the module's layout attribute"
            )
    strongest = _strongest(declared)
    if declared[strongest] >= SLOT_RATIO * declared[target]:
        fits = [p.value for p in OutputPosition if p.slot(contract.t) == strongest]
        hint = f"--position {fits[0]}" if fits else "a model whose output is its target frame enhanced"
        raise ConfigError(
            f"{contract.name!r} is declared to enhance slot {target} ({contract.position.value}) of "
            f"{contract.t}, but slot {strongest} drives its output {declared[strongest]:.2f} against the "
            f"target's {declared[target]:.2f} when one frame at a time is replaced ({here}, "
            f"{contract.layout.value}); declare the slot it enhances ({hint}) or check the layout"
        )


def _strongest(shares: list[float]) -> int:
    return int(np.argmax(shares))


def _shares_text(shares: list[float], target: int) -> str:
    return "shares by slot " + " ".join(f"{s:.2f}" for s in shares) + f", target {target}"
