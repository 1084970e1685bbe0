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
   draft_catchup_ms to re-evaluate the committed tokens after a rejection. The lead's own
   time outside the main pass (sampling, bookkeeping) is taken as zero.
3. Contention: while the lead and the drafter compute at the same time, the main pass
   runs `main_concurrent_slowdown` times slower and a draft step `draft_concurrent_slowdown`
   times slower (shared caches and memory bandwidth; measured by `duo bench`, 1.0 on
   separate machines). In async the lead never waits, so every draft step is slowed; a
   main pass is slowed only for the part of it during which the drafter is busy.
4. The network (lead+back) delays every message, commits to the drafter and drafts to the
   lead, by one-way latency + MESSAGE_BYTES / bandwidth.
5. The adaptive policy knows the costs and the per-position acceptance up front (the
   steady state the real one learns), and explores like policy.AdaptivePolicy: every
   8th offered draft is verified whole.
6. Several generations are simulated as one long one: prefill, the first rounds of each
   generation and the shorter drafts at the end of each are not modelled.
"""

from __future__ import annotations

import argparse
import json
import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from duo.errors import UsageError
from duo.policy import Acceptance, AdaptivePolicy, CostModel, FixedPolicy, Policy

MESSAGE_BYTES = 64  # one commit or draft message on the wire, framing included (assumed)
SIM_MODES = ("target-1", "sync", "async", "lead+back")

# -- devices ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceProfile:
    """What the simulator needs to know about the hardware of one setup."""

    name: str
    main_ms_by_batch: Mapping[int, float]  # main pass time by batch size (at least 1)
    draft_ms: float  # one draft token on the drafter's device
    draft_catchup_ms: float | None = None  # re-evaluate after a rejection (None: draft_ms)
    main_concurrent_slowdown: float = 1.0  # main pass time x this while the drafter computes
    draft_concurrent_slowdown: float = 1.0  # draft step time x this while the main computes
    network_latency_ms: float = 0.0  # one way, lead <-> back (lead+back only)
    network_bytes_per_s: float | None = None  # None: no bandwidth limit
    note: str = ""  # where each number comes from: measured, quoted or assumed

    def main_ms(self, batch: int) -> float:
        return CostModel(dict(self.main_ms_by_batch)).cost(batch)

    @property
    def catchup_ms(self) -> float:
        return self.draft_ms if self.draft_catchup_ms is None else self.draft_catchup_ms

    def message_ms(self) -> float:
        transfer = 0.0
        if self.network_bytes_per_s:
            transfer = 1000 * MESSAGE_BYTES / self.network_bytes_per_s
        return self.network_latency_ms + transfer

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["main_ms_by_batch"] = {str(b): ms for b, ms in sorted(self.main_ms_by_batch.items())}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "profile") -> DeviceProfile:
        try:
            main = {int(b): float(ms) for b, ms in d["main_ms_by_batch"].items()}
            profile = cls(**{**d, "main_ms_by_batch": main, "name": str(d.get("name", source))})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UsageError(f"{source}: not a device profile ({e})") from None
        if 1 not in main or profile.draft_ms <= 0:
            raise UsageError(f"{source}: needs main_ms_by_batch for batch 1 and draft_ms > 0")
        return profile


def roofline(single_ms: float, batched_ms_per_token: float, up_to: int) -> dict[int, float]:
    """A main-model cost curve from two quoted figures: a pass costs what one token costs
    (memory-bound: the weights are read once) until n tokens at the prompt-evaluation
    rate cost more (compute-bound): cost(n) = max(single, n x batched)."""
    return {n: max(single_ms, n * batched_ms_per_token) for n in range(1, up_to + 1)}


def memory_bound(single_ms: float, extra_per_token: float, up_to: int) -> dict[int, float]:
    """A main-model cost curve where each extra token in a batch adds a small fraction."""
    return {n: single_ms * (1 + extra_per_token * (n - 1)) for n in range(1, up_to + 1)}


# -- acceptance traces -----------------------------------------------------------------


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

    def matches(self) -> list[bool]:
        """The match flag of every position of the text (assumption 1 in the module doc)."""
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


def simulate_sync(trace: Trace, profile: DeviceProfile, k: int) -> SimResult:
    """Classic speculative decoding: draft k tokens, then verify them in one pass."""
    _check_k(trace, k)
    runs = trace.runs()
    result, position = SimResult("sync"), 0
    while position < len(runs):
        accepted = min(runs[position], k)
        result.ms += k * profile.draft_ms + profile.main_ms(k + 1)
        result.add_round(k, accepted)
        position += accepted + 1
    return result


class Drafter:
    """The async drafter as a sequence of steps on its own device.

    Its guesses are for positions base, base+1, ... and each was made at ready[i]. Each
    step starts when the previous one ends and reads the commits it has heard of by then:
    if they do not continue its guesses (a rejection, or the lead got ahead of it), it
    catches up (one step) and guesses anew from there; else it guesses one more token,
    up to max_ahead past the commits; else it idles until it hears of the next commit.
    """

    def __init__(self, runs: list[int], step_ms: float, catchup_ms: float, max_ahead: int):
        self.runs = runs
        self.step_ms = step_ms
        self.catchup_ms = catchup_ms
        self.max_ahead = max_ahead
        self.base = 0
        self.ready: list[float] = []
        self.free_at = 0.0  # end of the current step, or when it next wakes up (inf: never)
        self.busy = False
        self.heard: list[tuple[float, int]] = [(0.0, 0)]  # (when it hears, committed count)

    def hear(self, at: float, committed: int) -> None:
        self.heard.append((at, committed))
        if not self.busy and self.free_at == math.inf:
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
        if not self.lined_up(committed):
            self.base, self.busy = committed, True
            self.free_at = start + self.catchup_ms
            self.ready = [self.free_at]
        elif self.base + len(self.ready) - committed < self.max_ahead:
            self.busy, self.free_at = True, start + self.step_ms
            self.ready.append(self.free_at)
        else:  # idle until it hears of the next commit (each commit adds tokens)
            following = bisect_right(self.heard, (start, math.inf))
            wake = self.heard[following][0] if following < len(self.heard) else math.inf
            self.busy, self.free_at = False, wake

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
) -> SimResult:
    """A lead verifying whatever the concurrent drafter has ready, never waiting for it.

    With network=True (lead+back) the commits reach the drafter, and its drafts reach the
    lead, one message time later.
    """
    _check_k(trace, k)
    runs = trace.runs()
    delay = profile.message_ms() if network else 0.0
    drafter = Drafter(
        runs,
        profile.draft_ms * profile.draft_concurrent_slowdown,
        profile.catchup_ms * profile.draft_concurrent_slowdown,
        max_ahead,
    )
    choose = _policy(policy, trace, profile, explore_every)
    result = SimResult("lead+back" if network else "async")
    t, position = 0.0, 0
    while position < len(runs):
        drafter.advance(t)
        length = choose.choose(min(drafter.offer(t, position, delay), k))
        accepted = min(runs[position], length)
        t = main_pass_end(t, profile.main_ms(length + 1), drafter, profile)
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


def _policy(name: str, trace: Trace, profile: DeviceProfile, explore_every: int) -> Policy:
    if name == "fixed":
        return FixedPolicy()
    costs = CostModel({n: profile.main_ms(n) for n in range(1, trace.k + 2)})
    return AdaptivePolicy(costs, trace.acceptance(), explore_every=explore_every)


def _check_k(trace: Trace, k: int) -> None:
    if not 1 <= k <= trace.k:
        raise UsageError(
            f"--k {k}: the trace was recorded with k={trace.k} and tells nothing about "
            f"acceptance past {trace.k} tokens (use 1..{trace.k})"
        )


def simulate(
    mode: str,
    trace: Trace,
    profile: DeviceProfile,
    *,
    k: int,
    max_ahead: int,
    policy: str = "adaptive",
) -> SimResult:
    """One mode by its bench name: target-1, sync, async or lead+back."""
    if mode == "target-1":
        return simulate_target(trace, profile)
    if mode == "sync":
        return simulate_sync(trace, profile, k)
    if mode in ("async", "lead+back"):
        network = mode == "lead+back"
        return simulate_async(
            trace, profile, k, max_ahead=max_ahead, policy=policy, network=network
        )
    raise UsageError(f"unknown mode {mode!r} (choose from {', '.join(SIM_MODES)})")


# -- profiles: this machine (from a bench report) and the seeds' setups ----------------


def bench_profile(report: Mapping[str, Any]) -> DeviceProfile:
    """This machine, as `duo bench` measured it (report["profile"])."""
    try:
        prof = report["profile"]
        main = {int(b): float(ms) for b, ms in prof["main_ms_by_batch"].items()}
        draft = float(prof["draft_ms_by_batch"]["1"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UsageError("the bench report has no device profile (main and draft ms)") from None
    main_slow = float(prof.get("main_concurrent_slowdown", 1.0))
    draft_slow = float(prof.get("draft_concurrent_slowdown", 1.0))
    measured = (
        "concurrent slowdowns measured"
        if "main_concurrent_slowdown" in prof
        else ("concurrent slowdown not in this report (older bench): 1.0 assumed")
    )
    return DeviceProfile(
        name="this machine",
        main_ms_by_batch=main,
        draft_ms=draft,
        main_concurrent_slowdown=main_slow,
        draft_concurrent_slowdown=draft_slow,
        network_latency_ms=0.3,
        note=(
            "measured by duo bench: main ms by batch size and draft ms per token, each alone "
            f"on its pinned cores; {measured}. Assumed: a catch-up costs one draft token; "
            "lead+back over loopback adds 0.3 ms per message one way (not measured)."
        ),
    )


@dataclass(frozen=True)
class SeedSetup:
    """A setup from the seeds, with the numbers they report (tok/s) for comparison."""

    profile: DeviceProfile
    mode: str  # "async": one process; "lead+back": a lead and a back service
    k: int | None  # the draft length the seed used (None: not stated)
    reported_target: float | None  # the main model alone, as quoted
    reported_duo: float | None  # with the seed's duo, as quoted
    source: str
    extra: dict[str, float] = field(default_factory=dict)  # other quoted figures


_BATCHES = 9  # cost curves up to k=8

SEEDS: tuple[SeedSetup, ...] = (
    SeedSetup(
        DeviceProfile(
            name="seed000-m1-m2-rpc",
            main_ms_by_batch=memory_bound(260.0, 0.025, _BATCHES),
            draft_ms=45.0,
            main_concurrent_slowdown=1.2,
            draft_concurrent_slowdown=1.2,
            note=(
                "Llama-3-8B-Instruct fp16 split over an M1 16GB and an M2 24GB (llama.cpp rpc, "
                "Thunderbolt 4), Q2_K draft on the M2. Quoted: duo 256 tokens in 32.03 s. "
                "Assumed (not in the seed): main ~260 ms/token (16 GB of weights read once per "
                "token, half at ~51 GB/s on the M1, half at ~75 GB/s on the M2, i.e. ~75% of "
                "peak); memory-bound: each extra token in a batch adds 2.5% (a batch of 5 "
                "costs ~1.1x one token); Q2_K draft (~3.2 GB) ~45 ms/token on the M2 GPU; both "
                "share the M2, so each runs 1.2x slower while the other computes."
            ),
        ),
        mode="async",
        k=None,
        reported_target=None,
        reported_duo=7.99,
        source="seed 000 (the plain main-model figure is elided)",
    ),
    SeedSetup(
        DeviceProfile(
            name="seed001-m2ultra-70b",
            main_ms_by_batch={**roofline(1000 / 8.463, 2699 / 105, _BATCHES), 105: 2699.0},
            draft_ms=35.0,
            main_concurrent_slowdown=1.1,
            draft_concurrent_slowdown=1.1,
            network_latency_ms=0.5,
            note=(
                "Llama3-70B Q8 on the M2 Ultra GPU (lead) + Llama3-8B Q4_0 on 16 of its CPU "
                "threads (back). Quoted: main alone 784 tokens in 92.639 s (8.463 t/s, so "
                "118.2 ms/token); prompt 105 tokens in 2.699 s (a batch of 105 costs 2699 ms). "
                "Assumed: batches cost max(118.2 ms, n x 25.7 ms) (memory- then compute-bound; "
                "a batch of 5 costs ~1.09x one token); draft ~35 ms/token (4.7 GB of weights "
                "over the CPU's share of memory bandwidth); GPU and CPU share unified memory, "
                "so each runs 1.1x slower while the other computes; lead and back on "
                "localhost: 0.5 ms per message one way."
            ),
        ),
        mode="lead+back",
        k=None,
        reported_target=8.463,
        reported_duo=10.431,
        source="seed 001 (back started mid-generation: 9.568 t/s)",
        extra={"back joining mid-generation": 9.568},
    ),
    SeedSetup(
        DeviceProfile(
            name="seed001-m2-m1-8b",
            main_ms_by_batch=memory_bound(213.0, 0.025, _BATCHES),
            draft_ms=92.0,
            network_latency_ms=1.0,
            network_bytes_per_s=100e6,
            note=(
                "Llama3-8B fp16 on an M2 24GB laptop (lead) + Llama3-8B Q4 on an M1 16GB mac "
                "mini (back). The seed quotes no figures for it ('worked reasonably well'). "
                "Assumed: main ~213 ms/token (16 GB at ~75 GB/s); memory-bound batches (+2.5% "
                "per extra token); draft ~92 ms/token (4.7 GB at ~51 GB/s on the M1); separate "
                "machines: no contention; LAN: 1 ms one way, 100 MB/s."
            ),
        ),
        mode="lead+back",
        k=None,
        reported_target=None,
        reported_duo=None,
        source="seed 001 (no figures quoted)",
    ),
    SeedSetup(
        DeviceProfile(
            name="seed002-xeon-a10-ngl0",
            main_ms_by_batch={**roofline(490.05, 6596.12 / 36, _BATCHES), 36: 6596.12},
            draft_ms=20.0,
            note=(
                "Llama3-70B Q8 on a Xeon Platinum 8358 (30 cores, ngl 0) + Llama3-8B Q8 draft "
                "on an NVIDIA A10 (ngld 99), one process, --draft 4. Quoted: main alone "
                "490.05 ms/token (2.04 t/s); prompt 36 tokens in 6596.12 ms (183.23 ms/token). "
                "Assumed: batches cost max(490.05 ms, n x 183.23 ms) (memory- then compute-"
                "bound: a batch of 5 costs ~1.87x one token); draft ~20 ms/token (8.5 GB of "
                "weights at ~70% of the A10's 600 GB/s); CPU and GPU memories are separate: "
                "no contention."
            ),
        ),
        mode="async",
        k=4,
        reported_target=2.04,
        reported_duo=3.785,
        source="seed 002 (ngl 0)",
    ),
    SeedSetup(
        DeviceProfile(
            name="seed002-xeon-a10-ngl11",
            main_ms_by_batch={
                **roofline(490.05 - 11 / 22 * (490.05 - 395.71), 160.1, _BATCHES),
                36: 36 * 160.1,
            },
            draft_ms=20.0,
            note=(
                "As seed002-xeon-a10-ngl0, with 11 of the main model's layers on the A10 next "
                "to the draft. Quoted: main alone 490.05 ms/token with ngl 0 and 395.71 ms/token "
                "(2.53 t/s) with ngl 22; prompt evaluation 183.23 and 137.02 ms/token. Assumed: "
                "linear in offloaded layers, so ngl 11 costs 442.9 ms/token and 160.1 ms/token "
                "in a batch; batches cost max of the two (a batch of 5 ~1.81x one token); draft "
                "~20 ms/token; the A10 is shared, but the main model's GPU layers are a small "
                "part of its pass: no contention."
            ),
        ),
        mode="async",
        k=4,
        reported_target=None,
        reported_duo=4.478,
        source="seed 002 (ngl 11; plain ngl 22: 2.53 t/s)",
        extra={"main alone, ngl 22": 2.53},
    ),
)


def seed_profile(name: str) -> DeviceProfile:
    for seed in SEEDS:
        if seed.profile.name == name:
            return seed.profile
    names = ", ".join(s.profile.name for s in SEEDS)
    raise UsageError(f"unknown profile {name!r} (known: bench, seeds, {names}, or FILE.json)")


# -- projections -----------------------------------------------------------------------


def bench_trace(report: Mapping[str, Any]) -> Trace:
    """The acceptance trace of the bench's sync run (fixed k = the bench's draft_max)."""
    sync = _mode(report, "sync")
    if sync is None or not sync.get("trace"):
        raise UsageError(
            "the bench report has no sync trace: run duo bench with sync among --modes"
        )
    try:
        k = int(report["settings"]["draft_max"])
        return Trace.from_rounds(sync["trace"], k)
    except (KeyError, TypeError, ValueError):
        raise UsageError("the bench report's sync trace is malformed") from None


def _mode(report: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for m in report.get("modes", []):
        if isinstance(m, Mapping) and m.get("mode") == name:
            return m
    return None


@dataclass(frozen=True)
class Projection:
    mode: str
    projected: float  # tok/s
    measured: float | None = None  # tok/s, where known

    @property
    def error_percent(self) -> float | None:
        if not self.measured:
            return None
        return 100 * (self.projected - self.measured) / self.measured


def project_bench(
    report: Mapping[str, Any],
    profile: DeviceProfile,
    *,
    k: int,
    max_ahead: int,
    policy: str,
) -> list[Projection]:
    """Every mode, projected with `profile`, next to what the bench measured (if it did)."""
    trace = bench_trace(report)
    out = []
    for mode in SIM_MODES:
        result = simulate(mode, trace, profile, k=k, max_ahead=max_ahead, policy=policy)
        measured = _mode(report, mode)
        speed = None if measured is None else float(measured["tokens_per_second"])
        out.append(Projection(mode, result.tokens_per_second, speed))
    return out


@dataclass(frozen=True)
class SeedProjection:
    setup: SeedSetup
    k: int
    target: float
    sync: float
    duo: float


def project_seeds(trace: Trace, *, k: int, max_ahead: int, policy: str) -> list[SeedProjection]:
    out = []
    for seed in SEEDS:
        seed_k = min(seed.k or k, trace.k)
        p = seed.profile
        out.append(
            SeedProjection(
                seed,
                seed_k,
                simulate_target(trace, p).tokens_per_second,
                simulate_sync(trace, p, seed_k).tokens_per_second,
                simulate(
                    seed.mode, trace, p, k=seed_k, max_ahead=max_ahead, policy=policy
                ).tokens_per_second,
            )
        )
    return out


def bench_table(rows: list[Projection]) -> str:
    lines = [f"{'mode':10} {'projected':>10} {'measured':>9} {'error':>8}"]
    for r in rows:
        measured = "" if r.measured is None else f"{r.measured:.2f}"
        error = "" if r.error_percent is None else f"{r.error_percent:+.1f}%"
        lines.append(f"{r.mode:10} {r.projected:10.2f} {measured:>9} {error:>8}")
    return "\n".join(lines)


def seeds_table(rows: list[SeedProjection]) -> str:
    """Markdown: projected vs quoted tok/s for each seed setup."""
    lines = [
        "| setup | duo mode | k | target (sim) | target (seed) | sync (sim) "
        "| duo (sim) | duo (seed) | duo error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r.setup
        error = ""
        if s.reported_duo:
            error = f"{100 * (r.duo - s.reported_duo) / s.reported_duo:+.0f}%"
        lines.append(
            f"| {s.profile.name} | {s.mode} | {r.k} | {r.target:.2f} | {_num(s.reported_target)} "
            f"| {r.sync:.2f} | {r.duo:.2f} | {_num(s.reported_duo)} | {error} |"
        )
    return "\n".join(lines)


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


# -- the command -----------------------------------------------------------------------


def add_sim_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from duo.cli import positive

    p = sub.add_parser(
        "sim", help="project tok/s per mode from a bench's acceptance trace and device profiles"
    )
    p.add_argument(
        "--bench",
        required=True,
        metavar="BENCH.json",
        help="a duo bench --json report with a sync run (its acceptance trace is replayed)",
    )
    p.add_argument(
        "--profile",
        default="bench",
        metavar="NAME|FILE.json",
        help="bench: this machine as the report measured it (default); seeds: every seed "
        f"setup; or one of {', '.join(s.profile.name for s in SEEDS)}; or a JSON profile",
    )
    p.add_argument("--k", type=positive, help="draft tokens per round (default: the bench's)")
    p.add_argument("--policy", choices=("adaptive", "fixed"), help="default: the bench's")
    p.add_argument("--max-ahead", type=positive, metavar="N", help="default: the bench's")
    p.add_argument("--json", metavar="OUT", help="write the projections as JSON")
    p.set_defaults(func=cmd_sim)


def cmd_sim(args: argparse.Namespace) -> int:
    report = _load_json(args.bench, "bench report")
    settings = report.get("settings", {})
    trace = bench_trace(report)
    k = args.k or int(settings.get("draft_max", trace.k))
    max_ahead = args.max_ahead or int(settings.get("max_ahead", 12))
    policy = args.policy or str(settings.get("policy", "adaptive"))
    _check_k(trace, k)
    accept = sum(trace.lengths) / (k * len(trace.lengths)) if trace.lengths else 0.0
    print(
        f"acceptance trace: {len(trace.lengths)} sync rounds at k={trace.k} from {args.bench} "
        f"(acceptance rate {accept:.2f}); k={k}, max_ahead={max_ahead}, policy={policy}"
    )
    out: dict[str, Any] = {"bench": args.bench, "k": k, "max_ahead": max_ahead, "policy": policy}
    if args.profile == "seeds":
        print("acceptance on the seed hardware: this machine's pair (above), not the seeds' models")
        seeds = project_seeds(trace, k=k, max_ahead=max_ahead, policy=policy)
        print(seeds_table(seeds))
        for s in seeds:
            print(f"\n{s.setup.profile.name}: {s.setup.profile.note}")
        out["seeds"] = [
            {
                "profile": r.setup.profile.to_dict(),
                "mode": r.setup.mode,
                "k": r.k,
                "source": r.setup.source,
                "projected": {"target": r.target, "sync": r.sync, "duo": r.duo},
                "reported": {"target": r.setup.reported_target, "duo": r.setup.reported_duo},
            }
            for r in seeds
        ]
    else:
        profile = _profile(args.profile, report)
        rows = project_bench(report, profile, k=k, max_ahead=max_ahead, policy=policy)
        if args.profile != "bench":  # measured here, not on that hardware
            rows = [replace(r, measured=None) for r in rows]
        print(f"profile: {profile.name}: {profile.note}")
        print(bench_table(rows))
        out["profile"] = profile.to_dict()
        out["modes"] = [
            {
                "mode": r.mode,
                "projected": r.projected,
                "measured": r.measured,
                "error_percent": r.error_percent,
            }
            for r in rows
        ]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def _profile(name: str, report: Mapping[str, Any]) -> DeviceProfile:
    if name == "bench":
        return bench_profile(report)
    if name.endswith(".json"):
        return DeviceProfile.from_dict(_load_json(name, "profile"), source=name)
    return seed_profile(name)


def _load_json(path: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror}") from None
    except ValueError:
        raise UsageError(f"{path}: not JSON") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data
