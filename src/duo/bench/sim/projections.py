"""`duo sim`: projections for this machine (against what `duo bench` measured) and for
the seeds' setups (against what the seeds report), from the profiles in duo.bench.sim.profiles
replayed through the simulator in duo.bench.sim.sim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from duo.bench.sim.profiles import SEEDS, DeviceProfile, SeedSetup
from duo.bench.sim.sim import (
    remote_draft_ms_per_token,
    simulate,
    simulate_clients,
    simulate_free,
    simulate_sync,
    simulate_target,
)
from duo.bench.sim.trace import Trace
from duo.bench.variants import REMOTE_DRAFT, SIM_MODES, parse_variant
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
    fanout: int = 0,
) -> list[Projection]:
    """Every mode, projected with `profile`, next to what the bench measured (if it did)."""
    trace = bench_trace(report)
    out = []
    for mode in SIM_MODES:
        result = simulate(
            mode, trace, profile, k=k, max_ahead=max_ahead, policy=policy, fanout=fanout
        )
        measured = _mode(report, mode)
        speed = None if measured is None else float(measured["tokens_per_second"])
        out.append(Projection(mode, result.tokens_per_second, speed))
    free = free_rounds(report)
    if free is not None:
        rounds, overhead_ms, measured_speed = free
        projected = simulate_free(rounds, profile, overhead_ms).tokens_per_second
        out.append(Projection("free-1", projected, measured_speed))
    for label, rtt, measured_speed in link_runs(report):
        # the link's delay each way, on top of what loopback already costs a message
        far = replace(profile, network_latency_ms=profile.network_latency_ms + rtt / 2)
        result = simulate(
            "lead+back", trace, far, k=k, max_ahead=max_ahead, policy=policy, fanout=fanout
        )
        out.append(Projection(label, result.tokens_per_second, measured_speed))
    out += remote_draft_projections(report)
    return out


def remote_draft_projections(report: Mapping[str, Any]) -> list[Projection]:
    """Each llama-server-rd run across a longer link, projected from the run at the
    shortest one (its own speed and rounds) by `remote_draft_ms_per_token`."""
    runs = []
    for m in report.get("modes", []):
        mode, _, rtt = parse_variant(str(m.get("mode", "")))
        if mode == REMOTE_DRAFT and rtt is not None and m["tokens_per_second"] > 0:
            runs.append((rtt, m))
    if len(runs) < 2:
        return []
    runs.sort(key=lambda r: r[0])
    base_rtt, base = runs[0]
    per_round = float(base["mean_acceptance_length"])  # tokens a round: accepted + 1
    drafted = (per_round - 1) / base["acceptance_rate"] if base["acceptance_rate"] else 0.0
    base_ms = 1000 / float(base["tokens_per_second"])
    return [
        Projection(
            str(m["mode"]),
            1000 / remote_draft_ms_per_token(base_ms, per_round, drafted, rtt - base_rtt),
            float(m["tokens_per_second"]),
        )
        for rtt, m in runs[1:]
    ]


def link_runs(report: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(label, round trip in ms, tok/s) of each lead+back run across a delayed link
    (`duo bench --rtt`), at fan-out 0 where several were measured."""
    out = []
    for m in report.get("modes", []):
        label = str(m.get("mode", ""))
        mode, fanout, rtt = parse_variant(label)
        if mode == "lead+back" and rtt is not None and not fanout:
            out.append((label, rtt, float(m["tokens_per_second"])))
    return out


def free_rounds(report: Mapping[str, Any]) -> tuple[list[list[int]], float, float] | None:
    """The free-1 run's rounds, its lead overhead per round and its speed, if it has any."""
    free = _mode(report, "free-1")
    if free is None or not free.get("trace"):
        return None
    return free["trace"], float(free["overhead_ms_per_round"]), float(free["tokens_per_second"])


@dataclass(frozen=True)
class SeedProjection:
    setup: SeedSetup
    k: int
    target: float
    sync: float
    duo: float
    free: float | None = None  # free drafters alone, from the bench's free-1 rounds


def project_seeds(
    trace: Trace,
    *,
    k: int,
    max_ahead: int,
    policy: str,
    free: tuple[list[list[int]], float, float] | None = None,
    fanout: int = 0,
) -> list[SeedProjection]:
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
                    seed.mode,
                    trace,
                    p,
                    k=seed_k,
                    max_ahead=max_ahead,
                    policy=policy,
                    fanout=fanout,
                ).tokens_per_second,
                None if free is None else simulate_free(free[0], p, free[1]).tokens_per_second,
            )
        )
    return out


# Links between a lead and a back on another host: (name, round trip ms, bytes/s)
LINKS = (("1 GbE", 0.2, 125e6), ("Wi-Fi", 5.0, 30e6), ("WAN", 50.0, 12.5e6))


def project_seed_links(
    trace: Trace, *, k: int, max_ahead: int, policy: str, fanout: int = 0
) -> list[tuple[SeedSetup, int, float, list[float]]]:
    """Each seed's devices as a lead and a back on two hosts (no contention between the
    models), across each of LINKS: (setup, k, the main model alone, lead+back per link)."""
    out = []
    for seed in SEEDS:
        seed_k = min(seed.k or k, trace.k)
        apart = replace(seed.profile, main_concurrent_slowdown=1.0, draft_concurrent_slowdown=1.0)
        speeds = [
            simulate(
                "lead+back",
                trace,
                replace(apart, network_latency_ms=rtt / 2, network_bytes_per_s=rate),
                k=seed_k,
                max_ahead=max_ahead,
                policy=policy,
                fanout=fanout,
            ).tokens_per_second
            for _, rtt, rate in LINKS
        ]
        out.append((seed, seed_k, simulate_target(trace, apart).tokens_per_second, speeds))
    return out


def seed_links_table(rows: list[tuple[SeedSetup, int, float, list[float]]]) -> str:
    head = " | ".join(f"{name} ({rtt:g} ms)" for name, rtt, _ in LINKS)
    lines = [f"| setup | k | target (sim) | {head} |", "|---|---|---|" + "---|" * len(LINKS)]
    for seed, k, target, speeds in rows:
        cells = " | ".join(f"{v:.2f}" for v in speeds)
        lines.append(f"| {seed.profile.name} | {k} | {target:.2f} | {cells} |")
    return "\n".join(lines)


def bench_table(rows: list[Projection]) -> str:
    w = max([10, *(len(r.mode) for r in rows)])
    lines = [f"{'mode':{w}} {'projected':>10} {'measured':>9} {'error':>8}"]
    for r in rows:
        measured = "" if r.measured is None else f"{r.measured:.2f}"
        error = "" if r.error_percent is None else f"{r.error_percent:+.1f}%"
        lines.append(f"{r.mode:{w}} {r.projected:10.2f} {measured:>9} {error:>8}")
    return "\n".join(lines)


def placements_table(rows: Sequence[tuple[DeviceProfile, Sequence[Projection]]]) -> str:
    """Markdown: projected tok/s of each mode (columns) for each placement (rows)."""
    modes = list(dict.fromkeys(r.mode for _, projections in rows for r in projections))
    lines = [
        "| placement | " + " | ".join(modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    for profile, projections in rows:
        by_mode = {r.mode: r.projected for r in projections}
        cells = " | ".join(_num(by_mode.get(m)) for m in modes)
        lines.append(f"| {profile.name} | {cells} |")
    return "\n".join(lines)


def seeds_table(rows: list[SeedProjection]) -> str:
    """Markdown: projected vs quoted tok/s for each seed setup."""
    lines = [
        "| setup | duo mode | k | target (sim) | target (seed) | sync (sim) "
        "| duo (sim) | duo (seed) | duo error | free (sim) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r.setup
        error = ""
        if s.reported_duo:
            error = f"{100 * (r.duo - s.reported_duo) / s.reported_duo:+.0f}%"
        lines.append(
            f"| {s.profile.name} | {s.mode} | {r.k} | {r.target:.2f} | {_num(s.reported_target)} "
            f"| {r.sync:.2f} | {r.duo:.2f} | {_num(s.reported_duo)} | {error} | {_num(r.free)} |"
        )
    return "\n".join(lines)


def clients_table(
    profiles: Sequence[DeviceProfile],
    counts: Sequence[int],
    free: tuple[list[list[int]], float, float] | None,
) -> tuple[str, list[dict[str, Any]]]:
    """Markdown: aggregate tok/s of c clients decoded together (duo lead --parallel),
    the main model alone and with free drafters, per profile; and the rows as data."""
    lines = [
        "| profile | clients | main alone (sim) | x 1 client | free drafters (sim) | x 1 client |",
        "|---|---|---|---|---|---|",
    ]
    rows: list[dict[str, Any]] = []
    for p in profiles:
        base = {"plain": 0.0, "free": 0.0}
        for c in counts:
            plain = simulate_clients([], p, c, 0.0).tokens_per_second
            with_free = (
                None if free is None else simulate_clients(free[0], p, c, free[1]).tokens_per_second
            )
            if c == counts[0]:
                base = {"plain": plain, "free": with_free or 0.0}
            rows.append({"profile": p.name, "clients": c, "plain": plain, "free": with_free})
            scale_free = "—" if with_free is None else f"{with_free / base['free']:.2f}x"
            lines.append(
                f"| {p.name} | {c} | {plain:.1f} | {plain / base['plain']:.2f}x "
                f"| {_num(with_free)} | {scale_free} |"
            )
    return "\n".join(lines), rows


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"
