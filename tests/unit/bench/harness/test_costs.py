"""The bench's device profile: rounds spread over a run, summarised (no models)."""

from __future__ import annotations

from pathlib import Path

import pytest

from duo.bench.harness.costs import Profiler
from duo.bench.harness.report import profile_line
from duo.session.config import ModelConfig, SpecConfig


def profiler_with(*rounds: tuple[float, float, float]) -> Profiler:
    """A profiler holding rounds of (main one-token ms, main 3-token ms, draft ms)."""
    p = Profiler(ModelConfig(Path("m.gguf"), Path("d.gguf")), SpecConfig(), 3, context=40)
    for one, three, draft in rounds:
        p.rounds.append(
            {
                "main_ms_by_batch": {1: one, 2: (one + three) / 2, 3: three},
                "draft_ms_by_batch": {1: draft},
                "main_concurrent_slowdown": 1.2,
            }
        )
    return p


def test_no_round_no_profile() -> None:
    assert profiler_with().result() == {}


def test_each_figure_is_the_median_of_the_rounds_and_the_drift_is_their_spread() -> None:
    result = profiler_with((10.0, 30.0, 5.0), (12.0, 33.0, 5.0), (11.0, 90.0, 6.0)).result()
    assert result["main_ms_by_batch"] == {1: 11.0, 2: 22.5, 3: 33.0}
    assert result["draft_ms_by_batch"] == {1: 5.0}
    assert result["main_concurrent_slowdown"] == 1.2
    assert (result["rounds"], result["context_tokens"]) == (3, 40)
    # drift: slowest one-token round over the fastest, per model
    assert result["drift_percent"]["main_ms_1"] == pytest.approx(20.0)
    assert result["drift_percent"]["draft_ms_1"] == pytest.approx(20.0)


def test_the_bench_table_states_the_costs_and_the_drift() -> None:
    line = profile_line(profiler_with((10.0, 30.0, 5.0), (12.5, 30.0, 5.0)).result())
    assert "after 40 tokens of context" in line
    assert "main 11.2 ms (1 token), 30.0 ms (3 tokens), draft 5.0 ms/token" in line
    assert "median of 2 rounds" in line and "drifted 25%" in line
