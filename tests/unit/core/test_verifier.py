"""Drafter-driven verification (seed 003's /verify) against a scripted main model."""

from __future__ import annotations

from duo.core.sampling import GREEDY, SamplingParams
from duo.core.verifier import DraftedGeneration

from ..fakes import FakeModel, corrupted, generate, reference, table_model

PROMPT = [1, 2, 3]


def drive(main: FakeModel, gen: DraftedGeneration, drafter: dict, n: int, k: int) -> list[int]:  # type: ignore[type-arg]
    """Seed 003's client: draft k tokens (after the lead's last correction), verify, repeat,
    until n tokens are committed."""
    head: list[int] = []
    while len(gen.tokens) - gen.prompt_len < n:
        draft = list(head)
        while len(draft) < k:
            history = [*gen.tokens, *draft]
            draft.append(drafter[(history[-2], history[-1])])
        checked = gen.check(main, draft)
        assert len(checked.preds) == len(draft) + 1
        assert checked.preds[: checked.accepted] == draft[: checked.accepted]
        assert checked.total == len(gen.tokens)
        head = [checked.preds[checked.accepted]]
    return gen.tokens[gen.prompt_len :][:n]


def test_greedy_commits_what_the_main_model_alone_generates() -> None:
    table = table_model(1)
    main = FakeModel(table)
    gen = DraftedGeneration(PROMPT, GREEDY)
    out = drive(main, gen, corrupted(table, 0.3, 2), 60, 4)
    assert out == reference(table, PROMPT, 60)
    assert 0 < gen.accepted < gen.drafted  # drafts both right and wrong


def test_the_main_models_own_continuation_is_accepted_whole_and_a_wrong_one_not() -> None:
    table = table_model(3)
    main = FakeModel(table)
    right = reference(table, PROMPT, 5)
    gen = DraftedGeneration(PROMPT, GREEDY)
    checked = gen.check(main, right)
    assert checked.accepted == 5
    assert checked.preds == reference(table, PROMPT, 6)
    assert checked.total == len(PROMPT) + 5
    # A wrong first token: nothing accepted, and preds[0] is the main model's next token.
    nxt = reference(table, [*PROMPT, *right], 1)[0]
    wrong = [(nxt + 1) % 16 or 1, 5, 6]
    checked = gen.check(main, wrong)
    assert checked.accepted == 0
    assert checked.preds[0] == nxt
    assert checked.total == len(PROMPT) + 5
    assert main.tokens == [*PROMPT, *right][:-1]  # the KV keeps the committed tokens only


def test_seeded_sampling_commits_what_plain_decoding_draws() -> None:
    """One draw per committed token: a pending draw is kept for the next verification."""
    table = table_model(4)
    params = SamplingParams(temperature=0.9, seed=7)
    rounds = generate(FakeModel(table, soft=True), PROMPT, max_tokens=50, sampler=params.sampler())
    plain = [t for r in rounds for t in r.tokens]
    main = FakeModel(table, soft=True)
    gen = DraftedGeneration(PROMPT, params)
    out = drive(main, gen, table, 50, 3)  # the greedy table: often not what is drawn
    assert out == plain[:50]
    assert gen.accepted < gen.drafted


def test_an_empty_draft_asks_for_the_next_token() -> None:
    table = table_model(5)
    gen = DraftedGeneration(PROMPT, GREEDY)
    checked = gen.check(FakeModel(table), [])
    assert (checked.accepted, checked.preds, checked.total) == (0, reference(table, PROMPT, 1), 3)
    assert gen.pending == checked.preds[0]
