"""The choice between the main model alone on every core and beside an in-process drafter:
the estimate from measured costs, and the online switch (with fake models)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from duo.core.policy import CostModel
from duo.core.rounds import Round
from duo.core.sharing import ALONE, MARGIN, SPLIT, Estimate, estimate, split_rate
from duo.session import share
from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import _shares_servers_machine
from duo.session.share import FIRST_LOOK, JUDGED, WINDOW, CoreShare


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

    def hold(self, held: bool) -> None:
        self.held = held


def make_share(
    monkeypatch: pytest.MonkeyPatch,
    alone: dict[int, float],
    split: dict[int, float],
    step: float,
) -> tuple[CoreShare, FakeModel, FakeWorker]:
    by_threads = {4: alone, 3: split, 1: {1: step}}
    monkeypatch.setattr(share, "_timed", lambda model, threads, *_a, **_k: by_threads[threads])
    main, draft, worker = FakeModel(3), FakeModel(1), FakeWorker()
    s = CoreShare(main, draft, split=3, alone=4, draft_max=8)  # type: ignore[arg-type]
    s.start(worker)  # type: ignore[arg-type]
    return s, main, worker


def passes(s: CoreShare, tokens: int, seconds: float, source: str | None, n: int) -> None:
    """n passes of one round each, emitting `tokens` tokens in `seconds`."""
    for _ in range(n):
        drafted = tokens - 1 if source else 0
        s.observe([Round(tuple(range(tokens)), drafted, drafted, seconds, seconds, source=source)])


def test_on_a_compute_bound_cpu_the_drafter_rests_and_is_never_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, main, worker = make_share(monkeypatch, CPU_ALONE, CPU_SPLIT, CPU_STEP)
    assert (s.state, main.n_threads, worker.held) == (ALONE, 4, True)
    passes(s, 1, CPU_ALONE[1], None, 200 * FIRST_LOOK * WINDOW)
    assert (s.state, s.switches) == (ALONE, 0)  # even a good drafter could not pay


def test_a_cheap_drafter_drafts_while_its_rounds_beat_the_main_model_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, main, worker = make_share(monkeypatch, BOUND_ALONE, BOUND_SPLIT, BOUND_STEP)
    assert (s.state, main.n_threads, worker.held) == (SPLIT, 3, False)
    # 5 tokens a round from its drafts, in a pass of 6: alone would take 5 passes
    passes(s, 5, BOUND_SPLIT[6], "model", 4 * WINDOW // 5)
    assert (s.state, s.switches) == (SPLIT, 0)
    assert s.sharing().expected[SPLIT] > 2 * s.sharing().expected[ALONE]


def test_a_drafter_whose_rounds_do_not_pay_rests_and_is_looked_at_ever_less_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, main, worker = make_share(monkeypatch, BOUND_ALONE, BOUND_SPLIT, BOUND_STEP)
    s.costs = CostModel(dict(BOUND_SPLIT))
    # Its drafts are wrong: one token a round, in passes of 5 slowed down by the drafter
    passes(s, 1, BOUND_SPLIT[5] * 1.3, "model", WINDOW)
    assert (s.state, main.n_threads, worker.held, s.switches) == (ALONE, 4, True, 1)
    assert s.costs.cost(1) == pytest.approx(BOUND_ALONE[1])  # the policy's costs follow
    assert s.sharing().expected[ALONE] > s.sharing().expected[SPLIT]
    looks, before = [], s.state
    for window in range(400):
        if s.state == SPLIT:  # each look finds the same
            passes(s, 1, BOUND_SPLIT[5] * 1.3, "model", WINDOW)
        else:
            passes(s, 1, BOUND_ALONE[1], None, WINDOW)
        if before == ALONE and s.state == SPLIT:
            looks.append(window)
        before = s.state
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert len(looks) >= 3 and gaps == sorted(gaps) and gaps[-1] > gaps[0]


def test_rounds_without_model_drafts_count_at_the_cost_ratio_of_the_two_ways(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lookup's rounds beside the drafter would run faster alone, by the ratio of the
    two ways' passes: a drafter that is never verified costs that ratio, and rests."""
    s, _, _ = make_share(monkeypatch, BOUND_ALONE, BOUND_SPLIT, BOUND_STEP)
    passes(s, 4, BOUND_SPLIT[4], "ngram", WINDOW // 4 + 1)
    assert s.state == ALONE  # BOUND_SPLIT's passes are 1.25x BOUND_ALONE's
    expected = s.sharing().expected
    assert expected[ALONE] / expected[SPLIT] == pytest.approx(1.25, rel=0.01)


# SmolLM2-135M F16 main and Q3_K_M draft, timed on this project's 2-vCPU host (ms by batch):
# at a typical acceptance a tie, at a good one the drafter would pay.
SMOL_ALONE = {1: 0.0075, 2: 0.0119, 3: 0.0125, 5: 0.0138, 9: 0.0180}
SMOL_SPLIT = {1: 0.0104, 2: 0.0170, 3: 0.0178, 5: 0.0208, 9: 0.0305}


def test_a_drafter_that_might_pay_rests_first_and_gets_a_look_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, main, worker = make_share(monkeypatch, SMOL_ALONE, SMOL_SPLIT, 0.0046)
    assert (s.state, main.n_threads, worker.held) == (ALONE, 4, True)
    passes(s, 1, SMOL_ALONE[1], None, (FIRST_LOOK - 1) * WINDOW)
    assert s.state == ALONE
    passes(s, 1, SMOL_ALONE[1], None, WINDOW)
    assert (s.state, main.n_threads, worker.held) == (SPLIT, 3, False)


def test_a_look_is_judged_soon_after_the_drafter_caught_up_and_by_its_drafts_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The catch-up after a rest (no draft of its own yet) says nothing of what the
    drafter is worth and is not counted; a drafter that still does not pay rests again
    JUDGED tokens after its first verified draft, a quarter of a window."""
    s, main, worker = make_share(monkeypatch, SMOL_ALONE, SMOL_SPLIT, 0.0046)
    passes(s, 1, SMOL_ALONE[1], None, FIRST_LOOK * WINDOW)
    assert s.state == SPLIT
    passes(s, 1, 1.0, None, 20)  # catching up: slow passes without a model draft
    assert s.state == SPLIT
    losing = SMOL_SPLIT[2] * 1.5  # its 2 tokens a round cost more than 2 passes alone
    passes(s, 2, losing, "model", JUDGED // 2 - 1)
    assert s.state == SPLIT
    passes(s, 2, losing, "model", 1)
    assert (s.state, main.n_threads, worker.held) == (ALONE, 4, True)
    expected = s.sharing().expected
    assert expected[SPLIT] == pytest.approx(2 / losing)  # the catch-up left out
    assert expected[ALONE] == pytest.approx(1 / SMOL_ALONE[1], rel=0.01)


def test_a_look_keeps_the_drafter_only_if_it_pays_then_a_margin_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At a look's first judgements (JUDGED tokens, then a whole window) a drafter a
    little slower than the main model alone rests; one that paid at both keeps its cores
    while it stays within the margin."""
    s, _, _ = make_share(monkeypatch, SMOL_ALONE, SMOL_SPLIT, 0.0046)
    alone_two = 2 * SMOL_ALONE[1]  # what alone takes for a round's 2 tokens
    trials = [  # (slower at the first judgement, over the next window) -> rests
        ((1.05, None), True),
        ((0.95, 1.05), True),  # paid over its first 64 tokens by chance, not after
        ((0.95, 0.95), False),
    ]
    for (first, then), rests in trials:
        for _ in range(64):  # resting, until the next look
            passes(s, 1, SMOL_ALONE[1], None, WINDOW)
            if s.state == SPLIT:
                break
        assert s.state == SPLIT
        passes(s, 2, alone_two * first, "model", JUDGED // 2)
        if then is not None:
            assert s.state == SPLIT
            passes(s, 2, alone_two * then, "model", WINDOW // 2)
        assert s.state == (ALONE if rests else SPLIT)
    passes(s, 2, alone_two * 1.05, "model", 4 * WINDOW // 2)  # within the margin: kept
    assert s.state == SPLIT
    passes(s, 2, alone_two * 1.2, "model", WINDOW // 2)  # clearly slower: rests
    assert s.state == ALONE


def test_a_drafter_on_rpc_servers_that_share_the_cores_is_judged_by_both_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No thread moves (split == alone): what the drafter costs the main model shows only
    when both run, timed at start (contended). On a compute-bound CPU, a drafter that
    slows every pass by a third and drafts at nearly the main model's pace rests from the
    start; a cheap one on a memory-bound machine, which slows nothing, drafts."""
    main, draft = FakeModel(1), FakeModel(1)

    def made(costs: dict[int, float], ratio: float, step: float) -> CoreShare:
        monkeypatch.setattr(share, "_timed", lambda model, threads, *_a, **_k: costs)
        monkeypatch.setattr(share, "contended", lambda m, d: (ratio, step))
        s = CoreShare(main, draft, split=1, alone=1, draft_max=8)  # type: ignore[arg-type]
        s.start(FakeWorker())  # type: ignore[arg-type]
        return s

    slow = made(CPU_ALONE, 1.35, CPU_STEP)
    assert (slow.state, slow.lends, main.n_threads) == (ALONE, False, 1)
    assert slow.passes[SPLIT].cost(1) == pytest.approx(1.35 * CPU_ALONE[1])
    assert made(BOUND_ALONE, 1.0, BOUND_STEP).state == SPLIT


def test_a_drafter_on_rpc_servers_shares_the_machine_where_they_are_local() -> None:
    def models(**kw: object) -> ModelConfig:
        return ModelConfig(Path("m"), Path("d"), n_gpu_layers_draft=99, **kw)  # type: ignore[arg-type]

    spec = SpecConfig()
    here = "127.0.0.1:50052"
    assert _shares_servers_machine(models(rpcd=here), spec)  # the main model on this CPU
    assert _shares_servers_machine(models(rpcd=here, rpc=f"{here[:-1]}3", n_gpu_layers=99), spec)
    far = models(rpcd=here, rpc="10.0.0.2:50052", n_gpu_layers=99)
    assert not _shares_servers_machine(far, spec)  # the main model's servers elsewhere
    assert not _shares_servers_machine(models(rpcd="10.0.0.3:50052"), spec)
    assert not _shares_servers_machine(models(), spec)  # no --rpcd
    assert not _shares_servers_machine(models(rpcd=here), SpecConfig(mode="sync"))
