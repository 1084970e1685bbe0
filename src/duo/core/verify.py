"""Exact-match verification: the rule that makes speculation lossless.

At each draft position the lead samples the main model's own distribution (same sampler,
same random stream as plain decoding) and accepts while the sample equals the draft
token. The first sample that differs is the *correction*; if every draft token matches,
the sample after the last one is the *bonus*. Each emitted token consumes exactly one
sample, so the emitted tokens are exactly what the main model alone would have produced.
For a draft known only by its token IDs this is rejection sampling with a one-hot draft
distribution; greedy decoding is its temperature-0 case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one round: `tokens` = accepted draft prefix + one sampled token."""

    accepted: int
    tokens: tuple[int, ...]


def verify(draft: Sequence[int], sample_at: Callable[[int], int]) -> Verdict:
    """Accept the longest draft prefix the main model agrees with.

    `sample_at(i)` samples the main model's next token given the committed tokens plus
    draft[:i]; it is called for i = 0, 1, ... in order and never past the first
    disagreement, so a stateful sampler consumes one draw per emitted token.
    """
    emitted: list[int] = []
    for i, proposed in enumerate(draft):
        token = sample_at(i)
        emitted.append(token)
        if token != proposed:
            return Verdict(accepted=i, tokens=tuple(emitted))
    emitted.append(sample_at(len(draft)))  # the bonus token
    return Verdict(accepted=len(draft), tokens=tuple(emitted))
