"""The run's summary (``streamer run``'s last lines): frames the latency budget left unenhanced are
counted, and a file read unpaced is told the setting that enhances them all."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from streamer.engine.pipeline import PipelineReport
from streamer.frame import StreamInfo
from streamer.serving.runner import format_report


def report(outcomes: dict[str, int]) -> PipelineReport:
    return PipelineReport(
        stream_id="cam",
        info=StreamInfo(640, 272, Fraction(25), Fraction(1, 25)),
        model="conv3d_t1_strength",
        provider="CPUExecutionProvider",
        frames_in=60,
        frames_out=60,
        source_dropped=0,
        outcomes=outcomes,
        model_calls=6,
        windows_enhanced=6,
        windows_skipped=0,
        discontinuities=1,
        wall_s=1.3,
        latency_p50_ms=300.0,
        latency_p95_ms=350.0,
        latency_p99_ms=360.0,
        inference_p50_ms=165.0,
        lookahead_frames=0,
    )


def test_frames_the_budget_left_unenhanced_are_counted_and_a_file_is_told_how_to_enhance_them() -> None:
    missed = report({"enhanced": 6, "budget_passthrough": 50, "budget_drop": 4})
    line = next(x for x in format_report(missed, Path("out.mp4")).splitlines() if x.startswith("budget"))
    assert line == "budget      54 of 60 frames left unenhanced to stay within latency.budget_ms"
    hinted = format_report(missed, Path("out.mp4"), unpaced_file=True)
    assert (
        "54 of 60 frames left unenhanced to stay within latency.budget_ms; a file read unpaced "
        "(source.realtime: false) arrives faster than a model runs: latency.budget_ms: null enhances "
        "every frame"
    ) in hinted


def test_a_run_the_budget_never_cut_has_no_budget_line() -> None:
    assert "budget " not in format_report(report({"enhanced": 60}), None, unpaced_file=True)
