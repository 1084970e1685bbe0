from __future__ import annotations

from duo.bench.replay import Request, known, replay
from duo.core.policy import CostModel

# Passes of several tokens cost little more than one: drafts that are right pay.
COSTS = CostModel({1: 0.010, 2: 0.012, 17: 0.020, 64: 0.050})
QUOTE = list(range(100, 140))  # a passage the answer quotes


def test_plain_decoding_takes_a_round_per_token() -> None:
    requests = [Request([1, 2, 3], [7, 8, 9], True), Request([4, 5], [6, 6, 6, 6], False)]
    r = replay(requests, COSTS, "plain")
    assert (r.tokens, r.rounds, r.rejected) == (7, 4 + 4, 0)  # a stop is a round's token too
    # The first round of each rides the pass that reads its prompt (all but the last token).
    first = COSTS.cost(2 + 1) + COSTS.cost(1 + 1)
    assert abs(r.seconds - (first + 6 * COSTS.cost(1))) < 1e-9


def test_an_answer_that_quotes_its_prompt_is_copied_and_the_oracle_bounds_the_policy() -> None:
    requests = [Request([1, *QUOTE, 2], [*QUOTE[:30], 3, *QUOTE[30:]], True)]
    plain, adaptive, oracle = (replay(requests, COSTS, p) for p in ("plain", "adaptive", "oracle"))
    assert plain.tokens == adaptive.tokens == oracle.tokens == 41
    assert adaptive.rounds < plain.rounds / 3
    assert oracle.tokens_per_second >= adaptive.tokens_per_second
    assert oracle.rejected == 0


def test_the_suffix_cache_remembers_earlier_requests() -> None:
    # Nothing in the prompt to copy: only the first request's answer, remembered.
    request = Request([1, 2, 3, 4], QUOTE, True)
    once = replay([request], COSTS).rounds
    assert once == len(QUOTE) + 1  # nothing to draft from
    assert replay([request, request], COSTS).rounds < once + once / 3


def test_a_drafter_that_knows_the_answers_bounds_every_policy() -> None:
    requests = [Request([1, *QUOTE, 2], [*QUOTE[:30], 3, *QUOTE[30:]], True)]
    bound = known(requests, COSTS)
    assert bound.tokens == 41
    for policy in ("plain", "adaptive", "oracle"):
        assert bound.seconds < replay(requests, COSTS, policy).seconds
    assert bound.rounds == 1  # 42 tokens and the prompt cost less in one pass than in two


def test_where_a_pass_costs_its_tokens_a_known_answer_is_no_faster() -> None:
    linear = CostModel({1: 0.010, 2: 0.020, 64: 0.640, 256: 2.560})
    requests = [Request([1, 2, 3], [7, 8, 9], True), Request([4, 5], [6, 6, 6, 6], False)]
    plain = replay(requests, linear, "plain")
    assert abs(known(requests, linear).seconds - plain.seconds) < 1e-9
