"""Memory admission: a stream's estimate from its size, and a budget that refuses what does not fit."""

from __future__ import annotations

import pytest

from streamer.core.admission import ACTIVATION_BYTES_PER_PIXEL, MemoryBudget, stream_cost
from streamer.errors import BudgetError, LimitError


def test_a_streams_cost_is_its_frames_features_and_one_calls_activations() -> None:
    cost = stream_cost(640, 360, frames_held=10, feature_bytes_per_pixel=20.0)
    pixels = 640 * 360
    assert cost.frames == 4.5 * pixels * 10  # planes and their RGB
    assert cost.features == 20 * pixels
    assert cost.activations == ACTIVATION_BYTES_PER_PIXEL * pixels
    assert cost.total == cost.frames + cost.features + cost.activations


def test_each_model_call_under_way_at_once_holds_its_own_activations() -> None:
    one, two = (
        stream_cost(640, 360, frames_held=10, tile=256, tile_overlap=32, calls=calls) for calls in (1, 2)
    )
    assert two.activations == 2 * one.activations == 2 * ACTIVATION_BYTES_PER_PIXEL * 320 * 320
    assert two.frames == one.frames


def test_tiles_bound_the_activations_of_a_large_frame() -> None:
    whole = stream_cost(3840, 2160, frames_held=10)
    tiled = stream_cost(3840, 2160, frames_held=10, tile=1024, tile_overlap=32)
    assert tiled.frames == whole.frames
    assert tiled.activations == ACTIVATION_BYTES_PER_PIXEL * 1088 * 1088
    assert (
        stream_cost(640, 360, frames_held=1, tile=1024).activations == ACTIVATION_BYTES_PER_PIXEL * 640 * 360
    )


def test_a_budget_admits_what_fits_refuses_the_rest_in_one_line_and_frees_on_release() -> None:
    small = stream_cost(640, 360, frames_held=10)
    budget = MemoryBudget(3 * small.total)
    budget.admit("a", small)
    budget.admit("b", small)
    huge = stream_cost(7680, 4320, frames_held=30)
    with pytest.raises(BudgetError) as refused:
        budget.admit("c", huge)
    line = str(refused.value)
    assert "\n" not in line
    assert "7680x4320 needs about" in line
    assert f"{small.total / 2**20:.0f} MB of the" in line  # what is left
    assert "runtime.memory_budget_mb" in line
    assert isinstance(refused.value, LimitError)
    assert budget.admitted("c") is None
    budget.release("a")
    budget.admit("c", stream_cost(640, 360, frames_held=10))
    # Re-admitting at a size that does not fit keeps what was admitted before.
    with pytest.raises(BudgetError):
        budget.admit("b", huge)
    assert budget.admitted("b") == small


def test_the_process_itself_and_what_it_kept_count_against_the_budget() -> None:
    small = stream_cost(640, 360, frames_held=10)
    budget = MemoryBudget(small.total * 5 // 2, baseline=small.total)
    budget.admit("a", small)
    with pytest.raises(BudgetError, match=f"the process itself holds {small.total / 2**20:.0f} MB"):
        budget.admit("b", small)
    budget.release("a")
    budget.settle(resident=2 * small.total)  # one stream's worth stayed resident after it left
    assert budget.retained == small.total
    with pytest.raises(BudgetError):
        budget.admit("b", small)
    budget.settle(resident=small.total)  # given back
    budget.admit("b", small)
    budget.settle(resident=None)  # nothing measured: the account stands
    assert budget.held == 2 * small.total
