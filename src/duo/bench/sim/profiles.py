"""Device profiles for `duo sim`: what it needs to know about the hardware of a setup
(`DeviceProfile`), and the profiles of this machine (from a `duo bench` report) and of the
seeds' setups.

Every seed profile quotes the figures its seed reports and marks every other figure as an
assumption in its note; nothing assumed is presented as a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from duo.bench.variants import parse_variant
from duo.core.policy import CostModel
from duo.errors import UsageError

MESSAGE_BYTES = 64  # one commit or draft message on the wire, framing included (assumed)


@dataclass(frozen=True)
class DeviceProfile:
    """What the simulator needs to know about the hardware of one setup."""

    name: str
    main_ms_by_batch: Mapping[int, float]  # main pass time by batch size (at least 1)
    draft_ms: float  # one draft token on the drafter's device
    draft_catchup_ms: float | None = None  # re-evaluate after a rejection (None: draft_ms)
    # the draft model's pass time by batch size: a drafter waking from a rest evaluates
    # the commits it missed in one batch (None: that costs draft_catchup_ms too)
    draft_ms_by_batch: Mapping[int, float] | None = None
    main_concurrent_slowdown: float = 1.0  # main pass time x this while the drafter computes
    draft_concurrent_slowdown: float = 1.0  # draft step time x this while the main computes
    network_latency_ms: float = 0.0  # one way, lead <-> back (lead+back only)
    network_bytes_per_s: float | None = None  # None: no bandwidth limit
    lead_cpu_ms_per_token: float = 0.0  # lead service CPU outside main passes (lead+back)
    note: str = ""  # where each number comes from: measured, quoted or assumed

    def main_ms(self, batch: int) -> float:
        return CostModel(dict(self.main_ms_by_batch)).cost(batch)

    @property
    def catchup_ms(self) -> float:
        return self.draft_ms if self.draft_catchup_ms is None else self.draft_catchup_ms

    def catchup_batch_ms(self, tokens: int) -> float:
        """Re-evaluating `tokens` committed tokens at once (at least one catch-up)."""
        if self.draft_ms_by_batch is None or tokens <= 1:
            return self.catchup_ms
        return max(self.catchup_ms, CostModel(dict(self.draft_ms_by_batch)).cost(tokens))

    def message_ms(self) -> float:
        transfer = 0.0
        if self.network_bytes_per_s:
            transfer = 1000 * MESSAGE_BYTES / self.network_bytes_per_s
        return self.network_latency_ms + transfer

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("main_ms_by_batch", "draft_ms_by_batch"):
            costs = getattr(self, key)
            d[key] = None if costs is None else {str(b): ms for b, ms in sorted(costs.items())}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "profile") -> DeviceProfile:
        try:
            main = {int(b): float(ms) for b, ms in d["main_ms_by_batch"].items()}
            draft = d.get("draft_ms_by_batch")
            if draft is not None:
                draft = {int(b): float(ms) for b, ms in draft.items()}
            profile = cls(
                **{
                    **d,
                    "main_ms_by_batch": main,
                    "draft_ms_by_batch": draft,
                    "name": str(d.get("name", source)),
                }
            )
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


def bench_profile(report: Mapping[str, Any]) -> DeviceProfile:
    """This machine, as `duo bench` measured it (report["profile"])."""
    try:
        prof = report["profile"]
        main = {int(b): float(ms) for b, ms in prof["main_ms_by_batch"].items()}
        draft_by_batch = {int(b): float(ms) for b, ms in prof["draft_ms_by_batch"].items()}
        draft = draft_by_batch[1]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UsageError(
            "the bench report has no device profile (main and draft ms): run duo bench "
            "without --no-costs"
        ) from None
    main_slow = float(prof.get("main_concurrent_slowdown", 1.0))
    draft_slow = float(prof.get("draft_concurrent_slowdown", 1.0))
    measured = (
        "concurrent slowdowns measured"
        if "main_concurrent_slowdown" in prof
        else ("concurrent slowdown not in this report (older bench): 1.0 assumed")
    )
    lead_cpu = next(
        (
            float(m["lead_cpu_ms_per_token"])
            for m in report.get("modes", [])
            if parse_variant(str(m.get("mode")))[0] == "lead+back"
            and m.get("lead_cpu_ms_per_token") is not None
        ),
        None,
    )
    lead_note = (
        f"the lead service's CPU outside main passes measured ({lead_cpu:.2f} ms/token)"
        if lead_cpu is not None
        else "the lead service's CPU outside main passes not measured (0 assumed)"
    )
    return DeviceProfile(
        name="this machine",
        main_ms_by_batch=main,
        draft_ms=draft,
        draft_ms_by_batch=draft_by_batch if len(draft_by_batch) > 1 else None,
        main_concurrent_slowdown=main_slow,
        draft_concurrent_slowdown=draft_slow,
        network_latency_ms=0.3,
        lead_cpu_ms_per_token=lead_cpu or 0.0,
        note=(
            "measured by duo bench: main and draft ms by batch size, each alone on its pinned "
            f"cores; {measured}; {lead_note}. Assumed: a catch-up after a rejection costs one "
            "draft token; lead+back over loopback adds 0.3 ms per message one way (not measured)."
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


# -- measured device costs ---------------------------------------------------------------

MEASURED_FORMAT = "duo-device-costs/1"
MEASURED_DEVICES = ("gpu", "cpu")


def is_measured(d: Mapping[str, Any]) -> bool:
    """A device-costs file (scripts/gpu/check.sh writes one), not a single DeviceProfile."""
    return d.get("format") == MEASURED_FORMAT


def measured_profiles(d: Mapping[str, Any], source: str = "profile") -> list[DeviceProfile]:
    """A profile per placement of the two models on the devices a device-costs file times.

    The file (format "duo-device-costs/1"; scripts/gpu/check.sh writes one, and
    tests/unit/bench/sim/device_costs.json is a small example):

        device     the machine, in words ("NVIDIA H100 80GB HBM3, 16 cores")
        date       when it was measured (YYYY-MM-DD)
        models     {"main": ..., "draft": ...}: what was timed
        costs_ms   {"gpu": {"main": {"1": ms, "2": ms, "4": ms, "8": ms, "16": ms},
                            "draft": {...}, "threads": n},
                    "cpu": {...}}: a pass's time by batch size, each model alone on that
                   device (logits for every position, after a few tokens of context);
                   one device or both
        slowdown   optional, by placement ("main gpu, draft cpu"): {"main": x, "draft": y},
                   each model's time x this while the other computes (default 1.0)
        note       optional: how it was measured

    Placements with both models on one device assume no slowdown unless `slowdown` says
    one, and their note says so."""
    device, date, costs, slowdowns, names = _read_device_costs(d, source)
    out = []
    for main_at in MEASURED_DEVICES:
        for draft_at in MEASURED_DEVICES:
            if main_at not in costs or draft_at not in costs:
                continue
            placement = f"main {main_at}, draft {draft_at}"
            slow = slowdowns.get(placement, {})
            if slow:
                contention = "slowdowns while both compute as the file gives them"
            elif main_at == draft_at:
                contention = (
                    "both on one device: the slowdown while both compute not measured (1.0 assumed)"
                )
            else:
                contention = "separate devices: no slowdown assumed"
            draft = costs[draft_at]["draft"]
            out.append(
                DeviceProfile(
                    name=f"{device}: {placement}",
                    main_ms_by_batch=costs[main_at]["main"],
                    draft_ms=draft[1],
                    draft_ms_by_batch=draft if len(draft) > 1 else None,
                    main_concurrent_slowdown=float(slow.get("main", 1.0)),
                    draft_concurrent_slowdown=float(slow.get("draft", 1.0)),
                    network_latency_ms=0.3,
                    note=(
                        f"measured {date} on {device} ({source}): main {names.get('main', '?')} "
                        f"on the {main_at}, draft {names.get('draft', '?')} on the {draft_at}, "
                        f"pass times by batch size, each alone; {contention}. Assumed: a "
                        "catch-up after a rejection costs one draft token; lead+back over "
                        "loopback adds 0.3 ms per message one way."
                    ),
                )
            )
    return out


def _read_device_costs(
    d: Mapping[str, Any], source: str
) -> tuple[str, str, dict[str, dict[str, dict[int, float]]], dict[str, Any], Mapping[str, Any]]:
    """A device-costs file's fields (measured_profiles), checked: the device, the date,
    the costs by device, model and batch size, the slowdowns, the models' names."""
    try:
        device, date = str(d["device"]), str(d["date"])
        costs: dict[str, dict[str, dict[int, float]]] = {}
        for where, models in d["costs_ms"].items():
            if where not in MEASURED_DEVICES:
                raise ValueError(f"device {where!r} is not one of {', '.join(MEASURED_DEVICES)}")
            costs[where] = {
                m: {int(b): float(ms) for b, ms in models[m].items()} for m in ("main", "draft")
            }
        slowdowns = {str(k): v for k, v in d.get("slowdown", {}).items()}
        names = d.get("models", {})
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{source}: not a device-costs file ({e})") from None
    if not costs:
        raise UsageError(f"{source}: costs_ms times no device")
    for where, models in costs.items():
        for m, by_batch in models.items():
            if 1 not in by_batch or min(by_batch.values()) <= 0:
                raise UsageError(f"{source}: {where} {m} needs a positive time for batch 1")
    return device, date, costs, slowdowns, names
