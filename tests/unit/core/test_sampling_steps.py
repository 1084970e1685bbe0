"""The sampler's steps beyond top-k/p: logit bias, penalties, a grammar, logprobs.

Each keeps speculation lossless: the same tokens (and the same logprobs) with drafts as
without, because each is a function of the main model's logits and the emitted tokens.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pytest

from duo.core.logprobs import LogprobQueue, TokenLogprob, token_logprob
from duo.core.sampling import Constraint, Dist, Greedy, Logits, SamplingParams, adjusted
from duo.drafting.sources import SyncDrafts, SyncSlot
from duo.errors import GenerationFailed, UsageError
from duo.llama.backend import Model
from tests.unit.core.test_sampling import FixedLogits, ProposeAlways, chi_square
from tests.unit.fakes import FakeModel, corrupted, generate, table_model


def test_logit_bias_then_penalties_as_llama_cpp_computes_them() -> None:
    logits = np.array([1.0, 2.0, -1.0, 0.5, 3.0], dtype=np.float32)
    p = SamplingParams(
        repeat_penalty=2.0,
        repeat_last_n=4,
        frequency_penalty=0.25,
        presence_penalty=0.5,
        logit_bias=((0, 1.0), (2, -0.5)),
    )
    history = [4, 1, 1, 2, 1, 3]  # the window is [1, 2, 1, 3]: token 4 is out of it
    got = adjusted(logits, history, p)
    # bias: [2.0, 2.0, -1.5, 0.5, 3.0]; then per token in the window (count c):
    # 1: 2.0 / 2 - (2 * 0.25 + 0.5) = 0.0; 2: -1.5 * 2 - (0.25 + 0.5) = -3.75;
    # 3: 0.5 / 2 - 0.75 = -0.5
    assert got.tolist() == [2.0, 0.0, -3.75, -0.5, 3.0]
    assert got.dtype == np.float32
    assert logits.tolist() == [1.0, 2.0, -1.0, 0.5, 3.0]  # the input is left alone
    assert adjusted(logits, history, SamplingParams()) is logits  # nothing to do, no copy


def test_bias_and_penalties_steer_greedy() -> None:
    logits = np.array([1.0, 2.0, 1.9, -1.0], dtype=np.float32)
    assert Greedy().sample(logits, [0]) == 1
    assert Greedy(SamplingParams(temperature=0, logit_bias=((1, -100.0),))).sample(logits, []) == 2
    assert Greedy(SamplingParams(temperature=0, logit_bias=((3, 5.0),))).sample(logits, []) == 3
    assert Greedy(SamplingParams(temperature=0, presence_penalty=0.2)).sample(logits, [1]) == 2
    assert Greedy(SamplingParams(temperature=0, frequency_penalty=0.06)).sample(logits, [1]) == 1
    assert Greedy(SamplingParams(temperature=0, frequency_penalty=0.06)).sample(logits, [1, 1]) == 2


class Alternate:
    """A grammar over the fake vocabulary: odd and even tokens take turns, and token 0
    (the end) only after an even number of tokens. Counts the full-vocabulary masks."""

    def __init__(self) -> None:
        self.n = 0
        self.masks = 0

    def _ok(self, token: int) -> bool:
        return self.n % 2 == 0 if token == 0 else token % 2 == self.n % 2

    def allows(self, token: int) -> bool:
        return self._ok(token)

    def mask(self, logits: Logits) -> Logits:
        self.masks += 1
        ok = np.array([self._ok(t) for t in range(logits.shape[0])])
        return np.where(ok, logits, np.float32(-np.inf)).astype(np.float32)

    def accept(self, token: int) -> None:
        assert self._ok(token), "a token the grammar forbids was emitted"
        self.n += 1


def run(
    params: SamplingParams,
    *,
    drafts: Any = None,
    constraint: Constraint | None = None,
    record: list[TokenLogprob] | None = None,
    n: int = 80,
) -> list[int]:
    main = FakeModel(table_model(30), soft=True)
    out: list[int] = []
    sampler = params.sampler(constraint, record)
    for r in generate(
        cast(Model, main), [1, 2], max_tokens=n, drafts=drafts, draft_max=4, sampler=sampler
    ):
        out.extend(r.tokens)
    return out


def drafter() -> SyncSlot:
    return SyncDrafts(cast(Model, FakeModel(corrupted(table_model(30), 0.3, seed=31)))).source(0)


SETTINGS = [
    SamplingParams(temperature=0, logit_bias=((3, 2.0), (5, -100.0))),
    SamplingParams(temperature=0, frequency_penalty=0.7, presence_penalty=0.3),
    SamplingParams(temperature=0.9, seed=5, logit_bias=((7, 1.5),), presence_penalty=0.5),
    SamplingParams(
        temperature=1.1,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        seed=6,
        frequency_penalty=-0.5,
        repeat_penalty=1.2,
        repeat_last_n=16,
    ),
]


@pytest.mark.parametrize("params", SETTINGS)
def test_bias_and_penalties_are_lossless(params: SamplingParams) -> None:
    alone = run(params)
    assert run(params, drafts=drafter()) == alone
    if any(b == -100.0 for _, b in params.logit_bias):
        assert 5 not in alone


@pytest.mark.parametrize("params", [SETTINGS[0], SETTINGS[2], SamplingParams(seed=9)])
def test_a_grammar_holds_and_is_lossless(params: SamplingParams) -> None:
    alone_grammar = Alternate()
    alone = run(params, constraint=alone_grammar)
    grammar = Alternate()
    spec = run(params, drafts=drafter(), constraint=grammar)
    assert spec == alone
    assert [t % 2 for t in alone] == [i % 2 for i in range(len(alone))]
    assert alone != run(params)  # the grammar really changed the output
    # Speculation asks for as many full masks as the main model alone (one per refusal).
    assert grammar.masks == alone_grammar.masks < len(alone)


def test_a_draft_the_grammar_forbids_is_rejected() -> None:
    main = FixedLogits(np.array([0.0, 3.0, 2.0, 1.0], dtype=np.float32))
    grammar = Alternate()
    out = []
    for r in generate(
        cast(Model, main),
        [0],
        max_tokens=12,
        drafts=ProposeAlways([1, 1, 1, 1]),
        draft_max=4,
        sampler=Greedy(constraint=grammar),
    ):
        assert r.accepted <= 1  # 1 then 1 again breaks the alternation
        out.extend(r.tokens)
    assert out == [2, 1] * 6


def test_the_grammar_samples_the_masked_distribution() -> None:
    """A refused pick is redrawn from where the one draw fell in the refused slice: the
    emitted tokens follow the model's distribution renormalised over the allowed tokens."""
    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, 0.3, 1.2, 0.9, 0.1], dtype=np.float32)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3)

    class OddOnly(Alternate):
        def _ok(self, token: int) -> bool:
            return token % 2 == 1

    sampler = Dist(params, OddOnly())
    counts = np.bincount([sampler.sample(logits, []) for _ in range(20000)], minlength=10)
    assert counts[::2].sum() == 0
    odd = np.exp(logits[1::2].astype(np.float64))
    assert chi_square(counts[1::2], odd / odd.sum()) < 18.47  # 4 dof, p = 0.001


def test_a_grammar_that_allows_nothing_fails_the_generation() -> None:
    class Nothing(Alternate):
        def _ok(self, token: int) -> bool:
            return False

    logits = np.zeros(4, dtype=np.float32)
    for sampler in (Greedy(constraint=Nothing()), Dist(SamplingParams(seed=1), Nothing())):
        with pytest.raises(GenerationFailed):
            sampler.sample(logits, [])


def test_logprobs_are_the_main_models_own_and_lossless() -> None:
    params = SamplingParams(temperature=0.9, seed=11, logprobs=3, logit_bias=((4, 3.0),))
    alone: list[TokenLogprob] = []
    tokens = run(params, record=alone)
    spec: list[TokenLogprob] = []
    assert run(params, drafts=drafter(), record=spec) == tokens
    assert spec == alone  # equal floats: the same logits, the same arithmetic
    assert [e.token for e in alone] == tokens
    for e in alone:
        assert len(e.top) == 3
        assert [lp for _, lp in e.top] == sorted((lp for _, lp in e.top), reverse=True)
        assert e.logprob <= e.top[0][1] <= 0
    unrecorded: list[TokenLogprob] = []
    run(SamplingParams(temperature=0.9, seed=11), record=unrecorded)
    assert unrecorded == []  # nothing recorded unless asked for


def test_token_logprob_is_the_log_softmax_of_the_raw_logits() -> None:
    logits = np.array([1.0, 3.0, 3.0, -2.0], dtype=np.float32)
    e = token_logprob(logits, 3, 2)
    z = np.log(np.exp(logits.astype(np.float64)).sum())
    assert e.logprob == pytest.approx(-2.0 - z, abs=1e-6)
    assert [t for t, _ in e.top] == [1, 2]  # ties by ascending ID
    assert token_logprob(logits, 0, 0).top == ()
    assert len(token_logprob(logits, 0, 20).top) == 4


def entry(token: int) -> TokenLogprob:
    return TokenLogprob(token, -1.0, ())


PIECES = {1: b"ab", 2: b"\xe2\x82", 3: b"\xac!", 4: b"", 5: b"cd"}


def test_logprob_entries_go_out_with_their_text() -> None:
    q = LogprobQueue(PIECES.__getitem__)
    q.add([entry(1), entry(2)])
    assert [e.token for e in q.emitted("ab")] == [1]  # token 2 is half a character
    q.add([entry(3), entry(4)])
    assert [e.token for e in q.emitted("€!")] == [2, 3, 4]
    q.add([entry(5)])
    assert q.emitted("") == ()  # held back (it might begin a stop string)
    assert [e.token for e in q.finish("cd", stopped=False)] == [5]


def test_a_stop_string_drops_its_own_tokens() -> None:
    q = LogprobQueue(PIECES.__getitem__)
    q.add([entry(1), entry(5), entry(1)])  # "abcdab", stop string "bcd": text "a"
    assert q.emitted("a") == ()
    assert [e.token for e in q.finish("", stopped=True)] == [1]


def test_bad_logprobs_setting() -> None:
    with pytest.raises(UsageError):
        SamplingParams(logprobs=-1).check()
