"""The cores of one machine shared by the main model and an in-process drafter, by cost.

With no placement flags (duo.session.threads), a model drafter that runs beside the main
model on the CPU takes some of its cores. Whether it earns them depends on the machine
and the pair (duo.core.sharing): on a 2-core CPU a drafter half as costly as its main
model never does; on a big machine, or with a main model on a GPU, it can. So at start
the main model's passes are timed on both thread counts, and the draft model's step on
its own (a few seconds, cached per model file, machine and thread count in
$DUO_HOME/costs), and the better way is taken at a prior acceptance. Then, every
`WINDOW` tokens, the choice is made again with the acceptance the drafter's drafts have
shown, and switched when the other way is clearly better. While the main model has every
core, the drafter is held (it decodes nothing, and catches up when released); now and
then, at growing intervals, it is given its cores again to see whether its drafts pay
now, when they could.

A switch changes the main model's thread count between two rounds, never the numbers:
llama.cpp gives each row of a matrix product to one thread, so the output is the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

from duo.core.policy import CostModel, StreakAcceptance
from duo.core.sharing import ALONE, SPLIT, Estimate, estimate
from duo.drafting.drafter import DraftWorker
from duo.llama.backend import Model
from duo.llama.calibrate import calibrate
from duo.llama.models import duo_home

log = logging.getLogger(__name__)

WINDOW = 256  # tokens emitted between two looks at the choice
PRIOR = 0.7  # acceptance of a drafter not yet seen, counted as PRIOR_WEIGHT tokens
PRIOR_WEIGHT = 16
HOPE = 0.85  # the acceptance a held drafter would need for a look worth its cost
FIRST_LOOK = 8  # windows before a held drafter is first given its cores again
LAST_LOOK = 128  # the longest wait, in windows, the waits doubling
SIZES = (1, 2, 3, 5, 9, 17)  # batch sizes timed for the choice (the rest interpolated)


FIXED = "fixed"  # a Sharing's way when the flags (or no drafter) decide


@dataclass(frozen=True)
class Sharing:
    """How the main model and an in-process drafter share the machine now."""

    way: str  # ALONE, SPLIT, or FIXED
    main_threads: int
    draft_threads: int  # the in-process drafter's (0: none)
    # expected tokens per second each way, at the acceptance seen so far (measured only)
    expected: dict[str, float] = field(default_factory=dict)
    switches: int = 0

    def describe(self) -> str:
        main = f"main model on {self.main_threads} thread{'s' * (self.main_threads > 1)}"
        if not self.draft_threads:
            return main
        if self.way == ALONE:
            drafter = "the draft model resting"
        else:
            drafter = f"the draft model on {self.draft_threads}"
        if not self.expected:
            return f"{main}, {drafter}"
        return (
            f"{main}, {drafter} (measured: {self.expected[ALONE]:.1f} tok/s alone, "
            f"{self.expected[SPLIT]:.1f} beside the drafter at acceptance "
            f"{self.expected['acceptance']:.2f})"
        )


class CoreShare:
    """Chooses and switches between the main model alone on every core and beside the
    drafter (`split` threads for it, `alone` without), on the generation thread."""

    def __init__(
        self,
        main: Model,
        draft: Model,
        *,
        split: int,
        alone: int,
        draft_max: int,
        learnt: dict[str, StreakAcceptance],
    ) -> None:
        self.main = main
        self.draft_threads = draft.n_threads
        self.split = split
        self.alone = alone
        self.draft_max = draft_max
        self.learnt = learnt  # the policies' acceptance by source (the drafter's: "model")
        sizes = [n for n in SIZES if n <= draft_max + 1] or [1]
        self.tables = {
            SPLIT: _timed(main, split, sizes, all_logits=True),
            ALONE: _timed(main, alone, sizes, all_logits=True),
        }
        self.step = _timed(draft, draft.n_threads, [1], all_logits=False)[1]
        self.state = ALONE
        self.last = self.estimate(PRIOR)
        self.worker: DraftWorker | None = None
        self.costs: CostModel | None = None  # the policies' cost model, once made
        self.switches = 0
        self._emitted = 0
        self._next = WINDOW
        self._wait = FIRST_LOOK  # windows until a held drafter's next look
        self._look_at = -1  # when that look is due (tokens emitted; -1: none)
        self._looking = False

    # -- the choice ------------------------------------------------------------------

    def estimate(self, acceptance: float) -> Estimate:
        """Both ways' tokens per second. Beside the drafter, the two models slow each other
        down (shared caches and memory bandwidth): while they run together, the passes and
        steps as measured then are used, not the ones timed alone at start."""
        alone, split = (CostModel(self.tables[s]) for s in (ALONE, SPLIT))
        step = self.step
        if self.state == SPLIT:
            if self.costs is not None:
                split = self.costs
            if self.worker is not None and self.worker.guess_seconds is not None:
                step = self.worker.guess_seconds
        return estimate(alone, split, step, acceptance, self.draft_max)

    def acceptance(self) -> float:
        """The drafter's acceptance so far, with the prior counted as a few tokens."""
        learnt = self.learnt.get("model")
        tested = accepted = 0
        if learnt is not None:
            for table in (learnt.after_whole, learnt.after_rejection):
                tested += sum(table.tested)
                accepted += sum(table.accepted)
        return (accepted + PRIOR * PRIOR_WEIGHT) / (tested + PRIOR_WEIGHT)

    def start(self, worker: DraftWorker) -> None:
        """Take the better way at the prior acceptance."""
        self._take(self.last.better(ALONE))
        self.worker = worker
        worker.hold(self.state == ALONE)
        if self.state == ALONE:
            self._plan_look()

    def observe(self, emitted: int) -> None:
        """After a round (on the generation thread): look at the choice every WINDOW
        tokens."""
        self._emitted += emitted
        if self._emitted < self._next:
            return
        self._next = self._emitted + WINDOW
        self.last = self.estimate(self.acceptance())
        choice = self.last.better(self.state)
        if self.state == ALONE and choice == ALONE and 0 <= self._look_at <= self._emitted:
            choice, self._looking = SPLIT, True  # a look: the drafter shows what it is worth
        elif self.state == SPLIT and self._looking and choice == ALONE:
            self._wait = min(2 * self._wait, LAST_LOOK)  # nothing gained: look less often
        if choice != self.state:
            self._take(choice)
            if choice == ALONE:
                self._plan_look()
            else:
                self._look_at = -1
        self._looking = self._looking and self.state == SPLIT

    def _plan_look(self) -> None:
        """A held drafter gets its cores back for a window now and then, if it could pay
        at a good acceptance: never on a machine where even then it could not."""
        hopeful = self.estimate(HOPE).better(ALONE) == SPLIT
        self._look_at = self._emitted + self._wait * WINDOW if hopeful else -1

    def _take(self, state: str) -> None:
        if self.costs is not None:  # what the passes have shown goes with the old way
            self.tables[self.state] = dict(self.costs.seconds)
            self.costs.reset(self.tables[state])
        switch = state != self.state and self.worker is not None
        self.state = state
        self.main.set_threads(self.alone if state == ALONE else self.split)
        if self.worker is not None:
            self.worker.hold(state == ALONE)
        if switch:
            self.switches += 1
            log.info("placement: %s", self.sharing().describe())

    def sharing(self) -> Sharing:
        expected = {ALONE: self.last.alone, SPLIT: self.last.split}
        expected["acceptance"] = self.acceptance()
        return Sharing(self.state, self.main.n_threads, self.draft_threads, expected, self.switches)


def _timed(model: Model, threads: int, sizes: list[int], all_logits: bool) -> dict[int, float]:
    """The model's pass time by batch size on `threads` threads: measured once per model
    file, machine and settings, then read from $DUO_HOME/costs."""
    path = _cache_path(model, threads, sizes, all_logits)
    try:
        cached = json.loads(path.read_text())
        return {int(n): float(s) for n, s in cached.items()}
    except (OSError, ValueError, AttributeError):
        pass
    before = model.n_threads
    model.set_threads(threads)
    try:
        seconds = calibrate(model, sizes[-1], repeats=3, context=64, all_logits=all_logits)
    finally:
        model.set_threads(before)
    measured = {n: seconds.seconds[n] for n in sizes}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(measured))
    tmp.replace(path)
    return measured


def _cache_path(model: Model, threads: int, sizes: list[int], all_logits: bool) -> Path:
    stat = model.path.stat()
    key = json.dumps(
        [
            str(model.path.resolve()), stat.st_size, stat.st_mtime_ns, _machine(),
            threads, sizes, all_logits, model.n_gpu_layers,
        ]
    )  # fmt: skip
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return duo_home() / "costs" / f"{model.path.stem}-{threads}t-{digest}.json"


def _machine() -> str:
    """The CPU's name and count: a cost measured on another machine is not this one's."""
    try:
        info = Path("/proc/cpuinfo").read_text()
        name = next(line for line in info.splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor()
    return f"{name} x{os.cpu_count()} {platform.machine()}"
