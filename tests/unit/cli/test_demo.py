"""`duo demo`'s table: each mode's speed against the main model alone, its acceptance and
the share of its rounds that verified a draft, for in-process modes and a lead's alike."""

from __future__ import annotations

from duo.bench.harness.report import ModeResult
from duo.cli.demo import reasons, table
from duo.core.rounds import Round
from duo.core.stats import Stats


def test_rounds_that_verified_a_draft_are_counted_and_merged() -> None:
    a, b = Stats(), Stats()
    for drafted in (0, 3, 1):
        a.add(Round((1,), drafted, 0, 0.01, 0.01))
    b.add(Round((1, 2), 2, 1, 0.01, 0.01))
    a.merge(b)
    assert (a.rounds, a.rounds_drafted) == (4, 3)


def mode(name: str, tok_s: float, acceptance: float = 0.0, drafted: float = 0.0) -> ModeResult:
    return ModeResult(
        mode=name,
        tokens_per_second=tok_s,
        tokens_per_second_runs=[tok_s],
        ttft_ms=50.0,
        acceptance_rate=acceptance,
        mean_acceptance_length=1.0,
        accepted_at=[],
        overhead_ms_per_round=0.1,
        drafted_rounds=drafted,
    )


def test_the_table_shows_each_mode_s_drafted_rounds_from_its_counts() -> None:
    modes = [mode("target-all", 80.0), mode("lead+back", 60.0, 0.5, 0.6), mode("default", 88.0)]
    rows = {line.split()[0]: line.split() for line in table(modes).splitlines()[1:]}
    assert rows["lead+back"][2:] == ["0.75x", "0.50", "60%"]  # a lead's, from its timings
    assert rows["default"][2:] == ["1.10x", "-", "0%"]


def test_a_slower_lead_and_back_says_why_and_how_often_its_drafts_were_verified() -> None:
    modes = [mode("target-all", 80.0), mode("default", 88.0), mode("lead+back", 60.0, 0.8, 0.42)]
    (line,) = reasons(modes)
    assert line.startswith("lead+back is 0.75x") and "42% of the rounds" in line
    assert "docs/placement.md" in line
    assert reasons([mode("target-all", 80.0), mode("default", 88.0), mode("lead+back", 90.0)]) == []
