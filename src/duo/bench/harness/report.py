"""What `duo bench` reports: each mode's figures (`ModeResult`), the run's settings and
device costs (`Report`), as a table and as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ModeResult:
    mode: str
    tokens_per_second: float
    tokens_per_second_runs: list[float]
    ttft_ms: float
    acceptance_rate: float
    mean_acceptance_length: float
    accepted_at: list[float]
    overhead_ms_per_round: float
    # duo's modes: a token's time split into the main model's passes (inside llama_decode)
    # and everything else of its rounds (logits read, sampling, verifying, drafts' choice,
    # bookkeeping); the peers' clocks do not split (see duo.bench.harness.llamacpp)
    pass_ms_per_token: float | None = None
    outside_pass_ms_per_token: float | None = None
    wire_bytes_per_token: float | None = None
    wire_messages_per_round: float | None = None  # lead+back: drafter-channel frames, both ways
    # rounds after a rejection, and the fraction of them (and of those after a full
    # acceptance) that found a usable draft ready when planned; None without drafts
    rounds_after_rejection: int = 0
    drafted_rounds: float | None = None  # the share of rounds that verified a draft
    ready_after_rejection: float | None = None
    ready_after_acceptance: float | None = None
    # lead+back: the lead process's CPU time outside the main model's passes (event loop,
    # drafter messages, API streaming, bookkeeping) per generated token (Linux only)
    lead_cpu_ms_per_token: float | None = None
    speedup_vs_target_1: float | None = None
    speedup_vs_sync: float | None = None
    fanout: int | None = None  # the model drafter's branches (--fanout); None: no drafter
    rtt_ms: float | None = None  # the link's round trip between lead and back (--rtt)
    devices: str = ""
    trace: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per round
    # per draft source: {"draft_n", "draft_n_accepted", "draft_n_received", "acceptance_rate"}
    sources: dict[str, dict[str, float]] = field(default_factory=dict)
    placement: str = ""  # default: the threads and draft sources it ended on


@dataclass
class Report:
    machine: dict[str, Any]
    settings: dict[str, Any]
    modes: list[ModeResult] = field(default_factory=list)
    ceiling_tokens_per_second: float | None = None
    profile: dict[str, Any] = field(default_factory=dict)  # measured device costs

    def table(self) -> str:
        w = max([14, *(len(m.mode) for m in self.modes)])
        rows = [
            f"{'mode':{w}} {'tok/s':>7} {'vs t-1':>7} {'vs sync':>8} {'ttft ms':>8} "
            f"{'accept':>7} {'mean len':>9} {'rdy/rej':>7} {'ovh ms':>7} {'B/tok':>6}  devices"
        ]
        for m in self.modes:
            rows.append(
                f"{m.mode:{w}} {m.tokens_per_second:7.1f} {_x(m.speedup_vs_target_1):>7} "
                f"{_x(m.speedup_vs_sync):>8} {m.ttft_ms:8.1f} {m.acceptance_rate:7.2f} "
                f"{m.mean_acceptance_length:9.2f} {_fraction(m.ready_after_rejection):>7} "
                f"{m.overhead_ms_per_round:7.2f} "
                f"{'' if m.wire_bytes_per_token is None else f'{m.wire_bytes_per_token:.1f}':>6}"
                f"  {m.devices}"
            )
        for m in self.modes:
            if len(m.sources) > 1 or (m.sources and m.mode not in ("sync", "async")):
                parts = [
                    f"{name} {x['draft_n_accepted']:.0f}/{x['draft_n']:.0f}"
                    for name, x in sorted(m.sources.items(), key=lambda kv: -kv[1]["draft_n"])
                ]
                rows.append(f"  {m.mode}: accepted/verified by source: {', '.join(parts)}")
        if self.ceiling_tokens_per_second:
            rows.append(
                f"ceiling (a drafter that costs nothing, at sync's measured agreement): "
                f"{self.ceiling_tokens_per_second:.1f} tok/s"
            )
        if self.profile:
            rows.append(profile_line(self.profile))
        return "\n".join(rows)


def profile_line(profile: dict[str, Any]) -> str:
    """The device costs in one line, with how much the host drifted during the run."""
    main = profile["main_ms_by_batch"]
    parts = [f"main {main[1]:.1f} ms (1 token), {main[max(main)]:.1f} ms ({max(main)} tokens)"]
    if "draft_ms_by_batch" in profile:
        parts.append(f"draft {profile['draft_ms_by_batch'][1]:.1f} ms/token")
    drift = max(profile["drift_percent"].values())
    return (
        f"device costs after {profile['context_tokens']} tokens of context: {', '.join(parts)}; "
        f"median of {profile['rounds']} rounds spread over the run, which drifted {drift:.0f}%"
    )


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def _fraction(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def to_json(report: Report) -> str:
    return json.dumps(asdict(report), indent=1)
