"""`duo sim`: project tok/s for every mode from acceptance traces and device profiles.

The simulator is pure and deterministic (no threads, no models): it replays how often the
draft model agrees with the main model, as recorded by a real `duo bench` sync run, on
devices described by a few numbers (`DeviceProfile`). It answers "what would duo do on
that hardware?" and is validated against `duo bench` on this machine.

Modelling assumptions (each one is a simplification of the real engine):

1. Agreement is a property of the text. At every position the drafter's greedy guess
   either equals the main model's token or not (a match flag). A draft started at
   position p is accepted for as many tokens as the run of matches from p, however and
   whenever it was drafted: greedy drafts from the same committed prefix are the same.
   The flags come from a sync trace: a round that accepted a < k tokens is a matches and
   one mismatch; a round that accepted all k leaves the flag of its bonus position
   unobserved, which is filled (deterministically) at the rate of the deepest measured
   conditional acceptance. A trace with k tokens per round says nothing beyond k.
2. Costs are the profile's: a main pass over n tokens costs main_ms(n) (interpolated and
   extrapolated like policy.CostModel); the drafter makes one guess per draft_ms and needs
   draft_catchup_ms to re-evaluate the committed tokens after a rejection. In one process
   the lead's own time outside the main pass (sampling, bookkeeping) is taken as zero; a
   lead service (lead+back) also spends lead_cpu_ms_per_token of CPU on the main device
   per generated token (event loop, drafter messages, API streaming), added to its rounds.
3. Contention: while the lead and the drafter compute at the same time, the main pass
   runs `main_concurrent_slowdown` times slower and a draft step `draft_concurrent_slowdown`
   times slower (shared caches and memory bandwidth; measured by `duo bench`, 1.0 on
   separate machines). In async the lead never waits, so every draft step is slowed; a
   main pass is slowed only for the part of it during which the drafter is busy.
4. The network (lead+back) delays every message, commits to the drafter and drafts to the
   lead, by one-way latency + MESSAGE_BYTES / bandwidth.
5. The policy is the lead's own chooser (duo.core.choice), offered the drafter's guesses
   as one source's proposal each round: Longest (fixed) or PerSource (adaptive). The
   adaptive one knows the costs and the acceptance up front (the steady state the real
   one learns: per position, apart after whole and after cut drafts); otherwise it
   explores like the lead does (an offered draft verified whole now and then, less often
   while drafts do not pay) and learns from every round as the lead does, including the
   free look at a skipped draft's first token; when it asks an in-process drafter to
   rest, the simulated one rests too (a back never does), and when it wakes it evaluates
   the commits it missed in one batch (draft_ms_by_batch).
6. Free drafters (n-gram lookup, the suffix cache) cost no device time: their rounds,
   as a bench's free-1 run recorded them (drafted, accepted), are replayed on the
   profile's main-model costs, plus the lead's measured time per round outside the pass
   (lookups and bookkeeping). Which drafts a policy verifies there is taken as measured,
   not re-decided for the profile.
7. Several generations are simulated as one long one: prefill, the first rounds of each
   generation and the shorter drafts at the end of each are not modelled.
8. Concurrent clients (`duo lead --parallel`): c generations share every main pass, whose
   batch holds each one's last token and its draft (free drafters: the free-1 rounds,
   each client starting at another place in them). A round costs main_ms of the whole
   batch plus the lead's time per round for each client; the drafts verified are those
   measured alone (the lead's policy verifies less of them in a large batch, so this errs
   towards too much drafting where batches are dear).
9. Fan-out (`--fanout F`): a drafter that is `max_ahead` ahead, with nothing to do until
   the next commit, drafts branches instead of idling, as the real one does: up to F of
   them, `FANOUT_DEPTH` guesses each, a draft step per guess. When the lead then rejects
   one of its guesses, a branch continues the correction with probability `FANOUT_HIT`
   (measured on this project's pair: the drafter adopted a branch after 83 of 218
   rejections, 38%), scaled by the share of its branches it had made; the drafter then
   skips its catch-up, and the branch's guesses past the correction are ready at once,
   agreeing as the trace says. Which positions a real drafter branches at (its least sure
   guesses) is not modelled beyond that rate.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from duo.bench.sim.profiles import DeviceProfile
from duo.bench.sim.trace import Trace, check_k
from duo.bench.variants import SIM_MODES
from duo.core.choice import Chooser, Longest, PerSource
from duo.core.draft import Proposal
from duo.core.policy import CostModel
from duo.errors import UsageError

DRAFTER = "model"  # the source of the simulated drafter's proposals
RIGHT, WRONG = 1, 0  # the main model's token at every position; a draft token it rejects
FANOUT_DEPTH = 3  # guesses per branch (assumption 9)
FANOUT_HIT = 0.38  # rejections a full set of branches answers (assumption 9, measured)

# -- the modes -------------------------------------------------------------------------


@dataclass
class SimResult:
    mode: str
    tokens: int = 0
    ms: float = 0.0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def tokens_per_second(self) -> float:
        return 1000 * self.tokens / self.ms if self.ms else 0.0

    def add_round(self, drafted: int, accepted: int) -> None:
        self.rounds += 1
        self.drafted += drafted
        self.accepted += accepted
        self.tokens += accepted + 1


def simulate_target(trace: Trace, profile: DeviceProfile) -> SimResult:
    """The main model alone: one token per single-token pass."""
    result = SimResult("target-1")
    for _ in range(len(trace.matches())):
        result.add_round(0, 0)
        result.ms += profile.main_ms(1)
    return result


def simulate_free(
    rounds: Sequence[Sequence[int]], profile: DeviceProfile, overhead_ms: float
) -> SimResult:
    """Free drafters: the recorded rounds, each a main pass over 1 + drafted tokens plus
    the lead's time outside it (assumption 6)."""
    result = SimResult("free-1")
    for drafted, accepted in rounds:
        result.ms += profile.main_ms(int(drafted) + 1) + overhead_ms
        result.add_round(int(drafted), int(accepted))
    return result


def simulate_clients(
    rounds: Sequence[Sequence[int]], profile: DeviceProfile, clients: int, overhead_ms: float
) -> SimResult:
    """`clients` generations decoded together, replaying the recorded free-drafter rounds
    (none: the main model alone, one token each per pass) (assumption 8)."""
    rounds = list(rounds) or [(0, 0)]
    n = len(rounds)
    result = SimResult(f"{clients} clients")
    for i in range(n):
        here = [rounds[(i + j * n // clients) % n] for j in range(clients)]
        result.ms += profile.main_ms(sum(1 + int(d) for d, _ in here)) + clients * overhead_ms
        for drafted, accepted in here:
            result.add_round(int(drafted), int(accepted))
    return result


def simulate_sync(trace: Trace, profile: DeviceProfile, k: int) -> SimResult:
    """Classic speculative decoding: draft k tokens, then verify them in one pass."""
    check_k(trace, k)
    runs = trace.runs()
    result, position = SimResult("sync"), 0
    while position < len(runs):
        accepted = min(runs[position], k)
        result.ms += k * profile.draft_ms + profile.main_ms(k + 1)
        result.add_round(k, accepted)
        position += accepted + 1
    return result


def remote_draft_ms_per_token(
    base_ms: float, tokens_per_round: float, drafted_per_round: float, extra_rtt_ms: float
) -> float:
    """llama.cpp's remote drafting (llama-server with its draft model on an rpc-server)
    across a link `extra_rtt_ms` longer than the one its `base_ms` per token was measured
    on: each draft token is a graph the rpc-server computes, one round trip, and each round
    costs one more; none of it overlaps the main model. Fitted to `duo bench --rtt`'s
    llama-server-rd runs (docs/across-machines.md), not derived from llama.cpp's sources."""
    return base_ms + extra_rtt_ms * (drafted_per_round + 1) / tokens_per_round


class Drafter:
    """The async drafter as a sequence of steps on its own device.

    Its guesses are for positions base, base+1, ... and each was made at ready[i]. Each
    step starts when the previous one ends and reads the commits it has heard of by then:
    if they do not continue its guesses (a rejection, or the lead got ahead of it), it
    catches up (one step) and guesses anew from there; else it guesses one more token,
    up to max_ahead past the commits; else it idles until it hears of the next commit.
    """

    def __init__(
        self,
        runs: list[int],
        step_ms: float,
        catchup_ms: float | Callable[[int], float],
        max_ahead: int,
        fanout: int = 0,
    ):
        self.runs = runs
        self.fanout = fanout
        self.branched = 0  # branch guesses made since the drafter last lined up anew
        self.adopted = 0  # rejections a branch answered
        self._draw = random.Random(0)  # which rejections a branch answers: the same each run
        self.step_ms = step_ms
        # the time to evaluate n committed tokens it does not hold (a number: any n)
        self.catchup = catchup_ms if callable(catchup_ms) else (lambda _n, c=catchup_ms: c)
        self.max_ahead = max_ahead
        self.base = 0
        self.ready: list[float] = []
        self.free_at = 0.0  # end of the current step, or when it next wakes up (inf: never)
        self.busy = False
        self.heard: list[tuple[float, int]] = [(0.0, 0)]  # (when it hears, committed count)
        self.resting = False

    def rest(self, t: float, resting: bool) -> None:
        """The lead asks it to rest (it stops after its current step) or to draft again
        (it wakes at t and catches up with what was committed meanwhile)."""
        if self.resting and not resting and not self.busy:
            self.free_at = t
        self.resting = resting

    def hear(self, at: float, committed: int) -> None:
        self.heard.append((at, committed))
        if not self.busy and self.free_at == math.inf and not self.resting:
            self.free_at = at

    def committed_at(self, t: float) -> int:
        return self.heard[bisect_right(self.heard, (t, math.inf)) - 1][1]

    def lined_up(self, committed: int) -> bool:
        """The committed tokens are a prefix of its guesses (so the guesses stand)."""
        correct = min(len(self.ready), self._run(self.base))
        return bool(self.ready) and committed <= self.base + correct

    def advance(self, t: float) -> None:
        """Run every step that starts by time t."""
        while self.free_at <= t:
            self._step(self.free_at)

    def _step(self, start: float) -> None:
        committed = self.committed_at(start)
        if self.resting:
            self.busy, self.free_at = False, math.inf
        elif not self.lined_up(committed):
            held = self.base + (min(len(self.ready), self._run(self.base)) if self.ready else 0)
            if self._adopts():  # a branch continues the correction: its guesses are there
                self.base, self.busy, self.free_at = committed, False, start
                self.ready = [start] * FANOUT_DEPTH
                return
            self.base, self.busy = committed, True
            self.free_at = start + self.catchup(max(1, committed - held))
            self.ready = [self.free_at]
        elif self.base + len(self.ready) - committed < self.max_ahead:
            self.busy, self.free_at = True, start + self.step_ms
            self.ready.append(self.free_at)
        elif self.branched < self.fanout * FANOUT_DEPTH:  # a branch step instead of idling
            self.branched += 1
            self.busy, self.free_at = True, start + self.step_ms
        else:  # idle until it hears of the next commit (each commit adds tokens)
            following = bisect_right(self.heard, (start, math.inf))
            wake = self.heard[following][0] if following < len(self.heard) else math.inf
            self.busy, self.free_at = False, wake

    def _adopts(self) -> bool:
        """Whether a branch answers this rejection (assumption 9); branches start over."""
        made, self.branched = self.branched, 0
        if not made:
            return False
        adopted = self._draw.random() < FANOUT_HIT * made / (self.fanout * FANOUT_DEPTH)
        self.adopted += adopted
        return adopted

    def offer(self, t: float, committed: int, delay_ms: float) -> int:
        """How many guesses past the commits the lead holds at time t."""
        if committed > self.base + self._run(self.base):
            return 0  # its guesses contradict the committed tokens: a stale draft
        arrived = bisect_right(self.ready, t - delay_ms)
        return max(0, self.base + arrived - committed)

    def _run(self, position: int) -> int:
        return self.runs[position] if position < len(self.runs) else 0


def simulate_async(
    trace: Trace,
    profile: DeviceProfile,
    k: int,
    *,
    max_ahead: int,
    policy: str = "adaptive",
    network: bool = False,
    explore_every: int = 8,
    fanout: int = 0,
) -> SimResult:
    """A lead verifying whatever the concurrent drafter has ready, never waiting for it.

    With network=True (lead+back) the commits reach the drafter, and its drafts reach the
    lead, one message time later; with `fanout`, the drafter drafts branches when idle.
    """
    check_k(trace, k)
    runs = trace.runs()
    delay = profile.message_ms() if network else 0.0
    slow = profile.draft_concurrent_slowdown
    drafter = Drafter(
        runs,
        profile.draft_ms * slow,
        lambda n: profile.catchup_batch_ms(n) * slow,
        max_ahead,
        fanout,
    )
    chooser = _chooser(policy, trace, profile, explore_every)
    result = SimResult("lead+back" if network else "async")
    t, position = 0.0, 0
    while position < len(runs):
        drafter.rest(t, not network and DRAFTER in chooser.resting)  # backs never rest
        drafter.advance(t)
        offered = proposals(runs[position], min(drafter.offer(t, position, delay), k))
        choice = chooser.choose(offered)
        length = choice.n
        accepted = min(runs[position], length)
        start = t
        t = main_pass_end(t, profile.main_ms(length + 1), drafter, profile)
        emitted = (RIGHT,) * (accepted + 1)  # the accepted draft, then the main model's own
        # The pass as measured, slowed or not (costs in ms here).
        chooser.observe(choice.proposal, length, accepted, t - start, offered, emitted, length + 1)
        if network:
            t += profile.lead_cpu_ms_per_token * (accepted + 1)
        result.add_round(length, accepted)
        position += accepted + 1
        drafter.hear(t + delay, position)
    result.ms = t
    return result


def main_pass_end(start: float, work_ms: float, drafter: Drafter, profile: DeviceProfile) -> float:
    """When a main pass that costs work_ms alone ends, if it is slowed while the drafter
    computes (assumption 3). The drafter takes every step that starts during the pass."""
    t, left = start, work_ms
    while True:
        drafter.advance(t)
        rate = 1 / profile.main_concurrent_slowdown if drafter.busy else 1.0
        end = t + left / rate
        if end <= drafter.free_at:
            return end
        left -= (drafter.free_at - t) * rate
        t = drafter.free_at


def proposals(run: int, offered: int) -> list[Proposal]:
    """What the lead holds from the drafter: `offered` tokens, of which the first `run`
    agree with the main model (none offered: no proposal)."""
    if not offered:
        return []
    return [Proposal(DRAFTER, (RIGHT,) * min(run, offered) + (WRONG,) * (offered - run))]


def _chooser(name: str, trace: Trace, profile: DeviceProfile, explore_every: int) -> Chooser:
    """The lead's own policy (assumption 5): every ready draft (fixed), or what pays, on
    acceptance known up front from the trace (adaptive)."""
    if name == "fixed":
        return Longest()
    costs = CostModel({n: profile.main_ms(n) for n in range(1, trace.k + 2)})
    learnt = {DRAFTER: trace.streak_acceptance()}
    chooser = PerSource(costs, learnt=learnt, explore_every=explore_every)
    chooser.policy(DRAFTER)  # rounds without a draft count towards a rest from the first
    return chooser


def simulate(
    mode: str,
    trace: Trace,
    profile: DeviceProfile,
    *,
    k: int,
    max_ahead: int,
    policy: str = "adaptive",
    fanout: int = 0,
) -> SimResult:
    """One mode by its bench name: target-1, sync, async or lead+back (with `fanout`
    branches for the async drafter)."""
    if mode == "target-1":
        return simulate_target(trace, profile)
    if mode == "sync":
        return simulate_sync(trace, profile, k)
    if mode in ("async", "lead+back"):
        network = mode == "lead+back"
        return simulate_async(
            trace, profile, k, max_ahead=max_ahead, policy=policy, network=network, fanout=fanout
        )
    raise UsageError(f"unknown mode {mode!r} (choose from {', '.join(SIM_MODES)})")
