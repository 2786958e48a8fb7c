"""``streamer bench codecs`` here: the CPU's decode and libx264 timed on a real H.264 clip, NVDEC and
NVENC listed with FFmpeg's reason where they do not work, and the streams the cores carry."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import av
import pytest
from av.video.frame import PictureType

from streamer.errors import ConfigError
from streamer.measure.synthetic import camera_clip
from streamer.media.hwcodec import nvdec_unavailable, nvenc_unavailable
from tests.bench_cli import run_bench

TINY = ["--sizes", "96x64,64x48", "--frames", "4", "--seconds", "0.01"]


def test_the_camera_clip_is_h264_with_a_keyframe_a_second_and_no_b_frames() -> None:
    clip, pixels = camera_clip(96, 64, frames=12, fps=6)
    assert len(pixels) == 12
    assert pixels[0].shape == (64, 96, 3)
    with av.open(io.BytesIO(clip), "r", format="h264") as given:
        frames = list(given.decode(video=0))
    assert len(frames) == 12
    assert [f.key_frame for f in frames].count(True) == 2  # frames 0 and 6: one a second at 6 fps
    assert {int(f.pict_type) for f in frames} == {PictureType.I, PictureType.P}


def test_each_engine_is_timed_or_said_unavailable_and_the_streams_follow(tmp_path: Path) -> None:
    out, markdown = tmp_path / "codecs.json", tmp_path / "codecs.md"
    assert run_bench("codecs", [*TINY, "--json", str(out), "--markdown", str(markdown)]) == 0
    report = json.loads(out.read_text())
    rows = {(s["stage"], s["engine"], s["size"]): s for s in report["speeds"]}
    assert set(rows) == {
        (stage, engine, size)
        for stage, engines in (
            ("decode", ("cpu", "nvdec", "cpu to 4:2:0")),
            ("encode", ("libx264", "libx264 from 4:2:0", "h264_nvenc")),
        )
        for engine in engines
        for size in ("96x64", "64x48")
    }
    for size in ("96x64", "64x48"):
        for key in (
            ("decode", "cpu", size),
            ("encode", "libx264", size),
            ("encode", "libx264 from 4:2:0", size),
        ):
            assert rows[key]["fps"] > 0
            assert rows[key]["host_ms"] > 0
            assert 0 <= rows[key]["convert_ms"] <= rows[key]["host_ms"]
            assert rows[key]["rounds"] >= 3
            assert rows[key]["error"] is None
    if nvdec_unavailable() is not None:
        assert report["nvdec"] == nvdec_unavailable()
        assert rows[("decode", "nvdec", "64x48")]["error"] == "unavailable (NVDEC above)"
    if nvenc_unavailable() is not None:
        assert report["nvenc"] == nvenc_unavailable()
        assert rows[("encode", "h264_nvenc", "64x48")]["fps"] is None
    counts = {(c["size"], c["decode"], c["encode"]): c for c in report["streams"]}
    cpu = counts[("64x48", "cpu", "libx264")]
    decode, encode = rows[("decode", "cpu", "64x48")], rows[("encode", "libx264", "64x48")]
    assert cpu["host_ms"] == pytest.approx(decode["host_ms"] + encode["host_ms"])
    assert cpu["per_core"] == pytest.approx(1000 / (30 * cpu["host_ms"]))
    assert cpu["here"] == int(cpu["per_core"] * report["cores"])
    assert "| 64x48 | cpu | libx264 |" in markdown.read_text()
    assert "| 64x48 | cpu | libx264 from 4:2:0 |" in markdown.read_text()
    assert "| 64x48 | cpu to 4:2:0 | libx264 from 4:2:0 |" in markdown.read_text()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(["--frames", "1"], "--frames"), (["--fps", "0"], "--fps"), (["--seconds", "nan"], "--seconds")],
)
def test_bad_flags_are_one_line(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        run_bench("codecs", argv)


def test_the_module_runs_with_numpy_onnxruntime_and_pyav_alone() -> None:
    """What a lent GPU machine runs (benchmarks/gpu_lease.sh): the service's dependencies and onnx
    made unimportable, ``python -m streamer.bench codecs`` still reports."""
    blocked = ("pydantic", "aiohttp", "aiortc", "yaml", "prometheus_client", "torch", "onnx")
    code = (
        f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
        "from streamer.bench.__main__ import main\n"
        "sys.exit(main(['codecs', '--sizes', '64x48', '--frames', '4', '--seconds', '0.01']))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "\n64x48 | cpu | libx264 | " in ran.stdout  # the streams its cores carry
