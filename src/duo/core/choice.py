"""Which proposal a round verifies when several draft sources propose at once.

Classic speculative decoding verifies the longest proposal whole (`Longest`). The adaptive
choice (`PerSource`) runs duo.core.policy's AdaptivePolicy once per source and grade and
verifies the proposal with the most expected tokens per second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from duo.core.draft import Proposal, common_prefix
from duo.core.policy import AdaptivePolicy, CostModel, expected_tokens


class Chooser(Protocol):
    """Which proposal a round verifies, and how much of it."""

    @property
    def resting(self) -> frozenset[str]:
        """Keys of the sources that should rest (stop drafting) for now."""
        ...

    def choose(self, offered: Sequence[Proposal]) -> tuple[Proposal | None, int]: ...

    def observe(
        self,
        chosen: Proposal | None,
        drafted: int,
        accepted: int,
        seconds: float,
        offered: Sequence[Proposal],
        emitted: Sequence[int],
    ) -> None:
        """The round verified `drafted` tokens of `chosen` in `seconds`, accepted
        `accepted`, and emitted `emitted` (accepted + the main model's own token)."""


class Longest:
    """Classic speculative decoding: verify the longest proposal whole."""

    resting: frozenset[str] = frozenset()

    def choose(self, offered: Sequence[Proposal]) -> tuple[Proposal | None, int]:
        best = max(offered, key=lambda p: len(p.tokens), default=None)
        return best, len(best.tokens) if best else 0

    def observe(
        self,
        chosen: Proposal | None,
        drafted: int,
        accepted: int,
        seconds: float,
        offered: Sequence[Proposal],
        emitted: Sequence[int],
    ) -> None:
        pass


class PerSource:
    """The adaptive policy per source: each round verifies the proposal with the most
    expected tokens per second, from acceptance learnt per source and grade.

    Every source (a model drafter, each back, n-gram lookup, the suffix cache) has an
    AdaptivePolicy of its own over one shared cost model. Each proposal gets its best
    length and expected rate from its source's estimates; the best rate is verified. The
    proposals not verified are compared with the emitted tokens for free, so every source
    keeps learning; a source whose proposals are never the best counts declined rounds,
    and a drafter that can rest does (it stops slowing the main model on a shared machine).
    """

    def __init__(
        self, costs: CostModel, make: Callable[[CostModel], AdaptivePolicy] = AdaptivePolicy
    ) -> None:
        self.costs = costs
        self.make = make
        self.policies: dict[str, AdaptivePolicy] = {}

    def policy(self, key: str) -> AdaptivePolicy:
        if key not in self.policies:
            self.policies[key] = self.make(self.costs)
        return self.policies[key]

    @property
    def resting(self) -> frozenset[str]:
        return frozenset(k for k, p in self.policies.items() if not p.wants_drafts)

    def choose(self, offered: Sequence[Proposal]) -> tuple[Proposal | None, int]:
        picks: list[tuple[float, Proposal, int]] = []
        for proposal in offered:
            policy = self.policy(proposal.key)
            n = policy.choose(len(proposal.tokens))
            if n:
                rate = expected_tokens(n, policy.acceptance.p) / self.costs.cost(n + 1)
                picks.append((rate, proposal, n))
        keys = {p.key for p in offered}
        for key, policy in self.policies.items():
            if key not in keys:
                policy.choose(0)  # nothing ready from this source
        if not picks:
            return None, 0
        _, best, n = max(picks, key=lambda pick: pick[0])
        for _, proposal, _ in picks:
            if proposal is not best:
                self.policy(proposal.key).decline()
        return best, n

    def observe(
        self,
        chosen: Proposal | None,
        drafted: int,
        accepted: int,
        seconds: float,
        offered: Sequence[Proposal],
        emitted: Sequence[int],
    ) -> None:
        if chosen is None:
            self.costs.observe(1, seconds)
        seen = set()
        for proposal in offered:
            policy = self.policy(proposal.key)
            seen.add(proposal.key)
            if proposal is chosen:
                rest = proposal.tokens[drafted:]
                policy.observe(drafted, accepted, seconds, rest[0] == emitted[-1] if rest else None)
            else:
                agreed = common_prefix(proposal.tokens, emitted)
                policy.observe_free(min(agreed + 1, len(proposal.tokens), len(emitted)), agreed)
        for key, policy in self.policies.items():
            if key not in seen:
                policy.observe_free(0, 0)
