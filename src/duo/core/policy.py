"""The policy's maths: how much of a ready draft to verify for the most tokens per second.

Verifying a draft of length L costs one main-model pass over L+1 tokens, cost(L+1),
and yields 1 + a1 + a1*a2 + ... + a1*...*aL tokens on average, where ai is the chance
that draft token i is accepted given that the ones before it were. Decoding alone
yields 1 token for cost(1). On hardware where a batch costs barely more than one token
(GPUs, big models, memory-bound CPUs) the best L is the whole draft; where it does not
(small models on compute-bound CPUs), short or unlikely drafts are skipped, so a
drafter never makes the lead slower than the main model alone.

Pure: the cost model, the acceptance estimates, the expected tokens and the best length,
with no I/O and no clock. The choosers built on them, which the engine and the simulator
both drive, are in duo.core.choice; the measured costs come from duo.llama.calibrate.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable
from typing import NamedTuple, Protocol


class CostModel:
    """Seconds per main-model pass by batch size: calibrated, then updated as measured.

    A size's cost is the mean of its timing at start and the passes measured since, until
    there are 1/smoothing of them, then a moving average: a lead verifies drafts of some
    lengths only now and then, and a few seconds of timing at start can be off by a tenth
    (measured on a 2-core CPU: passes of 3 tokens timed at 59 ms cost 65 in the lead),
    so the first passes it runs teach it at once rather than a tenth at a time.

    Sizes between measured ones are interpolated, and a pass never costs less than a
    smaller one: measurements are noisy, and a policy would otherwise pick the draft
    length whose pass happened to be timed fast."""

    def __init__(self, seconds: dict[int, float], smoothing: float = 0.1) -> None:
        if 1 not in seconds:
            raise ValueError("the cost of a single-token pass is required")
        self.seconds = dict(seconds)
        self.smoothing = smoothing
        self._counts = dict.fromkeys(seconds, 1)  # timings behind each size's cost
        # By batch size up to the largest measured ([0] unused): the interpolated costs,
        # and the table a pass costs (never less than a smaller pass).
        self._raw: list[float] = []
        self._table: list[float] = []
        self._known: list[int] = []  # the measured sizes, in order
        self._stale: set[int] = set()  # sizes measured since the table was last asked for

    def cost(self, batch: int) -> float:
        if self._stale:
            self._refresh()
        table = self._table or self._tabulate()
        largest = len(table) - 1
        if batch <= largest:
            return table[batch]
        return table[largest] * batch / largest  # the largest measured per-token cost

    def _tabulate(self) -> list[float]:
        self._known = known = sorted(self.seconds)
        self._raw = [0.0] * (known[-1] + 1)
        for below, above in itertools.pairwise(known):
            self._interpolate(below, above)
        self._raw[known[-1]] = self.seconds[known[-1]]
        self._table = [0.0] * len(self._raw)
        self._clamp(1, settled=known[-1])  # every entry: none was set before
        return self._table

    def _interpolate(self, below: int, above: int) -> None:
        """The costs of the sizes from `below` (measured) up to `above` (measured)."""
        low, high = self.seconds[below], self.seconds[above]
        for batch in range(below, above):
            w = (batch - below) / (above - below)
            self._raw[batch] = low * (1 - w) + high * w

    def _clamp(self, start: int, settled: int) -> None:
        """Make the table monotone from `start` on; past `settled`, stop where an entry
        is unchanged (those above it are then unchanged too)."""
        raw, table = self._raw, self._table
        for batch in range(start, len(table)):
            value = max(raw[batch], table[batch - 1])
            if batch > settled and value == table[batch]:
                return
            table[batch] = value

    def room(self, tokens: int, stretch: float, most: int, reference: int = 0) -> int:
        """How many tokens (at most `most`) a pass of `tokens` can take on while it costs
        at most `stretch` times a pass of `reference` tokens (by default `tokens`)."""
        if stretch == math.inf:
            return most
        limit = stretch * self.cost(max(tokens, reference))
        extra = 0
        while extra < most and self.cost(tokens + extra + 1) <= limit:
            extra += 1
        return extra

    def reset(self, seconds: dict[int, float]) -> None:
        """Start again from these costs (the machine's threads for the model changed)."""
        if 1 not in seconds:
            raise ValueError("the cost of a single-token pass is required")
        self.seconds = dict(seconds)
        self._counts = dict.fromkeys(seconds, 1)
        self._table = []
        self._stale = set()

    def observe(self, batch: int, seconds: float) -> None:
        """A pass of `batch` tokens took `seconds`. Every round measures one, and most
        rounds ask no cost of the table: it catches up when next asked (`_refresh`)."""
        old = self.seconds.get(batch)
        count = self._counts[batch] = self._counts.get(batch, 0) + 1
        weight = max(self.smoothing, 1 / count)
        self.seconds[batch] = seconds if old is None else old + weight * (seconds - old)
        if old is None:
            self._table = []  # a new size: tabulate afresh
        elif self._table:
            self._stale.add(batch)

    def _refresh(self) -> None:
        """Update only what the sizes measured since reach: the two interpolated
        stretches next to each, and the monotone table above them."""
        stale, self._stale = sorted(self._stale), set()
        if not self._table:
            return  # tabulated afresh when asked
        known = self._known
        for batch in stale:
            i = bisect.bisect_left(known, batch)
            below, above = known[max(i - 1, 0)], known[min(i + 1, len(known) - 1)]
            if below < batch:
                self._interpolate(below, batch)
            if above > batch:
                self._interpolate(batch, above)
            else:
                self._raw[batch] = self.seconds[batch]
            self._clamp(below, settled=above)


class Acceptance:
    """Chance that draft position i is accepted given i-1 accepted, with a prior: a fixed
    chance, or a `parent`'s estimate (a source's acceptance over all its grades, which
    also hears every observation), so a grade seen a few times starts from what its source
    is worth rather than from a guess."""

    # Observations by any table so far: an estimate worked out since is still current.
    # (One count for all: a table's estimates depend on its parents', and a round asks
    # for dozens of them between two observations.)
    observed = 0

    def __init__(
        self, prior: float = 0.7, weight: float = 4.0, parent: Acceptance | None = None
    ) -> None:
        self.prior = prior
        self.weight = weight
        self.parent = parent
        self.tested: list[int] = []
        self.accepted: list[int] = []
        self._memo: list[float] = []  # p(0), p(1), ... as of `_as_of`
        self._as_of = -1

    def observe(self, drafted: int, accepted: int, start: int = 0) -> None:
        """Positions start, start + 1, ... of `drafted` were tested; the first `accepted`
        of them were right (`start`: a draft's tail, compared after its round)."""
        if self.parent is not None:
            self.parent.observe(drafted, accepted, start)
        Acceptance.observed += 1
        grow = start + drafted - len(self.tested)
        if grow > 0:
            self.tested += [0] * grow
            self.accepted += [0] * grow
        tested = start + min(drafted, accepted + 1)  # positions after a rejection are untested
        right = start + accepted
        self.tested[start:tested] = [n + 1 for n in self.tested[start:tested]]
        self.accepted[start:right] = [n + 1 for n in self.accepted[start:right]]

    def p(self, i: int) -> float:
        """A policy asks this several times per position per round, and only for the
        first few positions (duo.core.policy.best_length stops early): the estimates are
        worked out in order, as far as asked, and kept until any table hears something,
        rather than every tested position afresh (dozens, for a lookup)."""
        if self._as_of != Acceptance.observed:
            self._memo, self._as_of = [], Acceptance.observed
        memo = self._memo
        while len(memo) <= i:
            memo.append(self._estimate(len(memo)))
        return memo[i]

    def _estimate(self, i: int) -> float:
        """p(i), once p(0), ..., p(i - 1) are in the memo."""
        parent = self.parent
        if i < len(self.tested):
            prior = self.prior if parent is None else parent.p(i)
            return (self.accepted[i] + prior * self.weight) / (self.tested[i] + self.weight)
        if parent is not None:  # untested here
            return parent.p(i)
        # Untested anywhere: as deep as the deepest position tested. Within a streak of
        # agreement the chance of the next token rises, if anything, so a flat prior
        # (below what a copy shows) would keep drafts from ever growing past the positions
        # tried so far, since a position is tried only by a draft that reaches it.
        return self._memo[-1] if self.tested else self.prior


LOCAL = 4.0  # a request's own rounds that weigh as much as all learnt before it


class Doubts(Acceptance):
    """A request's own counts over the shared ones (its parent), which they can lower and
    never raise: an answer that copies nothing soon stops paying for drafts that were
    right elsewhere, while within a copy the streak (StreakAcceptance) already tells the
    rounds apart. (Allowed to raise them too, a request's counts grew its drafts within
    each copy: over the default pair's 30 prompts more n-gram tokens were verified, not
    fewer, 35% right against 45%.)"""

    def _estimate(self, i: int) -> float:
        parent = self.parent
        assert parent is not None
        return min(super()._estimate(i), parent.p(i))


class StreakAcceptance:
    """Acceptance kept apart by whether the last verified draft was accepted whole.

    Agreement comes in streaks: where the main model repeats or copies (code, lists, a
    quoted prompt) the drafter is right for dozens of tokens, elsewhere it is wrong within
    a few. After a draft accepted whole, the next one is far likelier to be accepted than
    the average says, so the policy verifies long drafts during a streak and short ones,
    or none, after a rejection (llama.cpp and HF grow and shrink the draft length on the
    same evidence).
    """

    def __init__(
        self,
        prior: float = 0.7,
        weight: float = 4.0,
        shared: StreakAcceptance | None = None,
        parent: StreakAcceptance | None = None,
    ) -> None:
        """`shared`: learn into its counts, with a streak of one's own that starts where
        the shared one's stands (the policies of several slots for one source: what a
        source's drafts are worth is learnt by all, each slot's streak is its own; counts
        learnt from a recorded trace end in a streak or not), and with counts of one's own
        for each request (`begin`) over them. `parent`: the prior of each table
        (Acceptance)."""
        self.after_whole: Acceptance
        self.after_rejection: Acceptance
        self._shared = shared
        if shared is not None:
            self.begin()
        else:
            whole, rejection = (
                (parent.after_whole, parent.after_rejection) if parent else (None, None)
            )
            self.after_whole = Acceptance(prior, weight, whole)
            self.after_rejection = Acceptance(prior, weight, rejection)
        self.streak: bool = shared.streak if shared is not None else False

    def begin(self) -> None:
        """A request starts: its own counts start afresh, over the shared ones (which
        hear them too). What a source's drafts are worth depends on the text: a lookup
        whose matches are right half the time over every request so far is wrong every
        time in an answer that copies nothing, and verifying it there costs each round
        a batch (measured on the default pair: one answer verified 20 n-gram drafts, 4 of
        their 76 tokens right, at estimates that stayed near 0.5; most were 3 tokens in a
        pass of 13.3 ms against about 8 for one token). LOCAL rounds of the request's own
        weigh as much as everything learnt before it, and can only lower it (Doubts)."""
        if self._shared is None:
            return  # the counts are this policy's own: no request's apart
        whole, rejection = self._shared.after_whole, self._shared.after_rejection
        self.after_whole = Doubts(weight=LOCAL, parent=whole)
        self.after_rejection = Doubts(weight=LOCAL, parent=rejection)

    def observe(self, drafted: int, accepted: int) -> None:
        if not drafted:
            return
        self.current.observe(drafted, accepted)
        self.streak = accepted == drafted

    def p(self, i: int) -> float:
        return self.current.p(i)

    @property
    def current(self) -> Acceptance:
        return self.after_whole if self.streak else self.after_rejection


class AcceptanceModel(Protocol):
    def observe(self, drafted: int, accepted: int) -> None: ...

    def p(self, i: int) -> float: ...


def expected_tokens(n: int, p: Callable[[int], float]) -> float:
    """Tokens a round verifying n draft tokens yields on average: 1 + a1 + a1*a2 + ..."""
    expected = survive = 1.0
    for i in range(n):
        survive *= p(i)
        expected += survive
    return expected


class Base(NamedTuple):
    """What the rest of a pass holds when one generation chooses its draft (several
    generations share one pass): the tokens the others yield, by their estimates, the
    tokens they evaluate, and the prompt tokens the pass reads beside them."""

    expected: float
    tokens: int
    prompt: int = 0

    def cost(self, cost: Callable[[int], float], tokens: int) -> float:
        """What the pass costs the generations when they evaluate `tokens` more. A
        prompt is read in it anyway: they pay a pass of their own tokens alone plus what
        those add to the prompt's pass, not a share of the prompt (beside a long prompt,
        any draft would look cheap and be verified, however little it yields).

        What they add is never taken for less than the pass's tokens cost on average. The
        table's large sizes are single passes measured with prompts of all lengths, and a
        table never falls, so a stretch of it can be flat where each token costs as much
        as the others (7 ms on a 2-core CPU): a draft there looked free, and a lead's
        first round verified drafts right a fifth of the time beside every prompt."""
        tokens += self.tokens
        if not self.prompt:
            return cost(tokens)
        added = cost(self.prompt + tokens) - cost(self.prompt + 1)
        average = cost(self.prompt + 1) / (self.prompt + 1)
        return cost(1) + max(added, (tokens - 1) * average)


ALONE = Base(0.0, 0)  # a pass of one generation


def best_length(
    available: int,
    cost: Callable[[int], float],
    p: Callable[[int], float],
    base: Base = ALONE,
) -> int:
    """The draft length in [0, available] with the most expected tokens per second, in a
    pass that also holds `base`.

    The lengths are tried in order, and the search stops once no longer one can win:
    each position past n adds at most the chance of reaching n (chances are at most 1),
    and a longer pass costs at least as much as one token more (costs never fall). With
    a lookup's drafts, mostly long and mostly wrong, that is after a position or two."""
    best, best_rate = 0, (base.expected + 1.0) / base.cost(cost, 1)
    expected = survive = 1.0
    longer = base.cost(cost, 2)  # the pass of n + 1 tokens, then of n + 2
    for n in range(1, available + 1):
        survive *= p(n - 1)
        expected += survive
        spend, longer = longer, base.cost(cost, n + 2) if n < available else math.inf
        rate = (base.expected + expected) / spend
        if rate > best_rate:
            best, best_rate = n, rate
        elif base.expected + expected + survive * (available - n) <= best_rate * longer:
            break
    return best
