"""A file's tags and display rotation survive a file-to-file run."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.cli.main import main
from streamer.media.metadata import MAX_TAGS

pytestmark = pytest.mark.slow


def _clip(path: Path, rotation: int, tags: dict[str, str]) -> Path:
    with av.open(str(path), "w") as out:
        out.metadata.update(tags)
        stream = out.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        if rotation:
            stream.set_display_rotation(rotation)
        for i in range(6):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 30 * i, np.uint8), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 25)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def _read(path: Path) -> tuple[int, dict[str, str], tuple[int, int]]:
    with av.open(str(path)) as container:
        first = next(container.decode(video=0))
        return round(first.rotation) % 360, dict(container.metadata), (first.width, first.height)


@pytest.mark.parametrize("rotation", [90, 180, 270, 0])
def test_rotation_and_tags_are_carried_over(tmp_path: Path, rotation: int) -> None:
    tags = {
        "title": "lobby camera 7",
        "comment": "north door",
        "creation_time": "2026-12-03T10:00:00.000000Z",
    }
    clip = _clip(tmp_path / "in.mp4", rotation, tags)
    out = tmp_path / "out.mp4"
    assert main(["run", "--input", str(clip), "--output", str(out), "--no-progress"]) == 0
    turned, written, size = _read(out)
    assert turned == rotation
    assert size == (64, 48)  # enhanced as coded; the player turns it
    assert {k: written.get(k) for k in tags} == tags
    assert written["encoder"].startswith("Lavf")  # the muxer's own, not copied from the source


def test_oversized_and_surplus_tags_are_left_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tags = {f"k{i:03d}": "v" for i in range(MAX_TAGS + 5)} | {"big": "x" * 5000}
    clip = _clip(tmp_path / "in.mkv", 0, tags)
    out = tmp_path / "out.mkv"
    assert main(["run", "--input", str(clip), "--output", str(out), "--no-progress"]) == 0
    _, written, _ = _read(out)
    assert "big" not in written
    assert sum(1 for k in written if k.startswith("k")) <= MAX_TAGS
    assert "6 metadata tags not carried to the output" in capsys.readouterr().err
