"""The command line as a user meets it: exit codes, one-line errors, the demo's files."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import av
import pytest

from streamer.cli.main import main
from tests.integration.rtsp_fixtures import free_port
from tests.media import probe
from tests.onnx_models import upscaler_model

pytestmark = pytest.mark.slow

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_demo_writes_mp4_with_source_frame_count_and_size_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--output-dir", str(tmp_path), "--frames", "30", "--no-progress"]) == 0
    out = capsys.readouterr().out
    written = probe(tmp_path / "enhanced.mp4")
    assert (written.frames, written.width, written.height) == (30, 640, 272)
    assert (tmp_path / "before_after.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "30 in, 30 out" in out
    assert "p99" in out
    psnr_line = next(line for line in out.splitlines() if line.startswith("quality"))
    gain = float(psnr_line.rsplit("(", 1)[1].split(" dB")[0])
    assert gain > 1.0


def test_run_file_to_file(
    make_clip: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = make_clip(frames=40)
    out = tmp_path / "out.mp4"
    assert main(["run", "--input", str(clip), "--output", str(out), "--no-progress"]) == 0
    assert probe(out).frames == 40
    assert probe(out).pts == probe(clip).pts
    assert str(out) in capsys.readouterr().out


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("streamer: error: ")
    return err


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("window:\n  strid: 2\n", "unknown key 'window.strid'"),
        ("runtime:\n  max_batch: lots\n", "runtime.max_batch"),
        ("gate: {enabled: [\n", "YAML error"),
    ],
)
def test_bad_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    assert expected in error_of(["run", "--config", str(path), "--no-progress"], capsys)


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    assert str(missing) in error_of(["run", "--config", str(missing)], capsys)


def test_missing_input_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no_such_clip.mp4"
    assert str(missing) in error_of(["run", "--input", str(missing), "--no-progress"], capsys)


def test_window_t_disagreeing_with_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(["run", "--set", "window.t=3", "--no-progress"], capsys)
    assert "T=5" in err
    assert "window.t" in err


def test_missing_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "model.onnx"
    assert str(missing) in error_of(["run", "--model", str(missing), "--no-progress"], capsys)


def test_bad_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert "section.key=value" in error_of(["run", "--set", "stride"], capsys)


def test_real_process_exits_2_with_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("latency:\n  budget_ms: -1\n")
    result = subprocess.run(
        [sys.executable, "-m", "streamer.cli.main", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "latency.budget_ms" in result.stderr


def test_webrtc_on_a_public_address_without_a_token_refuses_to_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = Path(__file__).parents[2] / "configs" / "webrtc.yaml"
    err = error_of(["run", "--config", str(config), "--set", "webrtc.host=0.0.0.0"], capsys)
    assert "token" in err


def test_rtsp_url_that_refuses_connection_is_one_line_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "rtsp://viewer:s3cret@127.0.0.1:9/cam"
    err = error_of(["run", "--input", url, "--set", "source.reconnect=false", "--no-progress"], capsys)
    assert "rtsp://***@127.0.0.1:9/cam" in err
    assert "s3cret" not in err


def test_out_of_memory_is_one_line_without_a_traceback() -> None:
    import resource

    limit = 3 * 1024**3  # address space: enough to start, not for a window of 8K frames

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    model = Path(__file__).parents[2] / "streamer" / "assets" / "temporal_filter_t5.onnx"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamer.cli.main",
            "run",
            *("--set", "source.width=7680", "--set", "source.height=4320", "--set", "source.frames=12"),
            *("--set", f"model.path={model}", "--set", "model.threads=1"),
            # Past the memory budget's estimate, which would refuse the stream before any allocation:
            # this is about an allocation that fails all the same.
            *("--set", "runtime.memory_budget_mb=100000000"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,  # the child sets its own limit before it execs Python
    )
    assert result.returncode == 2, result.stderr[-2000:]  # a one-stream run's error, as for bad input
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("streamer: error: out of memory (Unable to allocate")
    assert "lower the stream's resolution" in lines[0]


WEBRTC_CONFIG = Path(__file__).parents[2] / "configs" / "webrtc.yaml"


def test_sigterm_before_any_publisher_stops_cleanly_and_prints_the_viewer_url() -> None:
    """A WHIP stream nobody published to, stopped by SIGTERM: one line, exit 0, no traceback (it was
    an AssertionError); the start-up lines name the stream's real viewer URL."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamer",
            "run",
            "--config",
            "configs/webrtc.yaml",
            "--set",
            f"webrtc.port={port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    lines = [process.stderr.readline() for _ in range(2)]
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert lines == [
        f"streamer: WHIP/WHEP on http://127.0.0.1:{port}\n",
        f"streamer: stream cam: viewer http://127.0.0.1:{port}/view/cam\n",
    ]
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert out.strip() == "stopped     before the source opened; nothing was written"


def test_an_upscaler_exported_without_metadata_writes_a_video_twice_the_size(tmp_path: Path) -> None:
    model, out = upscaler_model(tmp_path / "up.onnx", (2.0, 2.0)), tmp_path / "out.mp4"
    command = [sys.executable, "-m", "streamer", "run", "--input", "sample:bikes", "--output", str(out)]
    command += ["--model", str(model), "--set", "source.max_frames=6", "--no-progress"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    with av.open(str(out)) as written:
        stream = written.streams.video[0]
        assert (stream.width, stream.height) == (1280, 544)  # bikes is 640x272
        assert sum(1 for _ in written.decode(stream)) == 6
