"""`duo sim`: projections from a bench report's acceptance trace and device profiles."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from duo.bench.sim.profiles import (
    SEEDS,
    DeviceProfile,
    bench_profile,
    is_measured,
    measured_profiles,
    seed_profile,
)
from duo.bench.sim.projections import (
    LINKS,
    Projection,
    bench_table,
    bench_trace,
    clients_table,
    free_rounds,
    placements_table,
    project_bench,
    project_seed_links,
    project_seeds,
    seed_links_table,
    seeds_table,
)
from duo.bench.sim.trace import Trace, check_k
from duo.cli.values import client_counts, non_negative, positive
from duo.errors import UsageError


def add_sim_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        f"setup; or one of {', '.join(s.profile.name for s in SEEDS)}; or a JSON profile: "
        "one setup, or a device-costs file (scripts/gpu/check.sh writes one), a setup per "
        "placement of the two models on its devices",
    )
    p.add_argument("--k", type=positive, help="draft tokens per round (default: the bench's)")
    p.add_argument("--policy", choices=("adaptive", "fixed"), help="default: the bench's")
    p.add_argument("--max-ahead", type=positive, metavar="N", help="default: the bench's")
    p.add_argument(
        "--fanout",
        type=non_negative,
        default=0,
        metavar="F",
        help="the async drafter's branches (duo generate --fanout), as the simulator models "
        "them (default 0)",
    )
    p.add_argument(
        "--clients",
        type=client_counts,
        metavar="1,2,4",
        help="instead: aggregate tok/s of that many clients decoded together (duo lead "
        "--parallel), the main model alone and with the bench's free-drafter rounds",
    )
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
    out: dict[str, Any] = {
        "bench": args.bench, "k": k, "max_ahead": max_ahead, "policy": policy,
        "fanout": args.fanout,
    }  # fmt: skip
    if args.clients:
        profiles = (
            [s.profile for s in SEEDS]
            if args.profile == "seeds"
            else _profiles(args.profile, report)
        )
        table, out["clients"] = clients_table(profiles, args.clients, free_rounds(report))
        print(table)
    elif args.profile == "seeds":
        out |= _seeds(trace, report, k, max_ahead, policy, args.fanout)
    else:
        out |= _bench(args, report, k, max_ahead, policy)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def _seeds(
    trace: Trace, report: dict[str, Any], k: int, max_ahead: int, policy: str, fanout: int
) -> dict[str, Any]:
    """Projections to the seeds' hardware, printed; their JSON."""
    out: dict[str, Any] = {}
    print("acceptance on the seed hardware: this machine's pair (above), not the seeds' models")
    seeds = project_seeds(
        trace,
        k=k,
        max_ahead=max_ahead,
        policy=policy,
        free=free_rounds(report),
        fanout=fanout,
    )
    print(seeds_table(seeds))
    links = project_seed_links(trace, k=k, max_ahead=max_ahead, policy=policy, fanout=fanout)
    print("\nlead+back with the back on another host, across a link (tok/s):")
    print(seed_links_table(links))
    out["seed_links"] = [
        {"profile": seed.profile.name, "k": lk, "target": target,
         "lead_back": {name: v for (name, _, _), v in zip(LINKS, speeds, strict=True)}}
        for seed, lk, target, speeds in links
    ]  # fmt: skip
    for s in seeds:
        print(f"\n{s.setup.profile.name}: {s.setup.profile.note}")
    out["seeds"] = [
        {
            "profile": r.setup.profile.to_dict(),
            "mode": r.setup.mode,
            "k": r.k,
            "source": r.setup.source,
            "projected": {"target": r.target, "sync": r.sync, "duo": r.duo, "free": r.free},
            "reported": {"target": r.setup.reported_target, "duo": r.setup.reported_duo},
        }
        for r in seeds
    ]
    return out


def _bench(
    args: argparse.Namespace, report: dict[str, Any], k: int, max_ahead: int, policy: str
) -> dict[str, Any]:
    """Projections of the bench's modes to a device profile (or to each placement of a
    device-costs file), printed; their JSON."""
    out: dict[str, Any] = {}
    profiles = _profiles(args.profile, report)
    projected: list[tuple[DeviceProfile, list[Projection]]] = []
    for profile in profiles:
        rows = project_bench(
            report, profile, k=k, max_ahead=max_ahead, policy=policy, fanout=args.fanout
        )
        if args.profile != "bench":  # measured here, not on that hardware
            rows = [replace(r, measured=None) for r in rows]
        projected.append((profile, rows))
    if len(projected) == 1:
        profile, rows = projected[0]
        print(f"profile: {profile.name}: {profile.note}")
        print(bench_table(rows))
        out["profile"] = profile.to_dict()
        out["modes"] = _modes(rows)
    else:  # a device-costs file: a setup per placement
        print(f"acceptance: this machine's pair (above), not {args.profile}'s models")
        print(placements_table(projected))
        for profile, _ in projected:
            print(f"\n{profile.name}: {profile.note}")
        out["placements"] = [
            {"profile": p.to_dict(), "modes": _modes(rows)} for p, rows in projected
        ]
    return out


def _modes(rows: list[Projection]) -> list[dict[str, Any]]:
    return [
        {
            "mode": r.mode,
            "projected": r.projected,
            "measured": r.measured,
            "error_percent": r.error_percent,
        }
        for r in rows
    ]


def _profiles(name: str, report: Mapping[str, Any]) -> list[DeviceProfile]:
    if name == "bench":
        return [bench_profile(report)]
    if name.endswith(".json"):
        data = _load_json(name, "profile")
        if is_measured(data):
            return measured_profiles(data, source=name)
        return [DeviceProfile.from_dict(data, source=name)]
    return [seed_profile(name)]


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
