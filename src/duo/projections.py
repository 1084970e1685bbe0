"""`duo sim`'s profiles, projections and command: this machine (from a `duo bench` report)
and the seeds' setups, replayed through the simulator in duo.sim.

Every seed profile quotes the figures its seed reports and marks every other figure as an
assumption in its note; projections never present an assumption as a measurement.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from duo.errors import UsageError
from duo.sim import (
    SIM_MODES,
    DeviceProfile,
    Trace,
    check_k,
    memory_bound,
    roofline,
    simulate,
    simulate_sync,
    simulate_target,
)

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
    check_k(trace, k)
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
