"""The lead's /metrics text: what a finished generation's figures add up to."""

from __future__ import annotations

from duo.channel.endpoint import WireStats
from duo.core.prompt import Prefill
from duo.core.rounds import Round
from duo.core.stats import Stats
from duo.lead.engine.metrics import Metrics
from duo.lead.protocol.openai import timings


def samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if not line.startswith("#")
    }


def test_readiness_and_received_drafts_add_up_across_generations() -> None:
    metrics = Metrics(WireStats(), drafters=lambda: 1, local_drafter=False)
    for _ in range(2):
        s = Stats()
        s.add(Round((1, 2, 3), 2, 2, 0.01, 0.01, source="back:a", after="no draft", ready=True))
        s.add(Round((4, 5), 2, 1, 0.01, 0.01, source="back:a", after="acceptance", ready=True))
        s.add(Round((6,), 0, 0, 0.01, 0.01, after="rejection", ready=False))
        s.add(Round((7,), 0, 0, 0.01, 0.01, after="no draft", ready=None))  # no room
        s.add_received({"back:a": 9, "back:b": 0})
        metrics.add(s, "stop")
    m = samples(metrics.render())
    assert m['duo_source_draft_tokens_total{source="back:a"}'] == 8
    assert m['duo_source_draft_tokens_accepted_total{source="back:a"}'] == 6
    assert m['duo_source_draft_tokens_received_total{source="back:a"}'] == 18
    assert not any('"back:b"' in name for name in m)  # it sent nothing
    assert m['duo_rounds_after_total{after="no_draft"}'] == 2
    assert m['duo_rounds_ready_after_total{after="no_draft"}'] == 2
    assert m['duo_rounds_after_total{after="acceptance"}'] == 2
    assert m['duo_rounds_after_total{after="rejection"}'] == 2
    assert m['duo_rounds_ready_after_total{after="rejection"}'] == 0
    assert m["duo_rounds_total"] == 8


def test_timings_count_the_prompt_tokens_evaluated_and_those_kept_apart() -> None:
    """As llama-server's: prompt_n is what the pass read, cache_n what the slot kept."""
    s, other = Stats(), Stats()
    s.add_prefill(Prefill(prompt_tokens=120, reused=100, seconds=0.05))
    other.add_prefill(Prefill(prompt_tokens=30, reused=0, seconds=0.1))
    s.merge(other)
    t = timings(s)
    assert (t["prompt_n"], t["cache_n"]) == (50, 100)
