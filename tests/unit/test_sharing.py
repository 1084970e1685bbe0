"""The choice between the main model alone on every core and beside an in-process drafter:
the estimate from measured costs, and the online switch (with fake models)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from duo.core.policy import CostModel, StreakAcceptance
from duo.core.sharing import ALONE, MARGIN, SPLIT, Estimate, estimate, split_rate
from duo.session import share
from duo.session.share import FIRST_LOOK, WINDOW, CoreShare


def costs(single: float, eight_to_one: float) -> dict[int, float]:
    """A pass's cost by batch size, growing linearly to `eight_to_one` times one token's."""
    return {n: single * (1 + (eight_to_one - 1) * (n - 1) / 7) for n in range(1, 18)}


# This project's 2-core CPU, Qwen2.5-Coder 1.5B main and 0.5B draft (llama-bench): 162 ms
# a token on one thread (about 90 on two), a batch of 8 4.1x that; the drafter 81 ms.
CPU_ALONE, CPU_SPLIT, CPU_STEP = costs(0.090, 4.1), costs(0.162, 4.1), 0.081
# A memory-bound machine (a big main model): a batch of 8 costs 1.2x one token, the main
# model on 3 cores of 4 is 25% slower, and the drafter is 8x cheaper.
BOUND_ALONE, BOUND_SPLIT, BOUND_STEP = costs(0.040, 1.2), costs(0.050, 1.2), 0.005


def test_a_drafter_that_costs_half_its_main_model_never_pays_on_a_compute_bound_cpu() -> None:
    for acceptance in (0.5, 0.7, 0.9, 0.99):
        e = estimate(CostModel(CPU_ALONE), CostModel(CPU_SPLIT), CPU_STEP, acceptance, 8)
        assert e.better(ALONE) == ALONE
        assert e.split < e.alone or acceptance > 0.9  # a near-perfect drafter: about even


def test_a_cheap_drafter_pays_where_a_batch_costs_about_one_token() -> None:
    e = estimate(CostModel(BOUND_ALONE), CostModel(BOUND_SPLIT), BOUND_STEP, 0.7, 8)
    assert e.better(ALONE) == SPLIT
    assert e.split > 2 * e.alone
    # ... and not once its drafts are mostly wrong
    e = estimate(CostModel(BOUND_ALONE), CostModel(BOUND_SPLIT), BOUND_STEP, 0.05, 8)
    assert e.better(SPLIT) == ALONE


def test_drafts_are_no_longer_than_the_drafter_makes_in_a_round() -> None:
    flat = CostModel({1: 0.01, 17: 0.01})  # any batch costs one token's time
    # A drafter as fast as the main model can make one token per round: at most 2 tokens.
    assert split_rate(flat, 0.01, 1.0, 8) == pytest.approx(2 / 0.01)
    assert split_rate(flat, 0.001, 1.0, 8) == pytest.approx(9 / 0.01)  # all 8 in time
    # A useless drafter leaves the main model alone on its share of the cores.
    assert split_rate(flat, 0.001, 0.0, 8) == pytest.approx(1 / 0.01)


def test_a_switch_needs_the_other_way_to_be_clearly_better() -> None:
    close = Estimate(alone=100.0, split=100.0 * MARGIN * 0.99)
    assert close.better(ALONE) == ALONE and close.better(SPLIT) == SPLIT
    clear = Estimate(alone=100.0, split=100.0 * MARGIN * 1.01)
    assert clear.better(ALONE) == SPLIT and clear.better(SPLIT) == SPLIT


class FakeModel:
    def __init__(self, threads: int) -> None:
        self.n_threads = threads
        self.path = Path("fake.gguf")

    def set_threads(self, n: int) -> None:
        self.n_threads = n


class FakeWorker:
    held: bool | None = None
    guess_seconds: float | None = None

    def hold(self, held: bool) -> None:
        self.held = held


def make_share(
    monkeypatch: pytest.MonkeyPatch,
    alone: dict[int, float],
    split: dict[int, float],
    step: float,
) -> tuple[CoreShare, FakeModel, FakeWorker, dict[str, StreakAcceptance]]:
    by_threads = {4: alone, 3: split, 1: {1: step}}
    monkeypatch.setattr(share, "_timed", lambda model, threads, *_a, **_k: by_threads[threads])
    main, draft, worker = FakeModel(3), FakeModel(1), FakeWorker()
    learnt: dict[str, StreakAcceptance] = {}
    s = CoreShare(main, draft, split=3, alone=4, draft_max=8, learnt=learnt)  # type: ignore[arg-type]
    s.start(worker)  # type: ignore[arg-type]
    return s, main, worker, learnt


def drafted(learnt: dict[str, StreakAcceptance], rounds: int, accepted: int, of: int) -> None:
    acceptance = learnt.setdefault("model", StreakAcceptance())
    for _ in range(rounds):
        acceptance.observe(of, accepted)


def test_on_a_compute_bound_cpu_the_drafter_rests_and_is_never_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, main, worker, _ = make_share(monkeypatch, CPU_ALONE, CPU_SPLIT, CPU_STEP)
    assert (s.state, main.n_threads, worker.held) == (ALONE, 4, True)
    for _ in range(200 * FIRST_LOOK):
        s.observe(WINDOW // 4)
    assert (s.state, s.switches) == (ALONE, 0)  # even a perfect drafter could not pay


def test_a_cheap_drafter_drafts_until_its_drafts_prove_wrong_then_rests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, main, worker, learnt = make_share(monkeypatch, BOUND_ALONE, BOUND_SPLIT, BOUND_STEP)
    assert (s.state, main.n_threads, worker.held) == (SPLIT, 3, False)
    s.costs = CostModel(dict(BOUND_SPLIT))
    drafted(learnt, 200, accepted=0, of=4)  # its drafts are wrong
    s.observe(WINDOW)
    assert (s.state, main.n_threads, worker.held, s.switches) == (ALONE, 4, True, 1)
    assert s.costs.cost(1) == pytest.approx(BOUND_ALONE[1])  # the policy's costs follow
    # Later it gets its cores back for a look, and keeps them once its drafts are right.
    for _ in range(FIRST_LOOK):
        s.observe(WINDOW)
    assert (s.state, main.n_threads, worker.held) == (SPLIT, 3, False)
    drafted(learnt, 400, accepted=4, of=4)
    s.observe(WINDOW)
    assert s.state == SPLIT and s.sharing().expected[SPLIT] > s.sharing().expected[ALONE]


def test_looks_at_a_drafter_that_keeps_failing_come_ever_less_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, _, _, learnt = make_share(monkeypatch, BOUND_ALONE, BOUND_SPLIT, BOUND_STEP)
    drafted(learnt, 500, accepted=0, of=4)
    s.observe(WINDOW)
    looks = []
    for window in range(1, 200):
        before = s.state
        s.observe(WINDOW)
        if before == ALONE and s.state == SPLIT:
            looks.append(window)
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert len(looks) >= 3 and gaps == sorted(gaps) and gaps[-1] > gaps[0]


def test_beside_the_drafter_the_costs_measured_together_decide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Timed alone at start, a drafter looks worth its cores; running together, the two
    models slow each other down, and what the passes and steps then take is what counts."""
    s, main, worker, learnt = make_share(monkeypatch, BOUND_ALONE, BOUND_SPLIT, BOUND_STEP)
    drafted(learnt, 200, accepted=2, of=4)
    s.costs = CostModel(dict(BOUND_SPLIT))
    s.observe(WINDOW)
    assert s.state == SPLIT
    s.costs.reset({n: 2.5 * t for n, t in BOUND_SPLIT.items()})  # passes slowed down
    worker.guess_seconds = 0.1  # and the drafter's steps
    s.observe(WINDOW)
    assert (s.state, main.n_threads, worker.held) == (ALONE, 4, True)
