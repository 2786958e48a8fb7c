"""Where video is decoded and encoded (``streamer.media.hwcodec``): NVENC's options from libx264's, and on a
machine without an NVIDIA GPU (this one, CI's) the real probes' answers and what each setting does."""

from __future__ import annotations

import logging

import pytest

from streamer.errors import ConfigError
from streamer.media import hwcodec
from streamer.media.hwcodec import (
    decoder_hwaccel,
    encoder_options,
    nvdec_unavailable,
    nvenc_unavailable,
    resolve_encoder,
)

LIVE = {
    "preset": "ultrafast",
    "tune": "zerolatency",
    "bf": "0",
    "g": "30",
    "maxrate": "2000000",
    "threads": "2",
}


def test_libx264_and_other_encoders_keep_their_options_as_given() -> None:
    assert encoder_options("libx264", LIVE) == LIVE
    assert encoder_options("libvpx-vp9", {"crf": "30"}) == {"crf": "30"}


def test_nvenc_gets_the_live_outputs_settings_as_its_nearest() -> None:
    assert encoder_options("h264_nvenc", LIVE) == {
        "preset": "p1",
        "tune": "ull",
        "zerolatency": "1",
        "delay": "0",
        "rc-lookahead": "0",
        "bf": "0",
        "g": "30",
        "maxrate": "2000000",
    }


def test_nvenc_gets_a_files_preset_by_rank_and_its_crf_as_constant_quality() -> None:
    assert encoder_options("h264_nvenc", {"preset": "veryfast", "bf": "0", "crf": "18"}) == {
        "preset": "p2",
        "bf": "0",
        "rc": "vbr",
        "cq": "18",
    }
    assert encoder_options("h264_nvenc", {"preset": "p5", "tune": "film"}) == {"preset": "p5", "tune": "hq"}


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    if nvdec_unavailable() is None or nvenc_unavailable() is None:
        pytest.skip("this machine's GPU decodes or encodes: the fallbacks are not taken here")
    monkeypatch.setattr(hwcodec, "_said", set())


@pytest.mark.usefixtures("no_gpu")
def test_the_probes_say_what_ffmpeg_said_and_what_it_means() -> None:
    assert (nvdec_unavailable() or "").startswith("NVDEC (CUDA) could not decode: ")
    assert "no NVIDIA driver or GPU" in (nvdec_unavailable() or "")
    assert (nvenc_unavailable() or "").startswith("h264_nvenc could not open: ")
    assert "the H100 and H200" in (nvenc_unavailable() or "")


@pytest.mark.usefixtures("no_gpu")
def test_auto_takes_the_cpu_and_says_why_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="streamer.media.hwcodec")
    assert decoder_hwaccel("cpu", "file source 'a.mp4'") is None
    assert decoder_hwaccel("auto", "file source 'a.mp4'") is None
    assert decoder_hwaccel("auto", "file source 'b.mp4'") is None
    assert resolve_encoder("auto", "RTSP sink rtsp://x/y") == "libx264"
    assert resolve_encoder("auto", "RTSP sink rtsp://x/z") == "libx264"
    assert resolve_encoder("libx264", "RTSP sink rtsp://x/z") == "libx264"
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"video decodes on the CPU: {nvdec_unavailable()}",
        f"video encodes with libx264: {nvenc_unavailable()}",
    ]


@pytest.mark.usefixtures("no_gpu")
def test_an_engine_named_outright_and_absent_is_an_error_naming_the_input() -> None:
    with pytest.raises(ConfigError, match=r"^RTSP source rtsp://cam/1: decode: nvdec asked for, but NVDEC"):
        decoder_hwaccel("nvdec", "RTSP source rtsp://cam/1")
    with pytest.raises(ConfigError, match=r"set codec: libx264 or auto$"):
        resolve_encoder("h264_nvenc", "file sink 'out.mp4'")


def test_a_stream_runs_only_the_probes_its_settings_need() -> None:
    from streamer.app import probe_engines
    from streamer.config import load_config

    def probed(source: dict[str, object], sink: dict[str, object]) -> tuple[int, int]:
        nvdec_unavailable.cache_clear()
        nvenc_unavailable.cache_clear()
        (stream,) = load_config(None, {"source": source, "sink": sink}).stream_configs()
        probe_engines(stream)
        return nvdec_unavailable.cache_info().currsize, nvenc_unavailable.cache_info().currsize

    rtsp = {"kind": "rtsp", "url": "rtsp://127.0.0.1:8554/cam"}
    out = {"kind": "rtsp", "url": "rtsp://127.0.0.1:8554/out"}
    assert probed(rtsp, out) == (0, 0)
    assert probed({**rtsp, "decode": "auto"}, out) == (1, 0)
    assert probed(rtsp, {**out, "codec": "auto"}) == (0, 1)
    assert probed({"kind": "synthetic"}, {"kind": "file", "path": "o.mp4", "codec": "h264_nvenc"}) == (0, 1)
