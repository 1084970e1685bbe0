"""The policy: which proposal a round verifies, and how much of it (`Chooser`).

The engine asks a Chooser every round, with whatever the draft sources propose (several
at once, or none); the simulator (duo.bench.sim) drives the same choosers with its one
drafter's proposals. Classic speculative decoding verifies the longest proposal whole
(`Longest`). The adaptive choice (`PerSource`) runs an AdaptivePolicy once per source and
grade, on the estimates of duo.core.policy, and verifies the proposal with the most
expected tokens per second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from duo.core.draft import Proposal, common_prefix
from duo.core.policy import (
    ALONE,
    Acceptance,
    AcceptanceModel,
    Base,
    CostModel,
    StreakAcceptance,
    best_length,
    expected_tokens,
)

NONE_RESTING: frozenset[str] = frozenset()


def source_of(key: str) -> str:
    """The source of a proposal's key ("source/grade", or "source": Proposal.key)."""
    return key.partition("/")[0]


class Choice(NamedTuple):
    proposal: Proposal | None
    n: int  # draft tokens of it to verify
    expected: float  # tokens the round yields on average, by the chooser's estimates


class Chooser(Protocol):
    """Which proposal a round verifies, and how much of it."""

    @property
    def resting(self) -> frozenset[str]:
        """Keys of the sources that should rest (stop drafting) for now."""
        ...

    def begin(self) -> None:
        """A request starts (a chooser serves its slot's requests one after another)."""

    def wake(self, source: str) -> None:
        """`source` drafts again after a pause of its own (an in-process drafter given
        its cores back): the rounds it had nothing ready in say nothing of its drafts."""

    def choose(self, offered: Sequence[Proposal], base: Base = ALONE) -> Choice: ...

    def observe(
        self,
        chosen: Proposal | None,
        drafted: int,
        accepted: int,
        seconds: float,
        offered: Sequence[Proposal],
        emitted: Sequence[int],
        batch: int,
    ) -> None:
        """The round verified `drafted` tokens of `chosen`, accepted `accepted`, and
        emitted `emitted` (accepted + the main model's own token), in a pass of `batch`
        tokens that took `seconds`."""


class Longest:
    """Classic speculative decoding: verify the longest proposal whole."""

    resting: frozenset[str] = frozenset()

    def begin(self) -> None:
        pass

    def wake(self, source: str) -> None:
        pass

    def choose(self, offered: Sequence[Proposal], base: Base = ALONE) -> Choice:
        best = max(offered, key=lambda p: len(p.tokens), default=None)
        n = len(best.tokens) if best else 0
        return Choice(best, n, 1.0 + n)  # it knows no better than all accepted

    def observe(
        self,
        chosen: Proposal | None,
        drafted: int,
        accepted: int,
        seconds: float,
        offered: Sequence[Proposal],
        emitted: Sequence[int],
        batch: int,
    ) -> None:
        pass


class AdaptivePolicy:
    """One source's policy: verify the draft prefix with the best expected throughput
    (duo.core.policy.best_length).

    Now and then an offered draft is verified whole anyway, so the acceptance estimates
    stay current even when drafts are usually skipped. Exploring costs a batched pass, so
    while the policy keeps finding drafts not worth verifying it explores half as often
    each time (every `explore_every`-th offer at first, every `explore_max`-th at most),
    and goes back to `explore_every` as soon as drafts pay again (`explore_every=None`:
    never, for sources whose every proposal is compared with the emitted tokens anyway).

    A drafter whose drafts are skipped still costs the main model speed when the two share
    a machine (caches, memory bandwidth). After `rest_after` rounds in a row without a draft
    worth verifying (none ready, or none that pays), the policy asks the drafter to rest
    for a number of rounds (`rest_rounds` at first, twice as many each time it wakes up to
    drafts that still do not pay, up to `rest_max`), then to draft again and be judged
    anew.
    """

    def __init__(
        self,
        costs: CostModel,
        acceptance: AcceptanceModel | None = None,
        explore_every: int | None = 8,
        explore_max: int = 64,
        rest_after: int = 16,
        rest_rounds: int = 32,
        rest_max: int = 256,
    ):
        self.costs = costs
        self.acceptance = acceptance or StreakAcceptance()
        self.explore_every = explore_every
        self.explore_max = max(explore_max, explore_every or 0)
        self._interval = explore_every or 0
        self._until_explore = explore_every or 0
        self.rest_after = rest_after
        self.rest_rounds = rest_rounds
        self.rest_max = max(rest_max, rest_rounds)
        self._declined = 0  # rounds in a row without a draft worth verifying
        self._rest = rest_rounds  # the next rest's length
        self._resting = 0  # rounds of the current rest still to go

    @property
    def wants_drafts(self) -> bool:
        return self._resting == 0

    def choose(self, available: int, base: Base = ALONE) -> int:
        """How many of `available` draft tokens to verify, in a pass that also holds
        `base` for other generations."""
        if available == 0:
            self.decline()
            return 0
        best = best_length(available, self.costs.cost, self.acceptance.p, base)
        if best > 0:
            self._interval = self.explore_every or 0  # drafts pay: keep the estimates fresh
            self._declined, self._rest = 0, self.rest_rounds
        else:
            self.decline()
        if self.explore_every is None:
            return best
        self._until_explore -= 1
        if self._until_explore <= 0:
            if best == 0:  # still not worth it: look again later than last time
                self._interval = min(2 * self._interval, self.explore_max)
            self._until_explore = self._interval
            return available
        return best

    def decline(self) -> None:
        """This round verifies no draft of this policy's (none ready, or none that pays,
        or another source's pays more)."""
        if self._resting:
            return
        self._declined += 1
        if self._declined >= self.rest_after:
            self._declined, self._resting = 0, self._rest
            self._rest = min(2 * self._rest, self.rest_max)

    def wake(self) -> None:
        """Judge the source afresh: no rest, no declined rounds counted, the first rest
        short again."""
        self._declined, self._resting, self._rest = 0, 0, self.rest_rounds

    def observe(self, drafted: int, accepted: int, next_agreed: bool | None = None) -> None:
        """A round verified `drafted` of this source's tokens (the pass's cost is the
        chooser's to record) and accepted `accepted`."""
        if self._resting:
            self._resting -= 1
        if next_agreed is not None and accepted == drafted:
            drafted, accepted = drafted + 1, accepted + next_agreed
        if drafted:
            self.acceptance.observe(drafted, accepted)

    def observe_free(self, drafted: int, accepted: int) -> None:
        """A round that verified another source's draft (or none): this source's own
        proposal, compared with the tokens the round emitted, still shows whether its
        first `drafted` tokens agreed (`accepted` of them did) at no cost."""
        if self._resting:
            self._resting -= 1
        if drafted:
            self.acceptance.observe(drafted, accepted)


class Tail:
    """The rest of a lookup's draft that its round did not verify (it was accepted whole,
    and so was the token after it), compared with the tokens the next rounds emit: what
    the deeper positions would have done. A policy that verifies short drafts tests no
    deep position, and would otherwise keep their estimates from before, however often
    the copies run on (a copy of a file, verified 4 tokens a round). Each round's tail is
    followed to its end, beside the tails of the rounds after it: followed one round each,
    no position past the third after a round's draft was ever tested, and on a code edit
    on a CPU where a pass of 48 tokens costs 0.6x a token each, the policy kept verifying
    2 tokens a round (a replay of the 1.5B pair's code edits: 1.31x the main model alone,
    1.50x with every tail followed, 1.57x for an oracle)."""

    def __init__(self, table: Acceptance, start: int, tokens: Sequence[int]) -> None:
        self.table = table  # the estimates the draft was chosen by
        self.start = start  # the draft position of tokens[0]
        self.tokens = tokens

    def follow(self, emitted: Sequence[int]) -> Tail | None:
        """The next round emitted these: record what they show; None when it is over."""
        agreed = common_prefix(self.tokens, emitted)
        if agreed < min(len(self.tokens), len(emitted)):  # wrong at the next one
            self.table.observe(agreed + 1, agreed, self.start)
            return None
        self.table.observe(agreed, agreed, self.start)
        if agreed == len(self.tokens):
            return None
        self.start, self.tokens = self.start + agreed, self.tokens[agreed:]
        return self


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
        self,
        costs: CostModel,
        always_ready: frozenset[str] = frozenset(),
        learnt: dict[str, StreakAcceptance] | None = None,
        explore_every: int = 8,
    ) -> None:
        self.costs = costs
        # Sources (by name) that propose whenever they have something and never rest (the
        # lookups): every round shows for free whether their proposal's first token was
        # right, which is what a skipped draft can teach, so their policies never verify a
        # whole draft just to explore (a batched pass: on chat prompts, where lookups are
        # mostly wrong, exploring cost a tenth of the speed).
        self.always_ready = always_ready
        # Acceptance counts by source and grade, shared with the other slots' choosers
        # (each slot has its own streaks and rests): four slots learn four times as fast.
        self.learnt = {} if learnt is None else learnt
        self.explore_every = explore_every  # the other sources' (see AdaptivePolicy)
        self.policies: dict[str, AdaptivePolicy] = {}
        self._restful: dict[str, AdaptivePolicy] = {}  # those of sources that can rest
        self._lookups: dict[str, StreakAcceptance] = {}  # the always-ready keys' acceptance
        self._streaks: set[str] = set()  # of those, the keys in a streak after the round
        self._tails: list[Tail] = []  # the unverified rests of lookup drafts
        self._acceptance: dict[str, StreakAcceptance] = {}  # every key's, in this slot

    def begin(self) -> None:
        """A request starts in this slot: every source's acceptance counts its rounds
        apart from the requests before (StreakAcceptance.begin), and the unverified tails
        of the last request's lookup drafts are dropped."""
        for acceptance in self._acceptance.values():
            acceptance.begin()
        self._tails = []

    def policy(self, key: str) -> AdaptivePolicy:
        if key not in self.policies:
            explores = source_of(key) not in self.always_ready
            acceptance = self._acceptance[key] = StreakAcceptance(shared=self._learnt(key))
            every = self.explore_every if explores else None
            policy = self.policies[key] = AdaptivePolicy(self.costs, acceptance, every)
            if explores:
                self._restful[key] = policy
            else:
                self._lookups[key] = acceptance
        return self.policies[key]

    def _learnt(self, key: str) -> StreakAcceptance:
        """The acceptance counts of a source and grade, whose prior is the source's own
        acceptance over all its grades."""
        if key not in self.learnt:
            source = source_of(key)
            parent = None if source == key else self._learnt(source)
            self.learnt[key] = StreakAcceptance(parent=parent)
        return self.learnt[key]

    def wake(self, source: str) -> None:
        for key, policy in self._restful.items():
            if source_of(key) == source:
                policy.wake()

    @property
    def resting(self) -> frozenset[str]:
        if not self._restful:  # only lookups so far: asked every round, so kept cheap
            return NONE_RESTING
        return frozenset(k for k, p in self._restful.items() if not p.wants_drafts)

    def choose(self, offered: Sequence[Proposal], base: Base = ALONE) -> Choice:
        picks: list[tuple[float, Choice]] = []
        for proposal in offered:
            policy = self.policy(proposal.key)
            n = policy.choose(len(proposal.tokens), base)
            if n:
                expected = expected_tokens(n, policy.acceptance.p)
                rate = (base.expected + expected) / base.cost(self.costs.cost, n + 1)
                picks.append((rate, Choice(proposal, n, expected)))
        keys = {p.key for p in offered}
        for key, policy in self._restful.items():
            if key not in keys:
                policy.choose(0)  # nothing ready from this source: a step towards a rest
        if not picks:
            return Choice(None, 0, 1.0)
        _, best = max(picks, key=lambda pick: pick[0])
        for _, choice in picks:
            if choice is not best and choice.proposal is not None:
                self.policy(choice.proposal.key).decline()
        return best

    def observe(
        self,
        chosen: Proposal | None,
        drafted: int,
        accepted: int,
        seconds: float,
        offered: Sequence[Proposal],
        emitted: Sequence[int],
        batch: int,
    ) -> None:
        self.costs.observe(batch, seconds)
        if self._tails:
            self._tails = [t for t in (t.follow(emitted) for t in self._tails) if t is not None]
        if not offered and not self._restful and not self._streaks:
            return  # most rounds of a text that copies nothing: nothing else to learn
        seen = set()
        for proposal in offered:
            policy = self.policy(proposal.key)
            seen.add(proposal.key)
            if proposal is chosen:
                rest = proposal.tokens[drafted:]
                bonus = rest[0] == emitted[-1] if rest else None  # the token after it
                lookup = self._lookups.get(proposal.key)
                if lookup is not None and bonus and accepted == drafted and len(rest) > 1:
                    self._tails.append(Tail(lookup.current, drafted + 1, rest[1:]))
                policy.observe(drafted, accepted, bonus)
            else:
                agreed = common_prefix(proposal.tokens, emitted)
                policy.observe_free(min(agreed + 1, len(proposal.tokens), len(emitted)), agreed)
        for key, policy in self._restful.items():
            if key not in seen:
                policy.observe_free(0, 0)  # a round of its rest
        # A lookup that proposes nothing in a round has lost the text it was copying: its
        # streak ends there, rather than carry over to a match found rounds later. (A
        # model drafter's streak stays: its drafts are only sometimes ready in time.)
        for key in self._streaks - seen:
            self._lookups[key].streak = False
        self._streaks = {key for key in seen if key in self._lookups and self._lookups[key].streak}
