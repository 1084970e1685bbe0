"""Sampling stays lossless: same seed -> same tokens; and the same distribution."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytest

from duo.core.draft import Proposal
from duo.core.rounds import NoDrafts
from duo.core.sampling import Dist, Greedy, Logits, SamplingParams, adjusted
from duo.drafting.sources import SyncDrafts, ThreadDrafts
from duo.errors import UsageError
from duo.llama.backend import Model
from tests.unit.fakes import FakeModel, corrupted, generate, table_model


def probabilities(
    params: SamplingParams, logits: Logits, history: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(candidate token IDs, their probabilities), most likely first."""
    return Dist(params).filtered(adjusted(logits, history, params))


PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def tokens(main: FakeModel, params: SamplingParams, n: int, drafts: Any = None) -> list[int]:
    out: list[int] = []
    for r in generate(
        cast(Model, main),
        [1, 2],
        max_tokens=n,
        drafts=drafts,
        draft_max=4,
        sampler=params.sampler(),
    ):
        out.extend(r.tokens)
    return out


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.7, seed=1),
        SamplingParams(temperature=1.0, top_k=5, top_p=0.9, min_p=0.1, seed=2),
        SamplingParams(temperature=1.3, top_k=0, top_p=1.0, min_p=0.0, seed=3),
        SamplingParams(temperature=0.8, repeat_penalty=1.3, repeat_last_n=8, seed=4),
    ],
)
def test_same_seed_same_tokens_in_every_mode(params: SamplingParams) -> None:
    table = table_model(30)
    target = tokens(FakeModel(table, soft=True), params, 120)
    drafter = FakeModel(corrupted(table, 0.3, seed=31))
    sync = tokens(
        FakeModel(table, soft=True), params, 120, SyncDrafts(cast(Model, drafter)).source(0)
    )
    async_drafts = ThreadDrafts(cast(Model, FakeModel(table)), max_ahead=6)
    try:
        async_ = tokens(FakeModel(table, soft=True), params, 120, async_drafts.source(0))
    finally:
        async_drafts.close()
    assert sync == target
    assert async_ == target
    assert len(set(target)) > 3  # really sampled, not stuck on one token


class FixedLogits:
    """A main model whose next-token distribution never changes: i.i.d. samples."""

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits.astype(np.float32)
        self.tokens: list[int] = []
        self.n_ctx = 1 << 20
        self.n_vocab = len(logits)

    def decode(self, toks: Sequence[int], *, all_logits: bool = True) -> np.ndarray:
        self.tokens.extend(toks)
        return np.tile(self.logits, (len(toks) if all_logits else 1, 1))

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def reuse_prefix(self, toks: Sequence[int]) -> int:
        self.truncate(0)
        return 0

    def is_eog(self, token: int) -> bool:
        return False


class ProposeAlways(NoDrafts):
    """A drafter that always proposes the same tokens (a strongly biased guess)."""

    def __init__(self, guess: list[int]) -> None:
        self.guess = guess

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        return [Proposal("fixed", tuple(self.guess[:limit]))]


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


CRITICAL_7DF_P001 = 24.32  # chi-square critical value, 7 degrees of freedom, p = 0.001
LOGITS = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, 0.3, 1.2])


def emitted(drafts: Any, n: int = 20000, seed: int = 7) -> np.ndarray:
    main = FixedLogits(LOGITS)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
    out: list[int] = []
    for r in generate(
        cast(Model, main), [0], max_tokens=n, drafts=drafts, draft_max=4, sampler=params.sampler()
    ):
        out.extend(r.tokens)
    return np.bincount(out, minlength=len(LOGITS))


def test_exact_match_verification_keeps_the_target_distribution() -> None:
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum()
    counts = emitted(ProposeAlways([5, 5, 4, 3]))  # drafts far from the target's taste
    assert chi_square(counts, probs) < CRITICAL_7DF_P001


def test_the_chi_square_check_has_power() -> None:
    """Accepting drafts blindly would bias the output; the same check must catch it."""
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum()
    rng = np.random.default_rng(0)
    honest = rng.choice(len(LOGITS), size=20000, p=probs)
    biased = np.where(rng.random(20000) < 0.05, 5, honest)  # 5% of tokens forced to token 5
    assert chi_square(np.bincount(biased, minlength=8), probs) > CRITICAL_7DF_P001


def test_filters_keep_what_llama_cpp_keeps() -> None:
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    ids, probs = probabilities(
        SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0), logits, []
    )
    assert list(ids) == [0, 1, 2]  # 0.5 + 0.2 < 0.8 <= 0.5 + 0.2 + 0.15
    ids, _ = probabilities(
        SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0), logits, []
    )
    assert list(ids) == [0, 1]
    ids, _ = probabilities(
        SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.25), logits, []
    )
    assert list(ids) == [0, 1, 2]  # p >= 0.25 * 0.5
    _, cold = probabilities(
        SamplingParams(temperature=0.1, top_k=0, top_p=1.0, min_p=0.0), logits, []
    )
    assert cold[0] > 0.99
    assert probs.sum() == pytest.approx(1.0)


def test_repeat_penalty_and_greedy() -> None:
    logits = np.array([1.0, 2.0, 1.9, -1.0], dtype=np.float32)
    assert Greedy().sample(logits, [1]) == 1
    assert Greedy(SamplingParams(temperature=0, repeat_penalty=1.2)).sample(logits, [1]) == 2


@pytest.mark.parametrize(
    "bad",
    [
        dict(temperature=-1),
        dict(top_p=0),
        dict(top_p=1.5),
        dict(min_p=2),
        dict(top_k=-1),
        dict(repeat_penalty=0),
    ],
)
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        SamplingParams(**bad).check()  # type: ignore[arg-type]
