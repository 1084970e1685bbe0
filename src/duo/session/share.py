"""The cores of one machine shared by the main model and an in-process drafter, by cost.

With no placement flags (duo.session.threads), a model drafter that runs beside the main
model on the CPU takes some of its cores. Whether it earns them depends on the machine
and the pair (duo.core.sharing): on a 2-core CPU a drafter half as costly as its main
model never does; on a big machine, or with a main model on a GPU, it can.

At start, the main model's passes are timed on both thread counts and the draft model's
step on its own (a few seconds, cached per model file, machine and thread count in
$DUO_HOME/costs). The drafter drafts beside the main model if, by those costs, it would
pay at a typical acceptance (duo.core.sharing); else it rests, for good if even at a good
acceptance it could not pay. Then:

- Beside the drafter, every pass is weighed against what the main model alone on every
  core would have taken for the same tokens: the passes without a model draft as they
  were, at the single-token cost ratio of the two ways; the tokens of a model draft's
  round one pass each. That is measured, not modelled: the slowdown of two models
  running together, drafts that were not ready, the policy's choices are all in it.
  Every `WINDOW` tokens, if the main model alone would have been clearly faster, the
  drafter rests. A drafter given its cores first catches up with the text (a pass over
  what was generated while it rested), which says nothing of what its drafts are worth:
  the first look at the choice comes `JUDGED` tokens after its first verified draft,
  from those tokens only (or a window after it got its cores, if no draft was verified),
  so that a look at a drafter that still does not pay costs a quarter of a window. A look
  must show that the drafter pays: at its first `TRIALS` judgements (those tokens, then a
  whole window) the drafter rests if alone would have been faster at all. After that it
  keeps its cores until alone is clearly faster (MARGIN). With the margin at the first
  judgement too, a drafter measured up to a tenth slower kept its cores for windows on
  end: on the default pair, 146.9 tok/s beside it against 162.4 alone held for about 800
  tokens, and the bench's repeats over its 30 prompts with a look ran at 139.4 and 134.3
  tok/s, the one without at 148.8. With one judgement without the margin, a drafter that
  passed it by chance over its 64 tokens held for 2,650 (154.8 beside it, 171.8 alone).
- While it rests (held: it decodes nothing, and catches up when released), the main model
  has every core. Now and then, at intervals that double each time a look shows no gain,
  the drafter gets its cores back for a window, if it could pay at a good acceptance.

A switch changes the main model's thread count between two passes, never the numbers:
llama.cpp gives each row of a matrix product to one thread, so the output is the same.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from duo.core.policy import CostModel
from duo.core.rounds import Round
from duo.core.sharing import ALONE, MARGIN, SPLIT, Estimate, estimate
from duo.llama.backend import Model
from duo.llama.calibrate import cached, contended

log = logging.getLogger(__name__)

WINDOW = 256  # tokens emitted between two looks at the choice
JUDGED = 64  # tokens after a drafter's first verified draft before the first look at it
TRIALS = 2  # judgements of a look without the margin: the drafter must pay at each
PRIOR = 0.7  # a drafter's acceptance before it is measured
HOPE = 0.85  # the acceptance a resting drafter must be able to pay at for a look
FIRST_LOOK = 8  # windows before a resting drafter is first given its cores again
LAST_LOOK = 128  # the longest wait, in windows, the waits doubling
SIZES = (1, 2, 3, 5, 9, 17)  # batch sizes timed at start (the rest interpolated)
MODEL = "model"  # the in-process drafter's source name
FIXED = "fixed"  # a Sharing's way when the flags (or no drafter) decide
HOPEFUL = "split_hopeful"  # expected beside a drafter right HOPE of the time


@dataclass(frozen=True)
class Sharing:
    """How the main model and an in-process drafter share the machine now."""

    way: str  # ALONE, SPLIT, or FIXED
    main_threads: int
    draft_threads: int  # the in-process drafter's (0: none)
    # tokens per second each way: measured beside the drafter over its last window, with
    # what the main model alone would have made of it; before that, from the costs timed
    # at start, beside a drafter right PRIOR of the time (SPLIT) and HOPE (HOPEFUL)
    expected: dict[str, float] = field(default_factory=dict)
    switches: int = 0
    measured: bool = False
    lends: bool = True  # a rest gives the main model threads (else: on shared rpc-servers)

    def describe(self) -> str:
        main = f"main model on {self.main_threads} thread{'s' * (self.main_threads > 1)}"
        if not self.draft_threads:
            return main
        if self.way == ALONE:
            drafter = "the draft model resting"
        elif self.lends:
            drafter = f"the draft model on {self.draft_threads}"
        else:
            drafter = "the draft model drafting"
        if not self.lends:
            drafter += " on rpc-servers that share the cores"
        if not self.expected:
            return f"{main}, {drafter}"
        alone, split = self.expected[ALONE], self.expected[SPLIT]
        if self.measured:
            return f"{main}, {drafter} (measured: {alone:.1f} tok/s alone, {split:.1f} beside it)"
        return (
            f"{main}, {drafter} (timed: {alone:.1f} tok/s alone; beside a drafter right "
            f"{PRIOR:.0%} of the time {split:.1f}, {HOPE:.0%} {self.expected[HOPEFUL]:.1f})"
        )


class Holdable(Protocol):
    """A drafter the lead can rest: the in-process DraftWorker, a back (REST frames)."""

    def hold(self, held: bool) -> None: ...


class CoreShare:
    """Chooses and switches between the main model alone on every core and beside the
    drafter (`split` threads for it, `alone` without), on the generation thread.

    The same judge serves drafters whose cost the main model cannot see at start: with
    `split == alone` the threads never move (a drafter on rpc-servers that share the
    machine, a back on another machine, or on this one where no threads can be lent), and
    resting is all it does; without `draft` (a back: its step is not known here) the
    drafter starts drafting and is judged by what its rounds measure, and every look is
    taken."""

    def __init__(
        self,
        main: Model,
        draft: Model | None,
        *,
        split: int,
        alone: int,
        draft_max: int,
        source: str = MODEL,
        draft_threads: int = 0,
        first_look: int = FIRST_LOOK,
        beside: bool = True,
    ) -> None:
        self.main = main
        self.source = source  # whose rounds are the drafter's
        # whether its work slows the main model's passes (it shares the machine): if not,
        # the rounds without its drafts count as they were, and the rounds with them at
        # the passes' cost as measured now; it then must bring something at every
        # judgement (drafts never ready in time bring nothing: it rests)
        self.beside = beside
        self.draft_threads = draft.n_threads if draft is not None else draft_threads
        self.split = split
        self.alone = alone
        self.draft_max = draft_max
        sizes = [n for n in SIZES if n <= draft_max + 1] or [1]
        # the main model's pass costs each way, made once (a pass weighs against them)
        alone_costs = _timed(main, alone, sizes, all_logits=True)
        split_costs = alone_costs if split == alone else _timed(main, split, sizes, True)
        self.passes = {SPLIT: CostModel(split_costs), ALONE: CostModel(alone_costs)}
        self.state = ALONE
        self.typical: Estimate | None = None  # by the costs timed at start, where known
        self.hope: Estimate | None = None
        self.expected: dict[str, float] = {}
        if draft is not None:
            self._time_drafter(draft, alone_costs)
        self.measured = False
        self.worker: Holdable | None = None
        self.costs: CostModel | None = None  # the policies' cost model, once made
        self.switches = 0
        self._emitted = 0
        self._next = WINDOW
        self._wait = first_look  # windows until a resting drafter's next look
        self._look_at = -1  # when that look is due (tokens emitted; -1: none)
        self._seconds = {SPLIT: 0.0, ALONE: 0.0}  # this window's passes, and alone's
        self._tokens = 0  # this window's, beside the drafter
        self._warming = False  # given its cores, the drafter has had no draft verified yet
        self._trials = 0  # a look's judgements left at which the drafter must show it pays
        self.looking = False  # drafting on a look, not yet shown to pay
        self._rested_at = 0  # when it last started resting (tokens emitted)
        self.waited = 0  # tokens emitted in its last rest
        self.judged = 0  # judgements of the drafter's rounds so far

    def _time_drafter(self, draft: Model, alone_costs: dict[int, float]) -> None:
        """The draft model's step, and what each way is worth by the costs timed at start
        (a typical acceptance, and a good one)."""
        self.step = _timed(draft, draft.n_threads, [1], all_logits=False)[1]
        if self.beside and not self.lends:
            # No thread moves (the drafter's rpc-servers share the main model's cores):
            # what drafting costs the main model shows only with both running.
            ratio, self.step = contended(self.main, draft)
            self.passes[SPLIT] = CostModel({n: s * ratio for n, s in alone_costs.items()})
        self.typical, self.hope = self._estimate(PRIOR), self._estimate(HOPE)
        self.expected = {
            ALONE: self.typical.alone,
            SPLIT: self.typical.split,
            HOPEFUL: self.hope.split,
        }

    def _estimate(self, acceptance: float) -> Estimate:
        """Both ways' tokens per second by the costs timed at start (duo.core.sharing)."""
        return estimate(
            self.passes[ALONE], self.passes[SPLIT], self.step, acceptance, self.draft_max
        )

    @property
    def lends(self) -> bool:
        """Whether the drafter's rests give the main model threads."""
        return self.split != self.alone

    def start(self, worker: Holdable) -> None:
        """The better way at a typical acceptance; where that is not known (a back), the
        drafter drafts, and must show at its first judgements that it pays, as at a look."""
        self._take(self.typical.better(ALONE) if self.typical else SPLIT)
        if self.typical is None:  # judged soon, by what its first rounds measure
            self._trials = TRIALS
            self._next = self._emitted + JUDGED
        self.worker = worker
        worker.hold(self.state == ALONE)
        if self.state == ALONE:
            self._plan_look()

    # -- after every pass ------------------------------------------------------------

    def observe(self, rounds: Sequence[Round]) -> None:
        """One pass of the main model (on the generation thread): its rounds, a slot each."""
        if not rounds:
            return
        if self.state == SPLIT:
            if self._warming and any(r.source == self.source for r in rounds):
                self._warming = False  # caught up: what it is worth counts from here
                self._seconds, self._tokens = {SPLIT: 0.0, ALONE: 0.0}, 0
                self._next = self._emitted + JUDGED
            self._weigh(rounds)
        self._emitted += sum(len(r.tokens) for r in rounds)
        if self._emitted >= self._next:
            self._next = self._emitted + WINDOW
            self._choose()

    def _weigh(self, rounds: Sequence[Round]) -> None:
        """What the pass took, and what the main model alone on every core would have
        taken for the same tokens."""
        seconds = max(r.seconds for r in rounds)  # one pass: every round's wall time
        split = self.costs or self.passes[SPLIT]
        alone = self.passes[ALONE] if self.beside else split
        k = len(rounds)
        share = alone.cost(k) / k  # a slot's share of a pass of one token per slot
        drafted = [r for r in rounds if r.source == self.source]
        others = (k - len(drafted)) / k * seconds * alone.cost(1) / split.cost(1)
        self._seconds[SPLIT] += seconds
        self._seconds[ALONE] += others + sum(len(r.tokens) for r in drafted) * share
        self._tokens += sum(len(r.tokens) for r in rounds)

    def _choose(self) -> None:
        if self.state == SPLIT:
            split, alone = self._seconds[SPLIT], self._seconds[ALONE]
            if split > 0 and alone > 0:
                self.expected = {ALONE: self._tokens / alone, SPLIT: self._tokens / split}
                self.measured = True
            self._seconds, self._tokens = {SPLIT: 0.0, ALONE: 0.0}, 0
            self.judged += 1
            margin = 1.0 if self._trials or not self.beside else MARGIN
            self._trials = max(0, self._trials - 1)
            # A drafter that costs nothing but its rounds (not beside) must bring something:
            # one whose drafts were never ready in time, or never verified, rests too.
            idle = not self.beside and split >= alone > 0
            if split > margin * alone or idle:  # the drafter costs more than it brings
                self.looking = False
                self._take(ALONE)
                self._plan_look()
                self._wait = min(2 * self._wait, LAST_LOOK)
            elif not self._trials:
                self.looking = False  # it has shown that it pays
        elif 0 <= self._look_at <= self._emitted:  # a look: what is the drafter worth now?
            self._take(SPLIT)
            self._look_at = -1
            self._trials = TRIALS
            self.looking = True

    def _plan_look(self) -> None:
        """A resting drafter gets its cores back for a window now and then, if it could
        pay at a good acceptance: never on a machine where even then it could not."""
        hopeful = self.hope is None or self.hope.better(ALONE) == SPLIT
        self._look_at = self._emitted + self._wait * WINDOW if hopeful else -1

    def _take(self, state: str) -> None:
        if self.costs is not None and self.beside:  # what the passes have shown goes
            # with the old way (its threads, or the drafter's work beside them): the main
            # model alone is then what it measured last, not only what was timed at start
            self.passes[self.state] = CostModel(self.costs.seconds)
            self.costs.reset(self.passes[state].seconds)
        switch = state != self.state and self.worker is not None
        if state == SPLIT != self.state:
            self._warming = True  # judged soon after its first verified draft
        if state == ALONE != self.state:
            self._rested_at = self._emitted
        elif state == SPLIT != self.state:
            self.waited = self._emitted - self._rested_at
        self.state = state
        if self.lends:
            self.main.set_threads(self.alone if state == ALONE else self.split)
        if self.worker is not None:
            self.worker.hold(state == ALONE)
        if switch:
            self.switches += 1
            if self.source == MODEL:
                log.info("placement: %s", self.sharing().describe())

    def release(self) -> None:
        """The drafter is gone for good: the main model takes back what it lent."""
        self.worker = None
        self._take(ALONE)

    def verdict(self) -> str:
        """What the last judgement measured, in words ("" before the first)."""
        if not self.measured:
            return ""
        alone, split = self.expected[ALONE], self.expected[SPLIT]
        return f"{alone:.1f} tok/s without its drafts, {split:.1f} with them"

    def sharing(self) -> Sharing:
        return Sharing(
            self.state,
            self.main.n_threads,
            self.draft_threads,
            dict(self.expected),
            self.switches,
            self.measured,
            self.lends,
        )


def _timed(model: Model, threads: int, sizes: list[int], all_logits: bool) -> dict[int, float]:
    """The model's pass time by batch size on `threads` threads, after a context of 64
    (cached: duo.llama.calibrate.cached; in a context too small for some, those left out)."""
    seconds = cached(model, sizes[-1], threads=threads, context=64, all_logits=all_logits)
    return {n: s for n, s in seconds.seconds.items() if n in sizes}
