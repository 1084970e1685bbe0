"""Acceptance traces: how often the draft model agreed with the main model, as a `duo
bench` sync run recorded it, turned into a match flag for every position of the text: the
agreement the simulator replays (duo.bench.sim.sim, assumption 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from duo.core.policy import Acceptance, StreakAcceptance
from duo.errors import UsageError


@dataclass(frozen=True)
class Trace:
    """Agreement lengths: per round of a sync run with fixed k, how many consecutive draft
    tokens the main model accepted from the round's start (k means "k or more")."""

    lengths: tuple[int, ...]
    k: int

    def __post_init__(self) -> None:
        if self.k <= 0 or any(not 0 <= a <= self.k for a in self.lengths):
            raise UsageError(f"agreement lengths must lie in 0..k (k={self.k})")

    @classmethod
    def from_rounds(cls, rounds: Sequence[Sequence[int]], k: int) -> Trace:
        """From bench (drafted, accepted) pairs. Rounds that drafted nothing (the last token
        of a generation) carry no information; a shorter draft at the end of a generation
        that was accepted whole counts as that many (a lower bound)."""
        return cls(tuple(min(int(a), k) for d, a in rounds if int(d) > 0), k)

    def acceptance(self) -> Acceptance:
        """Chance that draft position i is accepted given the ones before it were."""
        acc = Acceptance()
        for a in self.lengths:
            acc.observe(self.k, a)
        return acc

    def streak_acceptance(self) -> StreakAcceptance:
        """The acceptance the adaptive policy learns, apart after whole and cut drafts."""
        acc = StreakAcceptance()
        for a in self.lengths:
            acc.observe(self.k, a)
        return acc

    def matches(self) -> list[bool]:
        """The match flag of every position of the text (duo.bench.sim.sim, assumption 1)."""
        bonus_rate = self.acceptance().p(self.k - 1)
        flags: list[bool] = []
        credit = 0.0  # error diffusion: the filled flags match at bonus_rate, no randomness
        for a in self.lengths:
            flags += [True] * a
            if a < self.k:
                flags.append(False)  # the main model's correction
            else:
                credit += bonus_rate
                flags.append(credit >= 0.5)
                credit -= flags[-1]
        return flags

    def runs(self) -> list[int]:
        """runs[p] = how many draft tokens from position p the main model would accept."""
        flags = self.matches()
        runs = [0] * (len(flags) + 1)
        for p in range(len(flags) - 1, -1, -1):
            runs[p] = runs[p + 1] + 1 if flags[p] else 0
        return runs[:-1]


def check_k(trace: Trace, k: int) -> None:
    if not 1 <= k <= trace.k:
        raise UsageError(
            f"--k {k}: the trace was recorded with k={trace.k} and tells nothing about "
            f"acceptance past {trace.k} tokens (use 1..{trace.k})"
        )
