"""Reading written video back, to check what a sink produced."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av


@dataclass(frozen=True)
class Probe:
    frames: int
    width: int
    height: int
    pts: list[int]


def probe(path: Path) -> Probe:
    """Decodes every frame: counts what a player would show, not what the header claims."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pts = [frame.pts for frame in container.decode(stream)]
        return Probe(len(pts), stream.codec_context.width, stream.codec_context.height, pts)
