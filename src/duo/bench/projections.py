"""`duo sim`: projections for this machine (against what `duo bench` measured) and for
the seeds' setups (against what the seeds report), from the profiles in duo.profiles
replayed through the simulator in duo.sim.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from duo.bench.profiles import SEEDS, DeviceProfile, SeedSetup, bench_profile, seed_profile
from duo.bench.sim import (
    SIM_MODES,
    Trace,
    check_k,
    simulate,
    simulate_sync,
    simulate_target,
)
from duo.errors import UsageError

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
    from duo.cli.main import positive

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
