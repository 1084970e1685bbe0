"""Several generations in one pass (duo.core.rounds.step): each is what it is alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from duo.core.choice import PerSource
from duo.core.draft import Proposal
from duo.core.policy import CostModel, StreakAcceptance
from duo.core.rounds import Generation, Round, step
from duo.core.sampling import SamplingParams
from duo.drafting.lookup import NgramDrafts
from duo.drafting.sources import Sources, SyncDrafts
from duo.llama.backend import Model
from tests.unit.fakes import FakeBatchModel, FakeModel, corrupted, reference, table_model

PROMPTS = [[1, 2, 3], [4, 4, 4, 4], [9], [5, 6, 5, 6, 5]]


def test_generations_in_one_pass_are_each_the_main_model_alone() -> None:
    """Four generations of different lengths with n-gram lookups and one model drafter
    that drafts for all of them (a sequence each): every output is the main model's,
    passes hold several generations at once, and each generation leaves when its budget
    is spent."""
    table = table_model(7)
    seqs = [FakeModel(table) for _ in PROMPTS]
    main = FakeBatchModel(seqs)
    draft = FakeBatchModel([FakeModel(corrupted(table, 0.2, 1)) for _ in PROMPTS])
    drafter = SyncDrafts(cast(Model, draft), slots=len(PROMPTS))
    costs = CostModel({1: 1.0, 9: 1.2, 36: 2.0})
    gens = []
    for seq, prompt in enumerate(PROMPTS):
        g = Generation(
            seqs[seq],
            prompt,
            max_tokens=20 + 10 * seq,
            drafts=Sources([NgramDrafts(2, 4), drafter.source(seq)]),
            policy=PerSource(costs),
        )
        g.start()
        gens.append((seq, g))
    out: dict[int, list[int]] = {seq: [] for seq in range(len(PROMPTS))}
    sources: dict[int, set[str | None]] = {seq: set() for seq in range(len(PROMPTS))}
    while gens:
        results = step(main, gens)
        for (seq, _), r in zip(gens, results, strict=True):
            assert isinstance(r, Round)
            out[seq].extend(r.tokens)
            sources[seq].add(r.source)
        for _, g in [x for x in gens if x[1].finish]:
            g.end()
        gens = [x for x in gens if not x[1].finish]
    for seq, prompt in enumerate(PROMPTS):
        assert out[seq] == reference(table, prompt, 20 + 10 * seq)
    assert max(len(p) for p in main.passes) == len(PROMPTS)
    assert all("model" in used for used in sources.values())  # drafted for every one
    assert "ngram" in set().union(*sources.values())


class Failing:
    def sample(self, logits: np.ndarray, history: Sequence[int]) -> int:
        raise RuntimeError("broken sampler")


def test_one_generation_failing_leaves_the_others_alone() -> None:
    table = table_model(2)
    seqs = [FakeModel(table) for _ in range(2)]
    main = FakeBatchModel(seqs)
    good = Generation(seqs[0], [1, 2], max_tokens=12)
    bad = Generation(seqs[1], [3, 4], max_tokens=12, sampler=Failing())
    good.start()
    bad.start()
    first = step(main, [(0, good), (1, bad)])
    assert isinstance(first[0], Round) and isinstance(first[1], RuntimeError)
    out = list(first[0].tokens)
    while not good.finish:
        [r] = step(main, [(0, good)])
        assert isinstance(r, Round)
        out.extend(r.tokens)
    assert out == reference(table, [1, 2], 12)


def test_a_full_batch_makes_drafts_worth_less() -> None:
    """On hardware where a pass's cost grows with its tokens, a draft the policy verifies
    alone is skipped when the pass already holds many tokens of other generations."""
    costs = CostModel({1: 1.0, 2: 1.05, 5: 1.2, 9: 1.5, 32: 4.0, 40: 6.0})
    from duo.core.draft import Proposal
    from duo.core.policy import ALONE, Base

    offered = [Proposal("ngram", (1, 2, 3, 4), 2)]
    alone = PerSource(costs).choose(offered, ALONE)
    crowded = PerSource(costs).choose(offered, Base(31.0, 31))
    assert alone.n > 0 and crowded.n < alone.n


def test_seeded_sampling_is_per_generation() -> None:
    """Each generation draws from its own random stream: side by side or alone, the same."""
    table = table_model(4)
    params = SamplingParams(temperature=1.0, seed=11, top_k=0, top_p=1.0, min_p=0.0)

    def alone(prompt: list[int]) -> list[int]:
        m = FakeModel(table, soft=True)
        g = Generation(m, prompt, max_tokens=15, sampler=params.sampler())
        g.start()
        out = []
        while not g.finish:
            out.extend(g.settle(m.decode(g.plan()), 0.0, 1).tokens)
        return out

    seqs = [FakeModel(table, soft=True) for _ in range(2)]
    main = FakeBatchModel(seqs)
    gens = [
        (i, Generation(seqs[i], p, max_tokens=15, sampler=params.sampler()))
        for i, p in enumerate(([1, 2], [3, 3]))
    ]
    outs: list[list[int]] = [[], []]
    for _, g in gens:
        g.start()
    while any(not g.finish for _, g in gens):
        live = [(i, g) for i, g in gens if not g.finish]
        for (i, _), r in zip(live, step(main, live), strict=True):
            assert isinstance(r, Round)
            outs[i].extend(r.tokens)
    assert outs == [alone([1, 2]), alone([3, 3])]


def test_a_prompt_fed_in_pieces_alongside_a_running_generation() -> None:
    """A new generation's prompt rides along, a few tokens a pass, with another's rounds:
    both outputs are the main model's, and the newcomer's first round rides in the pass
    that reads the end of its prompt."""
    table = table_model(5)
    seqs = [FakeModel(table) for _ in range(2)]
    main = FakeBatchModel(seqs)
    first = Generation(seqs[0], [1, 2, 3], max_tokens=30)
    first.start()
    prompt = [4, 5, 6, 7, 8, 9, 10, 11]
    second = Generation(seqs[1], prompt, max_tokens=12)
    reused, missing = second.begin()
    assert (reused, list(missing)) == (0, prompt[:-1])
    pending = list(missing)
    out: dict[int, list[int]] = {0: [], 1: []}
    joined = False  # the newcomer's first round was in the pass of its last piece
    while not (first.finish and second.finish):
        gens = [(0, first)] if not first.finish else []
        piece = pending[:3]
        del pending[:3]
        if not pending and not second.finish:
            gens.append((1, second))
            joined = joined or bool(piece)
        for (seq, _), r in zip(gens, step(main, gens, [(1, piece)] if piece else []), strict=True):
            assert isinstance(r, Round)
            out[seq].extend(r.tokens)
    assert out[0] == reference(table, [1, 2, 3], 30)
    assert out[1] == reference(table, prompt, 12)
    assert joined


def test_every_slot_learns_what_a_source_is_worth() -> None:
    learnt: dict[str, StreakAcceptance] = {}
    costs = CostModel({1: 1.0, 2: 1.6, 9: 3.0})
    first, second = PerSource(costs, learnt=learnt), PerSource(costs, learnt=learnt)
    wrong = Proposal("ngram", (1, 2, 3), grade=3)
    for _ in range(30):  # slot 1 verifies the n-gram's drafts and finds them wrong
        choice = first.choose([wrong])
        first.observe(choice.proposal, choice.n, 0, 1.0, [wrong], (9,), 1 + choice.n)
    assert second.choose([wrong]).n == 0  # slot 2 knows without trying
    # ...and a grade neither has seen starts from what the n-gram source is worth.
    assert second.choose([Proposal("ngram", (1, 2, 3), grade=4)]).n == 0
    assert PerSource(costs).choose([Proposal("ngram", (1, 2, 3), grade=4)]).n > 0


def test_a_draft_is_never_longer_than_the_pass_has_room_for() -> None:
    """A prompt piece that nearly fills the batch, with the round of a generation whose
    lookup offers a long draft: the draft is cut to what is left of n_batch."""
    table = table_model(5)
    seqs = [FakeModel(table) for _ in range(2)]
    main = FakeBatchModel(seqs)
    main.n_batch = 12
    repeats = reference(table, [1, 2, 3], 40)
    running = Generation(
        seqs[0], [1, 2, 3, *repeats], max_tokens=20, drafts=NgramDrafts(2, 4), draft_max=16
    )
    running.start()  # its output repeats its prompt: the lookup drafts 16 tokens
    step(main, [(0, running)], [(1, [4, 5, 6, 7, 8, 9, 10, 11, 12])])
    assert sum(main.passes[-1]) == main.n_batch - 9  # its token and 2 of its draft
