"""``streamer bench quality`` end to end on a tiny generated clip, and its parts on exact inputs."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.assets import TEMPORAL_FILTER
from streamer.backend.onnx import OnnxBackend
from streamer.bench.quality import DEFAULT_MODELS, default_models
from streamer.bench.quality_report import CAMERA_PROFILE, Row, Section
from streamer.bench.quality_targets import check_targets
from streamer.errors import ConfigError, SourceNotFoundError
from streamer.measure.clips import add_noise
from streamer.measure.enhanced import model_frames
from streamer.measure.metrics import psnr
from streamer.measure.roundtrip import h264_roundtrip
from tests.bench_cli import run_bench
from tests.onnx_models import ema_model, strength_model

FRAMES, WIDTH, HEIGHT = 12, 96, 64
IDENTITY = ["identity", "identity_near_lossless"]
"""Rows every section has: an identity model through the pipeline, at the default and the near-lossless
output, whose figures on frames are the degraded input's."""
METHODS = ["degraded", *IDENTITY, "nlmeans", "nlmeans_multi", "tf", "conv3d_t5"]
FFMPEG = ["ffmpeg_atadenoise", "ffmpeg_nlmeans", "ffmpeg_fftdnoiz"]


def _grey_frames(frames: int = FRAMES) -> np.ndarray:
    """Mid-grey frames (88..168) with a drifting texture: sigma 25 noise on them is never clipped."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    out = np.empty((frames, HEIGHT, WIDTH, 3), dtype=np.uint8)
    for i in range(frames):
        wave = np.sin((x + 2 * i) / 6) * np.cos(y / 9)
        out[i] = np.rint(128 + 40 * wave)[..., None]
    return out


@pytest.fixture
def grey_clip(tmp_path: Path) -> Path:
    path = tmp_path / "grey.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast", "crf": "8"})
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for i, pixels in enumerate(_grey_frames()):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 25)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def test_bench_prints_and_writes_every_method_for_every_degradation(
    grey_clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, md_path = tmp_path / "q.json", tmp_path / "q.md"
    # The shipped model also stands in for conv3d_t5, so the targets are checked and printed.
    models = ["--model", f"tf={TEMPORAL_FILTER}", "--model", f"conv3d_t5={TEMPORAL_FILTER}"]
    argv = ["--clip", str(grey_clip), *models, "--no-progress"]
    assert run_bench("quality", [*argv, "--json", str(json_path), "--markdown", str(md_path)]) == 0

    report = json.loads(json_path.read_text())
    sections = {s["degradation"]: s for s in report["sections"]}
    assert list(sections) == ["noise15", "noise25", "h264"]
    for section in sections.values():
        rows = section["rows"]
        assert [r["method"] for r in rows] == METHODS
        assert [r["fps"] for r in rows[:3]] == [None, None, None]
        assert all(r["fps"] > 0 for r in rows[3:])
        assert all(math.isfinite(r["psnr"]) and 0 < r["ssim"] <= 1 for r in rows)
        # What a user receives: the stream through the pipeline and the file output, for the degraded
        # input (re-encoded alone), the identity and the models; OpenCV's methods run on frames only.
        delivered = {r["method"]: r["delivered"] for r in rows}
        assert all(math.isfinite(delivered[m]) for m in ["degraded", *IDENTITY, "tf", "conv3d_t5"])
        assert delivered["nlmeans"] is None
        # the path adds nothing to the encoder's own cost (test_transparent holds it to the sample; once, in
        # a full run, the re-encode alone read 0.0006 dB apart, unexplained, hence the margin)
        assert delivered["identity"] == pytest.approx(delivered["degraded"], abs=0.01)
    assert report["clips"][0]["frames"] == FRAMES

    noisy = {r["method"]: r for r in sections["noise25"]["rows"]}
    # 20 log10(255 / sqrt(25² + 1/12)): sigma 25 plus rounding, unclipped on a mid-grey clip.
    assert noisy["degraded"]["psnr"] == pytest.approx(20.17, abs=0.1)
    assert noisy["nlmeans"]["psnr"] > noisy["degraded"]["psnr"] + 3
    assert noisy["degraded"]["flicker"] > 10

    assert [c["passed"] for c in report["checks"]][3] is None
    path = [c for c in report["checks"] if c["model"] == "identity"]
    assert [(c["degradation"], c["passed"]) for c in path] == [("h264", True)]  # a compressed section

    out = capsys.readouterr().out
    header = out.splitlines()
    assert re.search(r"\d+ cores", header[0])
    assert "grey.mp4 (96x64 @ 25 fps, first 12 frames)" in header[1]
    assert [line.startswith("degraded input") for line in header].count(True) == 3
    assert "h = hColor = 10" in out
    assert "targets for ours Conv3d T=5 at Gaussian noise sigma 25:" in out
    assert "targets for the frames path and the file output (an identity model, delivered):" in out
    verdicts = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert len(verdicts) == 5
    assert verdicts[3] == "SKIP"
    assert set(verdicts[:3] + verdicts[4:]) <= {"PASS", "FAIL"}
    markdown = md_path.read_text()
    table_rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert len(table_rows) == 1 + 3 * len(METHODS)
    assert "| ours Conv3d T=5 |" in markdown


def test_the_camera_track_compresses_adds_sensor_noise_keeps_clean_and_runs_ffmpegs_filters(
    grey_clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path = tmp_path / "camera.json"
    models = ["--model", f"conv3d_t5={TEMPORAL_FILTER}"]
    argv = ["--clip", str(grey_clip), *models, "--track", "camera", "--frames", "6", "--no-progress"]
    assert run_bench("quality", [*argv, "--json", str(json_path)]) == 0
    report = json.loads(json_path.read_text())
    sections = {s["degradation"]: s for s in report["sections"]}
    assert list(sections) == ["crf30", "crf35", "crf40", "camera", "noise15crf30", "clean"]
    for section in sections.values():
        methods = [r["method"] for r in section["rows"]]
        assert methods == ["degraded", *IDENTITY, "nlmeans", *FFMPEG, "conv3d_t5"]  # no multi-frame NLMeans
    psnrs = {k: {r["method"]: r["psnr"] for r in s["rows"]} for k, s in sections.items()}
    assert psnrs["crf30"]["degraded"] > psnrs["crf35"]["degraded"] > psnrs["crf40"]["degraded"]
    assert psnrs["clean"]["degraded"] is None  # the clean input against itself: infinite, written null
    assert "kbit/s" in sections["camera"]["title"]
    checks = {c["degradation"]: c for c in report["checks"]}
    assert set(checks) == {"crf30", "crf35", "crf40", "camera", "noise15crf30", "clean"}
    assert all(c["passed"] in (True, False) for c in report["checks"])
    # The output's own cost is held to its bounds at CRF 35 and noise then CRF 30; the path's everywhere
    # the input is compressed, and every model against the identity there too.
    path = [(c["degradation"], c["target"]) for c in report["checks"] if c["model"] == "identity"]
    assert [key for key, _ in path] == ["crf30", "crf35", "crf35", "crf35", "crf40", "camera"] + [
        "noise15crf30"
    ] * 3
    beside = [c["degradation"] for c in report["checks"] if "at or above the identity" in c["target"]]
    assert beside == ["crf30", "crf35", "crf40", "camera", "noise15crf30", "clean"]
    assert "targets for ours Conv3d T=5:" in capsys.readouterr().out


def test_the_camera_profiles_model_is_held_to_the_camera_targets_too(
    grey_clip: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = ["--model", f"conv3d_t5={TEMPORAL_FILTER}", "--model", f"{CAMERA_PROFILE}={TEMPORAL_FILTER}"]
    argv = ["--clip", str(grey_clip), *models, "--track", "camera", "--frames", "6", "--no-progress"]
    assert run_bench("quality", argv) == 0
    out = capsys.readouterr().out
    assert "targets for ours Conv3d T=5:" in out
    profile = out.split(f"targets for the camera profile's {CAMERA_PROFILE}:")[1].split("\n\n")[0]
    lines = [line for line in profile.splitlines() if line.startswith("  ")]
    # Issue 14's five on frames; issue 43's on what is delivered: at or above the identity on the six
    # sections, and the gain at CRF 35 and on a camera's noise then CRF 28.
    assert len(lines) == 5 + 6 + 2
    assert sum("delivered >= +" in line for line in lines) == 2


def test_an_unknown_track_is_refused_naming_the_known_ones(grey_clip: Path) -> None:
    with pytest.raises(ConfigError, match="--track 'noisy': give gaussian or camera"):
        run_bench("quality", ["--clip", str(grey_clip), "--track", "noisy", "--no-progress"])


def test_default_models_skip_what_is_missing_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "conv3d_t5.onnx").write_bytes(TEMPORAL_FILTER.read_bytes())
    found, notes = default_models(tmp_path)
    assert [(m.name, m.label) for m in found] == [("conv3d_t5", "ours Conv3d T=5")]
    assert len(notes) == len(DEFAULT_MODELS) - 1
    assert all("does not exist" in n for n in notes)


def test_model_frames_gives_one_output_per_frame_through_the_windower() -> None:
    clip = np.repeat(_grey_frames(1), 7, axis=0)
    backend = OnnxBackend(TEMPORAL_FILTER)
    out = np.stack(list(model_frames(backend, clip)))
    assert out.shape == clip.shape
    # A static clip is left as it is by a temporal filter.
    assert np.abs(out.astype(np.int16) - clip).max() <= 1


def test_model_frames_carries_a_recurrent_models_state(tmp_path: Path) -> None:
    backend = OnnxBackend(ema_model(tmp_path / "ema.onnx", decay=0.5))
    assert backend.info.state
    clip = np.full((4, 8, 8, 3), 200, dtype=np.uint8)
    out = [int(frame[0, 0, 0]) for frame in model_frames(backend, clip)]
    # From a zero state, h_k = 200 (1 - 0.5^k): only a carried state keeps climbing.
    assert out == [100, 150, 175, 188]


def test_model_frames_gives_a_strength_model_the_clips_noise_estimate_as_auto_does(tmp_path: Path) -> None:
    backend = OnnxBackend(strength_model(tmp_path / "strength.onnx", default=40.0))
    noisy = add_noise(np.full((6, 64, 64, 3), 100, dtype=np.uint8), 12.0, seed=0)
    out = np.stack(list(model_frames(backend, noisy)))
    # The model adds the strength it got to the frame: the estimate of sigma 12, not the default 40.
    lift = (out.astype(np.float64) - noisy).mean()
    assert lift == pytest.approx(12.0, abs=1.5)


def test_noise_is_seeded_and_each_sigma_draws_its_own() -> None:
    clean = _grey_frames(3)
    assert np.array_equal(add_noise(clean, 25.0, seed=3), add_noise(clean, 25.0, seed=3))
    assert not np.array_equal(add_noise(clean, 25.0, seed=3), add_noise(clean, 25.0, seed=4))
    assert psnr(add_noise(clean, 15.0, seed=0), clean) == pytest.approx(20 * math.log10(255 / 15), abs=0.1)


def test_h264_roundtrip_keeps_frames_and_size_and_loses_detail() -> None:
    clean = _grey_frames()
    decoded, kbps = h264_roundtrip(clean, Fraction(25))
    assert decoded.shape == clean.shape
    assert kbps > 0
    assert 25 < psnr(decoded, clean) < math.inf


def _section(ours: float, multi: float, single: float | None) -> Section:
    rows = [
        Row("degraded", "degraded input", 20.0, 0.2, 25.0, None),
        Row("nlmeans_multi", "NLMeans multi", multi, 0.8, 0.5, 1.0),
        Row("conv3d_t5", "ours Conv3d T=5", ours, 0.8, 0.4, 30.0),
    ]
    if single is not None:
        rows.append(Row("conv3d_t1", "ours T=1", 24.0, 0.7, single, 40.0))
    return Section("clip.mp4", "noise25", "Gaussian noise sigma 25", tuple(rows))


def test_targets_pass_and_fail_on_the_numbers() -> None:
    checks = {c.target: c.passed for c in check_targets(_section(ours=25.0, multi=26.0, single=1.0))}
    assert checks == {
        "gain over degraded input >= +4 dB": True,
        "PSNR >= NLMeans multi": False,
        "speed >= 20x NLMeans multi": True,
        "flicker below the T=1 ablation": True,
    }


def test_flicker_target_is_skipped_without_the_t1_ablation() -> None:
    checks = check_targets(_section(ours=23.0, multi=22.0, single=None))
    assert [c.passed for c in checks] == [False, True, True, None]


def test_missing_clip_is_source_not_found(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="does not exist"):
        run_bench(
            "quality",
            ["--clip", str(tmp_path / "nope.mp4"), "--model", f"tf={TEMPORAL_FILTER}", "--no-progress"],
        )


@pytest.mark.parametrize("spec", ["conv3d_t5", "=model.onnx", "name=", "a=x.onnx --model a=y.onnx"])
def test_bad_model_spec_is_a_config_error(spec: str, grey_clip: Path) -> None:
    models = [arg for part in spec.split(" --model ") for arg in ("--model", part)]
    with pytest.raises(ConfigError, match="--model"):
        run_bench("quality", ["--clip", str(grey_clip), *models, "--no-progress"])


@pytest.mark.parametrize(("flag", "value"), [("--size", "big"), ("--size", "95x64"), ("--frames", "1")])
def test_bad_size_or_frames_is_a_config_error(flag: str, value: str, grey_clip: Path) -> None:
    with pytest.raises(ConfigError, match=flag):
        run_bench("quality", ["--clip", str(grey_clip), flag, value, "--no-progress"])
