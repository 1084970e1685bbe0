"""Whether an in-process drafter earns the cores it takes from the main model.

On one machine a model drafter that runs beside the main model takes some of its cores.
Two ways to share them:

    alone   the main model on every core; free drafters (n-gram lookup, suffix cache)
            only, the model drafter resting
    split   the main model on the cores the drafter leaves; the drafter on its own

Each is worth the tokens per second it yields. Alone, one token per single-token pass,
`1 / alone(1)` (free drafters help both ways alike, so they are left out of the
comparison). Split, verifying a draft of L tokens costs a pass of L + 1 tokens and yields
`1 + a + a^2 + ... + a^L` tokens on average, where `a` is the chance that a draft token is
accepted given the ones before it were; and the drafter must make its L tokens in the
time of a round, at `step` seconds each, so drafts are no longer than what it makes while
the main model verifies the previous one. The policy skips drafts that do not pay, so
split never yields less than the main model alone on its fewer cores.

Pure: costs in, a choice out. The costs are measured on the machine (duo.session.share).
"""

from __future__ import annotations

from dataclasses import dataclass

from duo.core.policy import CostModel

ALONE = "alone"
SPLIT = "split"
MARGIN = 1.1  # a switch needs the other way to be this much better (noise, hysteresis)


def alone_rate(alone: CostModel) -> float:
    """Tokens per second of the main model on every core, one token per pass."""
    return 1.0 / alone.cost(1)


def split_rate(split: CostModel, step: float, acceptance: float, draft_max: int) -> float:
    """Tokens per second of the main model on its share of the cores, verifying the drafts
    of a drafter that makes a token every `step` seconds, at the best draft length."""
    best = 1.0 / split.cost(1)
    expected = 1.0  # 1 + a + ... + a^L
    for length in range(1, draft_max + 1):
        expected += acceptance**length
        round_seconds = split.cost(length + 1)
        if length * step > round_seconds:
            break  # the drafter cannot keep up with rounds this long
        best = max(best, expected / round_seconds)
    return best


@dataclass(frozen=True)
class Estimate:
    """Both ways' expected tokens per second, and which is better by the margin."""

    alone: float
    split: float

    def better(self, current: str) -> str:
        """The way to take from `current`: the other one only if it is clearly better."""
        if current == ALONE:
            return SPLIT if self.split > MARGIN * self.alone else ALONE
        return ALONE if self.alone > MARGIN * self.split else SPLIT


def estimate(
    alone: CostModel, split: CostModel, step: float, acceptance: float, draft_max: int
) -> Estimate:
    return Estimate(alone_rate(alone), split_rate(split, step, acceptance, draft_max))
