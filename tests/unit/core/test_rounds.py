from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, cast

import pytest

from duo.core.choice import Choice, Longest
from duo.core.draft import Proposal
from duo.core.policy import ALONE, Base
from duo.core.prompt import prefill
from duo.core.rounds import AFTER, NoDrafts
from duo.core.stats import Stats
from duo.drafting.sources import SyncDrafts, ThreadDrafts
from duo.errors import PromptTooLong, UsageError
from duo.llama.backend import Model
from tests.unit.fakes import FakeModel, corrupted, generate, reference, table_model

PROMPTS = [[1], [3, 4, 5], [2, 2, 2, 2, 9, 1]]


def run(
    main: FakeModel, prompt: list[int], n: int, drafts: Any = None, k: int = 4
) -> tuple[list[int], Stats]:
    model = cast(Model, main)
    stats = Stats()
    out: list[int] = []
    for r in generate(
        model, prompt, max_tokens=n, drafts=drafts, draft_max=k, on_prefill=stats.add_prefill
    ):
        stats.add(r)
        out.extend(r.tokens)
    return out, stats


@pytest.mark.parametrize("prompt", PROMPTS)
def test_target_mode_is_the_main_model(prompt: list[int]) -> None:
    table = table_model(1)
    out, stats = run(FakeModel(table), prompt, 40)
    assert out == reference(table, prompt, 40)
    assert stats.rounds == 40 and stats.drafted == 0


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_sync_speculation_is_lossless(prompt: list[int], k: int) -> None:
    table = table_model(2)
    draft = FakeModel(corrupted(table, 0.3, seed=3))
    out, stats = run(FakeModel(table), prompt, 60, SyncDrafts(cast(Model, draft)).source(0), k)
    assert out == reference(table, prompt, 60)
    assert stats.accepted > 0
    assert stats.rounds < 60  # speculation saved rounds


def test_perfect_drafter_accepts_everything() -> None:
    table = table_model(4)
    out, stats = run(
        FakeModel(table), [1, 2], 50, SyncDrafts(cast(Model, FakeModel(table))).source(0), 4
    )
    assert out == reference(table, [1, 2], 50)
    assert stats.acceptance_rate == 1.0
    assert stats.mean_acceptance_length == 5.0


class Scripted(NoDrafts):
    """Proposes, round by round: the main model's next k tokens ("right"), its next token
    followed by a wrong one ("wrong"), or nothing ("none")."""

    def __init__(self, table: dict[tuple[int, int], int], script: list[str], k: int = 2) -> None:
        self.table, self.script, self.k = table, iter(script), k

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        what = next(self.script, "none")
        if what == "none":
            return []
        right = reference(self.table, committed, self.k)
        tokens = right if what == "right" else [right[0], right[1] % 15 + 1]
        return [Proposal("scripted", tuple(tokens))]


def test_each_round_knows_what_the_round_before_did_and_whether_a_draft_was_ready() -> None:
    table = table_model(9)
    script = ["right", "wrong", "none", "right", "none"]
    out, stats = run(FakeModel(table), [1, 2], 10, Scripted(table, script))
    assert out == reference(table, [1, 2], 10)
    # right (3 tokens), wrong (2), none (1), right (3), then the 10th token: a round with
    # no room for a draft, which no readiness counts
    assert stats.trace == [(2, 2), (2, 1), (0, 0), (2, 2), (0, 0)]
    counts = {after: stats.readiness(after) for after in AFTER}
    assert {after: (c.rounds, c.ready) for after, c in counts.items()} == {
        "no draft": (2, 2),  # the first round, and the one after "none"
        "acceptance": (1, 1),
        "rejection": (1, 0),
    }
    assert counts["rejection"].fraction == 0.0 and counts["no draft"].fraction == 1.0


class Listening(NoDrafts):
    """Records what it is told to rest."""

    def __init__(self) -> None:
        self.told: list[frozenset[str]] = []

    def rest(self, resting: frozenset[str]) -> None:
        self.told.append(resting)


class Resting(Longest):
    """Rests the "model" source after its 3rd to 5th choices."""

    def __init__(self) -> None:
        self.rounds = 0

    def choose(self, offered: Sequence[Proposal], base: Base = ALONE) -> Choice:
        self.rounds += 1
        self.resting = frozenset({"model"}) if 3 <= self.rounds <= 5 else frozenset()
        return super().choose(offered, base)


def test_the_sources_hear_what_rests_before_the_first_round_and_at_each_change() -> None:
    table = table_model(9)
    sources = Listening()
    policy = Resting()
    rounds = list(generate(FakeModel(table), [1, 2], max_tokens=9, drafts=sources, policy=policy))
    assert len(rounds) == policy.rounds == 9  # a round a token: nothing is proposed
    assert sources.told == [frozenset(), frozenset({"model"}), frozenset()]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_async_speculation_is_lossless(prompt: list[int]) -> None:
    table = table_model(5)
    drafts = ThreadDrafts(cast(Model, FakeModel(corrupted(table, 0.2, seed=6))), max_ahead=6)
    try:
        for _ in range(3):  # the same drafter serves several generations
            out, _ = run(FakeModel(table), prompt, 80, drafts.source(0), 4)
            assert out == reference(table, prompt, 80)
    finally:
        drafts.close()


class GarbageDrafts(NoDrafts):
    """A drafter that proposes anything: wrong, out-of-vocabulary, huge."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        def junk() -> tuple[int, ...]:
            return tuple(self.rng.randrange(0, 16) for _ in range(self.rng.randrange(0, limit + 1)))

        return [Proposal(f"junk{i}", junk(), grade=i) for i in range(self.rng.randrange(0, 4))]


def test_garbage_drafts_change_nothing() -> None:
    table = table_model(7)
    out, _ = run(FakeModel(table), [1, 2, 3], 100, GarbageDrafts(8), 8)
    assert out == reference(table, [1, 2, 3], 100)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_max_tokens_is_exact_even_with_a_bonus(n: int) -> None:
    table = table_model(9)
    out, _ = run(FakeModel(table), [1], n, SyncDrafts(cast(Model, FakeModel(table))).source(0), 8)
    assert out == reference(table, [1], n)


def test_end_of_generation_stops_and_is_not_emitted() -> None:
    table = table_model(10)
    full = reference(table, [1], 50)
    eog = full[10]
    main = FakeModel(table, eog=eog)
    rounds = list(generate(cast(Model, main), [1], max_tokens=50))
    out = [t for r in rounds for t in r.tokens]
    assert out == full[: full.index(eog)]
    assert rounds[-1].finish == "stop"


def test_main_kv_holds_exactly_the_committed_tokens_but_the_last() -> None:
    table = table_model(11)
    main = FakeModel(table)
    prompt = [4, 5]
    drafts = SyncDrafts(cast(Model, FakeModel(corrupted(table, 0.5, seed=1)))).source(0)
    committed = list(prompt)
    for r in generate(cast(Model, main), prompt, max_tokens=30, drafts=drafts, draft_max=4):
        committed.extend(r.tokens)
        assert main.tokens == committed[:-1]


def test_prefill_reuses_the_shared_prefix() -> None:
    main = FakeModel(table_model(12))
    prefill(cast(Model, main), [1, 2, 3, 4, 5])
    p = prefill(cast(Model, main), [1, 2, 3, 9, 9])
    assert p.reused == 3
    assert main.tokens == [1, 2, 3, 9]


def test_prompt_errors() -> None:
    main = cast(Model, FakeModel(table_model(13), n_ctx=8))
    with pytest.raises(UsageError):
        prefill(main, [])
    with pytest.raises(PromptTooLong):
        prefill(main, list(range(1, 9)))
    with pytest.raises(UsageError):
        list(generate(main, [1], max_tokens=0))


def test_context_limit_ends_with_length() -> None:
    table = table_model(14)
    main = FakeModel(table, n_ctx=10)
    rounds = list(generate(cast(Model, main), [1, 2], max_tokens=100))
    assert sum(len(r.tokens) for r in rounds) == 8
    assert rounds[-1].finish == "length"


def test_several_sources_change_nothing_and_are_counted_apart() -> None:
    """Garbage sources next to a useful one, chosen per source by the adaptive policy:
    the output is the main model's, and each source's verified drafts are its own."""
    from duo.core.choice import PerSource
    from duo.core.policy import CostModel
    from duo.drafting.lookup import NgramDrafts
    from duo.drafting.sources import Sources

    table = table_model(3)  # the next token depends on the last two: the output cycles
    prompt = [1, 2, 3]
    policy = PerSource(CostModel({1: 1.0, 9: 1.1}))  # batches nearly free: drafts pay
    drafts = Sources([GarbageDrafts(5), NgramDrafts(2, 4)])
    stats = Stats()
    out: list[int] = []
    for r in generate(
        cast(Model, FakeModel(table)), prompt, max_tokens=200, drafts=drafts, policy=policy
    ):
        stats.add(r)
        out.extend(r.tokens)
    assert out == reference(table, prompt, 200)
    assert set(stats.by_source) <= {"ngram", "junk0", "junk1", "junk2"}
    assert stats.by_source["ngram"].accepted > 50  # the lookup carries the repetition
    assert stats.by_source["ngram"].acceptance_rate > max(
        s.acceptance_rate for name, s in stats.by_source.items() if name != "ngram"
    )
    assert sum(s.drafted for s in stats.by_source.values()) == stats.drafted
