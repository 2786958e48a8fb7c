"""A source whose frames change size mid-stream: what came before is written, the run then stops with
one line naming both sizes (the sink was opened for the first), exit code 2."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.cli.main import main
from tests.media import probe

pytestmark = pytest.mark.slow


def _resizing_clip(path: Path) -> Path:
    """An MPEG-TS H.264 stream: 10 frames of 64x48, then 10 of 96x64 (a new SPS in band), as a camera
    whose operator changed its resolution."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25, options={"preset": "ultrafast", "bf": "0"})
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        second = av.CodecContext.create("libx264", "w")
        second.width, second.height, second.pix_fmt = 96, 64, "yuv420p"
        second.time_base, second.framerate = Fraction(1, 25), Fraction(25)
        second.options = {"preset": "ultrafast", "bf": "0"}
        for encoder, (w, h) in ((stream.codec_context, (64, 48)), (second, (96, 64))):
            for i in range(10):
                frame = av.VideoFrame.from_ndarray(np.full((h, w, 3), 20 * i, np.uint8), format="rgb24")
                frame.pts, frame.time_base = i if encoder is not second else 10 + i, Fraction(1, 25)
                for packet in encoder.encode(frame):
                    packet.stream = stream
                    out.mux(packet)
            for packet in encoder.encode(None):
                packet.stream = stream
                out.mux(packet)
    return path


def test_a_size_change_keeps_what_came_before_and_stops_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = _resizing_clip(tmp_path / "resize.ts")
    out = tmp_path / "out.mp4"
    assert main(["run", "--input", str(clip), "--output", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "is 96x64 but" in err[0]
    assert "was opened for 64x48" in err[0]
    written = probe(out)
    assert (written.frames, written.width, written.height) == (10, 64, 48)
