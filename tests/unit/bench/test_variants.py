"""The facts about the bench's modes, kept in one table (duo.bench.variants.MODE_FACTS)."""

from __future__ import annotations

import pytest

from duo.bench.harness.modes import RUNNERS
from duo.bench.sim.profiles import SEEDS
from duo.bench.sim.sim import simulate
from duo.bench.sim.trace import Trace
from duo.bench.variants import FANOUT_MODES, LINK_MODES, MODE_FACTS, SIM_MODES, variants


def test_every_mode_with_facts_is_one_the_bench_runs() -> None:
    assert set(MODE_FACTS) <= set(RUNNERS)


@pytest.mark.parametrize("mode", SIM_MODES)
def test_the_simulator_projects_every_mode_said_to_be_simulated(mode: str) -> None:
    trace = Trace((4, 2, 0, 4) * 8, k=4)
    profile = SEEDS[0].profile
    assert simulate(mode, trace, profile, k=4, max_ahead=8).tokens_per_second > 0


def test_variants_follow_the_facts() -> None:
    out = variants(["target-1", "async", "lead+back"], [0, 2], [0, 20])
    assert "target-1" in out  # neither a drafter to fan out nor one across a link
    assert {"async:f0", "async:f2"} <= set(out) and "async@20ms" not in out
    assert {"lead+back:f0@0ms", "lead+back:f2@20ms"} <= set(out)
    assert "async" in FANOUT_MODES and "lead+back" in LINK_MODES
