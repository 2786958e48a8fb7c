from __future__ import annotations

import pytest

from streamer.core.latency import Admission, CallCost, LatencyBudget, MissAction
from streamer.core.stats import DurationRecorder
from streamer.errors import ConfigError


def test_no_budget_admits_everything() -> None:
    budget = LatencyBudget(None)
    budget.observe(10.0)
    assert budget.admit(arrival=0.0, now=100.0) is Admission.RUN


def test_frame_that_would_miss_passes_through_and_is_counted() -> None:
    budget = LatencyBudget(100.0)
    budget.observe(0.05)
    assert budget.admit(arrival=0.0, now=0.04) is Admission.RUN
    assert budget.admit(arrival=0.0, now=0.06) is Admission.PASSTHROUGH
    stats = budget.stats()
    assert (stats.admitted, stats.passed_through, stats.dropped) == (1, 1, 0)


def test_drop_action_drops() -> None:
    budget = LatencyBudget(10.0, MissAction.DROP)
    assert budget.admit(arrival=0.0, now=1.0) is Admission.DROP
    assert budget.stats().dropped == 1


def test_estimate_follows_measured_calls() -> None:
    budget = LatencyBudget(100.0, alpha=0.5)
    budget.observe(0.02)
    budget.observe(0.04)
    assert budget.stats().estimate_ms == pytest.approx(30.0)


def test_calls_that_vary_widen_the_margin_admission_keeps() -> None:
    steady, jumpy = (LatencyBudget(120.0, alpha=0.5, probe_min_s=5.0) for _ in range(2))
    for seconds in (0.04, 0.04, 0.04):
        steady.observe(seconds)
    for seconds in (0.04, 0.01, 0.07):
        jumpy.observe(seconds)
    assert steady.stats().deviation_ms == pytest.approx(0.0)
    assert jumpy.stats().estimate_ms == pytest.approx(47.5)
    assert jumpy.stats().deviation_ms == pytest.approx(30.0)
    assert jumpy.admit(arrival=0.0, now=0.0) is Admission.RUN  # a fresh frame: 0 + 47.5 + 2 x 30 <= 120
    assert steady.admit(arrival=1.0, now=1.05) is Admission.RUN  # 50 + 40 <= 120
    assert jumpy.admit(arrival=1.0, now=1.05) is Admission.PASSTHROUGH  # 50 + 47.5 + 2 x 30 > 120


def test_a_stale_estimate_is_measured_again_by_a_probe_once_per_interval() -> None:
    budget = LatencyBudget(100.0, probe_s=5.0, probe_min_s=5.0)
    budget.observe(0.5)  # one slow call: every later frame would be judged too late by the estimate
    assert budget.admit(arrival=10.0, now=10.01) is Admission.PROBE  # leaves unenhanced, times the model
    assert budget.admit(arrival=11.0, now=11.01) is Admission.PASSTHROUGH
    assert budget.admit(arrival=14.0, now=14.01) is Admission.PASSTHROUGH
    assert budget.admit(arrival=15.5, now=15.51) is Admission.PROBE
    budget.observe(0.02)  # the probe's call: the estimate starts again from it
    assert budget.admit(arrival=15.6, now=15.61) is Admission.RUN
    stats = budget.stats()
    assert (stats.probes, stats.passed_through, stats.admitted) == (2, 4, 1)
    assert stats.estimate_ms == pytest.approx(20.0)


def test_probes_back_off_while_they_confirm_the_miss_and_start_short_again_after_a_run() -> None:
    budget = LatencyBudget(100.0, probe_s=2.0, probe_min_s=0.25)
    budget.observe(0.5)
    probes = []
    for step in range(200):  # a frame every 50 ms for 10 s, each probe's call as slow as the first
        now = step * 0.05
        if budget.admit(arrival=now, now=now) is Admission.PROBE:
            probes.append(round(now, 2))
            budget.observe(0.5)
    assert probes == [0.0, 0.5, 1.5, 3.5, 5.5, 7.5, 9.5]  # at once (nothing ran yet), then 0.5, 1, 2, 2...
    assert budget.admit(arrival=11.5, now=11.5) is Admission.PROBE
    budget.observe(0.02)  # the model is fast again: the next frame runs
    assert budget.admit(arrival=11.6, now=11.6) is Admission.RUN
    budget.observe(0.5)  # one slow call after it: the next probe comes after the shortest wait again
    assert budget.admit(arrival=11.7, now=11.7) is Admission.PASSTHROUGH
    assert budget.admit(arrival=11.85, now=11.85) is Admission.PROBE


def test_with_drop_a_probe_is_counted_as_dropped() -> None:
    budget = LatencyBudget(100.0, MissAction.DROP, probe_s=5.0, probe_min_s=5.0)
    budget.observe(0.5)
    assert budget.admit(arrival=0.0, now=0.01) is Admission.PROBE
    assert budget.admit(arrival=1.0, now=1.01) is Admission.DROP
    assert budget.stats().dropped == 2


def test_a_frame_already_over_budget_is_never_a_probe() -> None:
    budget = LatencyBudget(100.0, probe_s=1.0)
    budget.observe(0.5)
    assert budget.admit(arrival=0.0, now=30.0) is Admission.PASSTHROUGH
    assert budget.stats().probes == 0


@pytest.mark.parametrize(("budget_ms", "alpha"), [(0.0, 0.2), (-5.0, 0.2), (10.0, 0.0), (10.0, 1.5)])
def test_bad_settings(budget_ms: float, alpha: float) -> None:
    with pytest.raises(ConfigError):
        LatencyBudget(budget_ms, alpha=alpha)
    with pytest.raises(ConfigError, match="probe_min_s"):
        LatencyBudget(100.0, probe_s=1.0, probe_min_s=2.0)


def test_recorder_percentiles_over_retained_window() -> None:
    recorder = DurationRecorder(capacity=4)
    assert recorder.percentile_ms(50) is None
    for seconds in (1.0, 1.0, 0.001, 0.002, 0.003, 0.004):
        recorder.record(seconds)
    assert recorder.count == 6
    assert recorder.percentile_ms(100) == pytest.approx(4.0)


def test_a_frame_refused_where_its_call_was_formed_counts_as_passed_through_not_admitted() -> None:
    budget = LatencyBudget(100.0)
    assert budget.admit(arrival=0.0, now=0.01) is Admission.RUN
    budget.late()
    stats = budget.stats()
    assert (stats.admitted, stats.passed_through, stats.late) == (0, 1, 1)
    dropping = LatencyBudget(100.0, MissAction.DROP)
    dropping.admit(arrival=0.0, now=0.01)
    dropping.late()
    assert (dropping.stats().dropped, dropping.stats().late) == (1, 1)


def test_a_call_cost_is_nothing_until_a_call_is_measured() -> None:
    assert CallCost().expected(16) == 0.0


def test_calls_of_one_size_bound_other_sizes_as_any_line_through_them_would() -> None:
    cost = CallCost()
    for _ in range(5):
        cost.observe(4, 0.08)
    assert cost.expected(1) == pytest.approx(0.08)  # a call of fewer windows takes no longer
    assert cost.expected(4) == pytest.approx(0.08)
    assert cost.expected(8) == pytest.approx(0.16)  # nor more than in proportion


def test_a_cpu_call_grows_with_its_windows_and_a_gpu_call_hardly_does() -> None:
    cpu, gpu = CallCost(), CallCost()
    for i in range(40):
        windows = (1, 8, 3)[i % 3]
        cpu.observe(windows, 0.010 * windows)
        gpu.observe(windows, 0.010 + 0.0002 * windows)
    assert cpu.expected(16) == pytest.approx(0.160, rel=0.05)
    assert cpu.expected(1) == pytest.approx(0.010, rel=0.05)
    assert gpu.expected(1) == pytest.approx(0.0102, rel=0.05)
    assert gpu.expected(16) == pytest.approx(0.0132, rel=0.05)


def test_calls_that_vary_add_a_margin_to_the_line() -> None:
    cost = CallCost(alpha=0.5)
    for seconds in (0.04, 0.01, 0.07, 0.04):
        cost.observe(1, seconds)
    assert cost.expected(1) > 0.04 + 0.02


def test_a_call_cost_refuses_a_smoothing_outside_zero_to_one() -> None:
    with pytest.raises(ConfigError, match="alpha"):
        CallCost(alpha=0.0)


def test_the_time_after_a_call_counts_against_the_budget_too() -> None:
    budget = LatencyBudget(100.0)
    budget.observe(0.03)
    assert budget.admit(arrival=0.0, now=0.06) is Admission.RUN  # 60 + 30 <= 100
    budget.observe_tail(0.02)  # encoding and sending, after the call
    assert budget.stats().tail_ms == pytest.approx(20.0)
    assert budget.admit(arrival=1.0, now=1.06) is not Admission.RUN  # 60 + 30 + 20 > 100
    assert budget.deadline(1.0) == pytest.approx(1.08)  # the call must end 20 ms before the budget


def test_without_a_budget_no_call_has_a_deadline() -> None:
    assert LatencyBudget(None).deadline(1.0) is None
