"""Replay: recorded answers through the lead's own lookups and policy, on a fixed cost
table, with no model and no clock.

`duo bench` measures the policy on a host whose speed drifts by tens of percent between
runs. A replay measures it exactly, on the same answers every time, so a change to how
drafts are chosen (duo.core.choice) or proposed (duo.drafting.lookup) can be judged in a
second. Each request runs as on a lead with one slot: the prompt is read in one pass with
the first round, then, round by round, the n-gram lookup and the suffix cache (shared by
the requests, in order) propose, the chooser picks, and the main model's tokens are the
recorded answer's. A pass of n tokens costs what the cost table says.

`Oracle` knows the answer: it verifies, each round, the proposal prefix that yields the
most tokens per second. No chooser over the same proposals does better one round at a
time, so it bounds what a better policy could gain over these lookups.
`known` bounds every drafter: one that knows each answer, costs nothing and drafts as
much of it as pays, verified in the passes that cost least in all. `scripts/replay-policy.py`
records a workload's answers with the real main model and prints the replay of the
adaptive policy, the oracle, plain decoding and that bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from duo.core.choice import Choice, Chooser, Longest, PerSource
from duo.core.draft import Proposal, common_prefix
from duo.core.policy import ALONE, Base, CostModel
from duo.core.rounds import Generation
from duo.core.sampling import Logits
from duo.drafting.lookup import NGRAM, SUFFIX, NgramDrafts, SuffixDrafts, SuffixMemory
from duo.drafting.sources import Sources
from duo.session.config import SpecConfig

STOP = -1  # the recorded end of generation, as a token


@dataclass(frozen=True)
class Request:
    prompt: list[int]
    answer: list[int]  # the main model's greedy tokens, without an end-of-generation token
    stopped: bool  # the answer ended with an end-of-generation token (else: max_tokens)


@dataclass(frozen=True)
class Replay:
    tokens: int
    seconds: float
    rounds: int
    rejected: int  # draft tokens verified and not accepted

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


class Recorded:
    """The main model as the decoding loop sees it: the token after each position is the
    recorded one, as a one-column row of "logits" that `Pick` reads."""

    n_ctx = 1 << 30

    def __init__(self) -> None:
        self.kv: list[int] = []
        self.text: list[int] = []  # the request's prompt and answer
        self.at = 0  # tokens committed when the round was planned (for the Oracle)

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> Logits:
        start = len(self.kv)
        self.kv.extend(tokens)
        after = self.text[start + 1 : len(self.kv) + 1]
        rows = np.array([*after, *[STOP] * (len(tokens) - len(after))], dtype=np.float32)
        return rows[:, None] if all_logits else rows[-1:, None]

    def truncate(self, n: int) -> None:
        del self.kv[n:]

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        self.truncate(common_prefix(self.kv, list(tokens)))
        return len(self.kv)

    def is_eog(self, token: int) -> bool:
        return token == STOP


class Pick:
    """The sampler of a Recorded model: the token its row holds."""

    def sample(self, logits: Logits, history: Sequence[int]) -> int:
        return int(logits[0])


class Oracle(Longest):
    """Verifies, each round, the prefix of a proposal that the recorded answer accepts and
    that yields the most tokens per second (or none). It learns nothing (Longest's
    `observe`): it knows."""

    def __init__(self, costs: CostModel, model: Recorded) -> None:
        self.costs = costs
        self.model = model

    def choose(self, offered: Sequence[Proposal], base: Base = ALONE) -> Choice:
        text, at = self.model.text, self.model.at
        best, choice = 1 / base.cost(self.costs.cost, 1), Choice(None, 0, 1.0)
        for p in offered:
            for n in range(1, common_prefix(p.tokens, tuple(text[at : at + len(p.tokens)])) + 1):
                rate = (n + 1) / base.cost(self.costs.cost, n + 1)
                if rate > best:
                    best, choice = rate, Choice(p, n, n + 1.0)
        return choice


class Plain(Oracle):
    """Verifies no draft: the main model alone."""

    def choose(self, offered: Sequence[Proposal], base: Base = ALONE) -> Choice:
        return Choice(None, 0, 1.0)


def adaptive(costs: CostModel, model: Recorded) -> Chooser:
    """The lead's policy (duo.session.session.Session.policy)."""
    return PerSource(costs, frozenset({NGRAM, SUFFIX}))


POLICIES: dict[str, Callable[[CostModel, Recorded], Chooser]] = {
    "adaptive": adaptive,
    "oracle": Oracle,
    "plain": Plain,
}


def replay(
    requests: Sequence[Request],
    costs: CostModel,
    policy: str = "adaptive",
    lookup_max: int = SpecConfig.lookup_max,
    ngram_max: int = 5,
) -> Replay:
    """The requests one after another, as a lead with one slot runs them (its default
    lookups: --spec-ngram-size-m `lookup_max`, --spec-ngram-size-n `ngram_max`); a pass
    of n tokens costs `costs.cost(n)`, which the policy (POLICIES) knows from the start."""
    model, memory, ngrams = Recorded(), SuffixMemory(), NgramDrafts(2, ngram_max)
    chooser = POLICIES[policy](CostModel(dict(costs.seconds)), model)
    tokens = rounds = rejected = 0
    seconds = 0.0
    for request in requests:
        model.text = [*request.prompt, *request.answer]
        drafts = Sources([ngrams, SuffixDrafts(memory)], [lookup_max] * 2)
        g = Generation(
            model,
            request.prompt,
            max_tokens=len(request.answer) + request.stopped,
            drafts=drafts,
            draft_max=lookup_max,
            sampler=Pick(),
            policy=chooser,
        )
        piece = list(g.begin()[1])  # read with the first round, as the lead does
        try:
            while not g.finish:
                model.at = len(g.committed)
                batch = g.plan(Base(0.0, 0, len(piece)))
                if piece:
                    model.decode(piece, all_logits=False)
                n = len(piece) + len(batch)
                cost = costs.cost(n)
                r = g.settle(model.decode(batch), cost, n)
                seconds += cost
                rounds += 1
                rejected += r.drafted - r.accepted
                piece = []
        finally:
            g.end()
        tokens += g.produced
    return Replay(tokens, seconds, rounds, rejected)


def known(requests: Sequence[Request], costs: CostModel, most: int = 128) -> Replay:
    """A drafter that knows every answer and costs nothing: each answer (and its stop)
    verified in the passes of at most `most` tokens that cost least in all, a pass of k
    tokens yielding k of them; the first pass reads the prompt too, as in `replay`."""
    tokens = rounds = 0
    seconds = 0.0
    for request in requests:
        n, prompt = len(request.answer) + request.stopped, len(request.prompt)
        # best[m]: the least seconds, and their passes, that yield the first m tokens
        best = [(0.0, 0)] + [(float("inf"), 0)] * n
        for m in range(1, n + 1):
            for k in range(1, min(m, most) + 1):
                before, passes = best[m - k]
                cost = costs.cost(k + (prompt - 1 if m == k else 0))
                if before + cost < best[m][0]:
                    best[m] = (before + cost, passes + 1)
        seconds += best[n][0]
        rounds += best[n][1]
        tokens += len(request.answer)
    return Replay(tokens, seconds, rounds, 0)
