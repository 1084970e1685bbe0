from __future__ import annotations

import itertools

import pytest

from duo.policy import Acceptance, AdaptivePolicy, CostModel, best_length


def test_cheap_batches_verify_the_whole_draft() -> None:
    # A GPU-like cost curve: a batch of 9 costs barely more than one token.
    costs = CostModel({1: 0.010, 9: 0.012})
    assert best_length(8, costs.cost, lambda i: 0.9) == 8


def test_expensive_batches_skip_unlikely_drafts() -> None:
    # A compute-bound CPU: two tokens cost 2.5x one.
    costs = CostModel({1: 0.013, 2: 0.034, 5: 0.040, 9: 0.068})
    assert best_length(8, costs.cost, lambda i: 0.5) == 0
    # ...but a drafter that is nearly always right still pays off.
    assert best_length(4, costs.cost, lambda i: 0.97) == 4


def test_cost_model_interpolates_extrapolates_and_learns() -> None:
    costs = CostModel({1: 1.0, 3: 3.0})
    assert costs.cost(2) == pytest.approx(2.0)
    assert costs.cost(6) == pytest.approx(6.0)
    costs.observe(1, 2.0)
    assert 1.0 < costs.cost(1) < 2.0


def test_acceptance_counts_only_tested_positions() -> None:
    acc = Acceptance(prior=0.5, weight=0.0001)
    acc.observe(drafted=4, accepted=1)  # pos 0 accepted, pos 1 rejected, 2-3 untested
    assert acc.p(0) == pytest.approx(1.0, abs=1e-3)
    assert acc.p(1) == pytest.approx(0.0, abs=1e-3)
    assert acc.p(2) == pytest.approx(0.5)


def test_adaptive_policy_explores_less_while_drafts_do_not_pay() -> None:
    policy = AdaptivePolicy(
        CostModel({1: 0.01, 2: 0.05}), Acceptance(prior=0.1), explore_every=4, explore_max=16
    )
    choices = [policy.choose(3) for _ in range(60)]
    explored = [i for i, c in enumerate(choices) if c == 3]
    assert set(choices) == {0, 3}
    # Intervals 4, then 8, then 16, 16, ...: backing off, capped.
    assert [b - a for a, b in itertools.pairwise(explored)][:3] == [8, 16, 16]
    assert explored[0] == 3
    assert policy.choose(0) == 0


def test_adaptive_policy_uses_drafts_that_pay() -> None:
    policy = AdaptivePolicy(CostModel({1: 0.010, 5: 0.011}), Acceptance(prior=0.9))
    assert [policy.choose(4) for _ in range(10)] == [4] * 10
