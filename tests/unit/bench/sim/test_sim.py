"""duo sim: the trace-driven simulator on tiny, hand-checkable cases (no models)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from duo.bench.sim.profiles import SEEDS, DeviceProfile, bench_profile
from duo.bench.sim.projections import (
    LINKS,
    project_bench,
    project_seed_links,
    project_seeds,
    remote_draft_projections,
    seeds_table,
)
from duo.bench.sim.sim import (
    DRAFTER,
    FANOUT_HIT,
    RIGHT,
    WRONG,
    Drafter,
    proposals,
    remote_draft_ms_per_token,
    simulate,
    simulate_async,
    simulate_sync,
    simulate_target,
)
from duo.bench.sim.trace import Trace
from duo.cli.main import main
from duo.core.draft import Proposal
from duo.core.policy import CostModel
from duo.errors import UsageError

FREE = 1e-9  # a drafter that costs (next to) nothing
NEVER = 10**9  # explore_every that never explores


def gpu(draft_ms: float = FREE, **kw: float) -> DeviceProfile:
    """Batches cost barely more than one token: 10 ms, 12 ms for 9."""
    return DeviceProfile("gpu", {1: 10.0, 9: 12.0}, draft_ms, **kw)  # type: ignore[arg-type]


def flat(main_ms: float = 10.0, draft_ms: float = 2.0) -> DeviceProfile:
    """Any batch costs what one token costs."""
    return DeviceProfile("flat", {1: main_ms, 9: main_ms}, draft_ms)


def costly(draft_ms: float = 3.0) -> DeviceProfile:
    """A compute-bound CPU: two tokens cost 2.5x one."""
    return DeviceProfile("cpu", {1: 10.0, 2: 25.0, 9: 60.0}, draft_ms)


def trace(a: int, rounds: int = 400, k: int = 8) -> Trace:
    """Every round agrees for exactly a tokens."""
    return Trace((a,) * rounds, k)


def geometric(q: float, rounds: int = 600, k: int = 8) -> Trace:
    """Each draft token is accepted with chance q: an irregular trace, always the same."""
    rng = random.Random(1)
    lengths = []
    for _ in range(rounds):
        a = 0
        while a < k and rng.random() < q:
            a += 1
        lengths.append(a)
    return Trace(tuple(lengths), k)


# -- traces ------------------------------------------------------------------------------


def test_a_trace_becomes_match_flags_and_runs() -> None:
    t = Trace((2, 0, 3), k=3)
    flags = t.matches()
    # 2 accepted + the correction, 0 + the correction, 3 (all) + an unobserved bonus flag
    assert flags[:7] == [True, True, False, False, True, True, True]
    assert len(flags) == 8
    runs = t.runs()
    assert runs[:7] == [2, 1, 0, 0, 3 + flags[7], 2 + flags[7], 1 + flags[7]]


def test_bonus_flags_are_filled_at_the_deepest_measured_rate() -> None:
    always = Trace((4,) * 100, k=4)  # p(3) ~ 1: nearly every bonus position matches too
    assert sum(always.matches()) >= 490
    # half the rounds accept all k: the deepest conditional rate is ~1/2
    half = Trace((4, 3) * 100, k=4)
    filled = [f for f, a in zip(_bonus_flags(half), (4, 3) * 100, strict=True) if a == 4]
    assert 40 <= sum(filled) <= 60


def _bonus_flags(t: Trace) -> list[bool]:
    flags, out, p = t.matches(), [], 0
    for a in t.lengths:
        p += a
        out.append(flags[p])
        p += 1
    return out


def test_bench_rounds_drop_empty_drafts_and_cap_at_k() -> None:
    t = Trace.from_rounds([(8, 3), (0, 0), (8, 8), (5, 5), (2, 1)], k=8)
    assert t.lengths == (3, 8, 5, 1)
    with pytest.raises(UsageError):
        Trace((9,), k=8)


# -- target and sync ---------------------------------------------------------------------


def test_target_is_one_token_per_single_pass() -> None:
    assert simulate_target(trace(3), flat(12.5)).tokens_per_second == pytest.approx(80.0)


def test_sync_with_a_perfect_free_drafter_emits_k_plus_1_per_batch_pass() -> None:
    for k in (1, 4, 8):
        result = simulate_sync(trace(8), gpu(), k)
        expected = 1000 * (k + 1) / gpu().main_ms(k + 1)
        assert result.tokens_per_second == pytest.approx(expected, rel=3e-3)  # but the end


def test_sync_with_zero_acceptance_is_slower_than_target_by_the_draft_cost() -> None:
    p = flat(main_ms=10.0, draft_ms=2.0)
    sync = simulate_sync(trace(0), p, k=4)
    assert sync.tokens_per_second == pytest.approx(1000 / (10.0 + 4 * 2.0))
    assert sync.tokens_per_second < simulate_target(trace(0), p).tokens_per_second


def test_sync_replays_the_recorded_rounds() -> None:
    t = Trace((3, 0, 8, 5, 1), k=8)
    result = simulate_sync(t, flat(), k=8)
    assert (result.rounds, result.accepted, result.tokens) == (5, 17, 22)


def test_k_past_the_recorded_one_is_refused() -> None:
    with pytest.raises(UsageError, match="k=4"):
        simulate_sync(trace(2, k=4), flat(), k=5)


# -- async -------------------------------------------------------------------------------


def test_async_with_a_perfect_free_drafter_verifies_k_per_round() -> None:
    k = 4
    result = simulate_async(trace(8), gpu(), k, max_ahead=12, policy="fixed")
    expected = 1000 * (k + 1) / gpu().main_ms(k + 1)
    assert result.tokens_per_second == pytest.approx(expected, rel=0.03)
    adaptive = simulate_async(trace(8), gpu(), k, max_ahead=12)  # cheap batches: verify all
    assert adaptive.tokens_per_second == pytest.approx(expected, rel=0.03)


def test_a_useless_drafter_gives_target_speed_under_the_adaptive_policy() -> None:
    target = simulate_target(trace(0), costly()).tokens_per_second
    # Never right: after every commit it must catch up, and the lead has moved on, so
    # none of its drafts is ever usable, under any policy.
    for policy in ("adaptive", "fixed"):
        never = simulate_async(trace(0), costly(), 8, max_ahead=12, policy=policy)
        assert never.tokens_per_second == pytest.approx(target)
        assert never.drafted == 0
    # Rarely right: its drafts are offered, but not worth verifying on this hardware.
    rare = geometric(0.15)
    quiet = simulate_async(rare, costly(), 8, max_ahead=12, explore_every=NEVER)
    assert quiet.tokens_per_second == pytest.approx(target)
    assert quiet.drafted == 0
    # Exploring every 8th offered draft costs a little; verifying them all costs a lot.
    exploring = simulate_async(rare, costly(), 8, max_ahead=12)
    fixed = simulate_async(rare, costly(), 8, max_ahead=12, policy="fixed")
    assert fixed.tokens_per_second < 0.9 * target < exploring.tokens_per_second < target


def test_more_acceptance_is_never_slower_in_sync_nor_where_batches_are_cheap() -> None:
    qs = [q / 10 for q in range(10)]
    for profile in (gpu(draft_ms=2.0), flat(), costly()):
        speeds = [simulate_sync(geometric(q), profile, 8).tokens_per_second for q in qs]
        assert speeds == sorted(speeds), (profile.name, speeds)
    for mode in ("async", "lead+back"):
        for policy in ("adaptive", "fixed"):
            speeds = [
                simulate(
                    mode, geometric(q), gpu(draft_ms=2.0), k=8, max_ahead=12, policy=policy
                ).tokens_per_second
                for q in qs
            ]
            assert speeds == sorted(speeds), (mode, policy, speeds)
    # Where a batch costs 2.5x one token, a drafter that is sometimes right costs the
    # lead its exploration rounds, while a useless one is never even offered: the adaptive
    # policy keeps that cost small, but async is not monotonic there (see above).


def test_the_lead_never_waits_for_a_slow_drafter() -> None:
    slow = gpu(draft_ms=1000.0)  # one guess per 100 main passes
    result = simulate_async(trace(8), slow, 8, max_ahead=12, policy="fixed")
    target = simulate_target(trace(8), slow).tokens_per_second
    assert target * 0.95 < result.tokens_per_second < target * 1.2


def test_contention_slows_the_main_pass_only_while_the_drafter_computes() -> None:
    base = DeviceProfile("p", {1: 10.0}, draft_ms=5.0, main_concurrent_slowdown=2.0)
    # A useless drafter that guesses one token ahead: after each commit it catches up
    # (5 ms) and idles. Each pass: 5 ms at half speed (2.5 ms of work) + 7.5 ms = 12.5 ms.
    # (The fixed policy never asks a drafter to rest.)
    result = simulate_async(trace(0, rounds=50), base, 8, max_ahead=1, policy="fixed")
    assert result.ms / result.tokens == pytest.approx(12.5)
    # Drafting far ahead keeps it busy all the time: every pass takes twice as long.
    busy = simulate_async(trace(0, rounds=50), base, 8, max_ahead=12, policy="fixed")
    assert busy.ms / busy.tokens == pytest.approx(20.0)
    # The adaptive policy sees that no draft is ever ready and rests it: 10 ms passes,
    # but for the rounds it takes to notice and the catch-ups after each rest.
    rested = simulate_async(trace(0, rounds=400), base, 8, max_ahead=12)
    assert 10.0 < rested.ms / rested.tokens < 12.5


def test_network_latency_makes_drafts_arrive_later() -> None:
    lan = gpu(draft_ms=4.0, network_latency_ms=0.0)
    far = gpu(draft_ms=4.0, network_latency_ms=20.0)
    near = simulate("lead+back", trace(6), lan, k=8, max_ahead=12).tokens_per_second
    assert near == pytest.approx(
        simulate("async", trace(6), lan, k=8, max_ahead=12).tokens_per_second
    )
    assert simulate("lead+back", trace(6), far, k=8, max_ahead=12).tokens_per_second < near


def test_a_lead_service_adds_its_cpu_per_token_to_its_rounds() -> None:
    # A useless drafter: one token per 10 ms pass, plus 0.5 ms of the lead's event loop.
    busy = DeviceProfile("p", {1: 10.0}, draft_ms=5.0, lead_cpu_ms_per_token=0.5)
    lead_back = simulate("lead+back", trace(0, rounds=50), busy, k=8, max_ahead=1)
    assert lead_back.ms / lead_back.tokens == pytest.approx(10.5)
    in_process = simulate("async", trace(0, rounds=50), busy, k=8, max_ahead=1)
    assert in_process.ms / in_process.tokens == pytest.approx(10.0)


def test_the_drafters_guesses_reach_the_lead_as_one_sources_proposal() -> None:
    # The lead's own chooser sees them: how many agree with the main model from the
    # round's start, then a token it rejects.
    assert proposals(2, 4) == [Proposal(DRAFTER, (RIGHT, RIGHT, WRONG, WRONG))]
    assert proposals(5, 3) == [Proposal(DRAFTER, (RIGHT,) * 3)]
    assert proposals(3, 0) == []  # nothing ready: no proposal


def test_the_drafter_guesses_ahead_then_idles() -> None:
    d = Drafter(runs=[5] * 20, step_ms=10.0, catchup_ms=10.0, max_ahead=3)
    d.advance(25.0)
    assert d.ready == [10.0, 20.0, 30.0]  # catch-up, then one guess per step
    assert d.offer(25.0, committed=0, delay_ms=0.0) == 2
    assert d.offer(25.0, committed=0, delay_ms=10.0) == 1
    d.advance(100.0)
    assert not d.busy and len(d.ready) == 3  # max_ahead reached
    d.hear(100.0, committed=2)  # the lead accepted two of its guesses
    d.advance(130.0)
    assert d.base == 0 and len(d.ready) == 5  # they stand; it drafts two more


def test_a_rejection_costs_the_drafter_a_catch_up() -> None:
    d = Drafter(runs=[1, 0, 3, 2, 1, 0], step_ms=10.0, catchup_ms=7.0, max_ahead=4)
    d.advance(35.0)  # guesses for positions 0..3; the one at 1 is wrong
    d.hear(40.0, committed=2)  # 1 accepted + the correction
    assert d.offer(40.0, committed=2, delay_ms=0.0) == 0  # stale
    d.advance(41.0)
    assert d.base == 2 and d.ready == [47.0]


# -- profiles, seeds and the command -----------------------------------------------------


def test_profile_costs_interpolate_like_the_policy_cost_model() -> None:
    p = DeviceProfile("p", {1: 10.0, 5: 30.0}, 1.0)
    for n in range(1, 12):
        assert p.main_ms(n) == CostModel({1: 10.0, 5: 30.0}).cost(n)
    assert DeviceProfile.from_dict(p.to_dict()) == p
    with pytest.raises(UsageError):
        DeviceProfile.from_dict({"name": "x", "main_ms_by_batch": {"2": 1.0}, "draft_ms": 1.0})


def test_every_seed_profile_says_what_is_quoted_and_what_is_assumed() -> None:
    for seed in SEEDS:
        assert "Assumed" in seed.profile.note
        assert seed.profile.main_ms(1) > 0 and seed.profile.draft_ms > 0
    rows = project_seeds(trace(3), k=8, max_ahead=12, policy="adaptive")
    table = seeds_table(rows)
    assert table.count("\n") == len(SEEDS) + 1
    ngl0 = next(r for r in rows if r.setup.profile.name == "seed002-xeon-a10-ngl0")
    assert ngl0.k == 4 and ngl0.target == pytest.approx(1000 / 490.05)


def bench_report(tmp_path: Path, **profile: float) -> Path:
    report = {
        "settings": {"draft_max": 4, "max_ahead": 6, "policy": "adaptive"},
        "modes": [
            {"mode": "target-1", "tokens_per_second": 100.0, "trace": []},
            {"mode": "sync", "tokens_per_second": 50.0, "trace": [[4, 2], [4, 4], [4, 0]] * 20},
        ],
        "profile": {
            "main_ms_by_batch": {"1": 10.0, "5": 14.0},
            "draft_ms_by_batch": {"1": 3.0},
            **profile,
        },
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(report))
    return path


def test_sim_command_compares_with_the_bench(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.json"
    assert main(["sim", "--bench", str(bench_report(tmp_path)), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "target-1" in text and "+0.0%" in text  # 1000 / 10 ms = 100 tok/s measured
    modes = {m["mode"]: m for m in json.loads(out.read_text())["modes"]}
    assert modes["sync"]["projected"] == pytest.approx(1000 * 3 / (4 * 3.0 + 14.0), rel=0.01)
    assert modes["async"]["measured"] is None


def test_sim_command_projects_the_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--bench", str(bench_report(tmp_path)), "--profile", "seeds"]) == 0
    text = capsys.readouterr().out
    assert "seed002-xeon-a10-ngl0" in text and "3.79" in text and "this machine's pair" in text


def test_sim_reads_concurrent_slowdowns_from_the_bench(tmp_path: Path) -> None:
    path = bench_report(tmp_path, main_concurrent_slowdown=1.2, draft_concurrent_slowdown=1.1)
    p = bench_profile(json.loads(path.read_text()))
    assert (p.main_concurrent_slowdown, p.draft_concurrent_slowdown) == (1.2, 1.1)
    assert p.lead_cpu_ms_per_token == 0.0 and "not measured" in p.note


def test_sim_reads_the_lead_services_cpu_from_the_bench(tmp_path: Path) -> None:
    report = json.loads(bench_report(tmp_path).read_text())
    report["modes"].append({"mode": "lead+back", "lead_cpu_ms_per_token": 0.4, "trace": []})
    p = bench_profile(report)
    assert p.lead_cpu_ms_per_token == 0.4 and "measured (0.40 ms/token)" in p.note


def test_a_report_made_without_device_costs_is_refused_with_the_reason(tmp_path: Path) -> None:
    report = json.loads(bench_report(tmp_path).read_text())
    report["profile"] = {}  # what `duo bench --no-costs` writes
    with pytest.raises(UsageError, match="without --no-costs"):
        bench_profile(report)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bench", "/nonexistent.json"], "cannot read"),
        (["--profile", "nope"], "unknown profile"),
        (["--k", "5"], "k=4"),
        (["--profile", "/nonexistent/profile.json"], "cannot read"),
    ],
)
def test_sim_usage_errors_exit_2(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["sim", "--bench", str(bench_report(tmp_path))]
    assert main(base + argv) == 2
    assert message in capsys.readouterr().err


def test_sim_needs_a_sync_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"settings": {}, "modes": [], "profile": {}}))
    assert main(["sim", "--bench", str(path)]) == 2
    assert "no sync trace" in capsys.readouterr().err


def test_a_drafter_waking_from_a_rest_catches_up_in_one_batch() -> None:
    # 40 commits missed while resting: with a batch curve, one pass over 40 tokens
    # (2 ms + 0.5 ms a token); without one, a single catch-up step.
    batched = DeviceProfile("p", {1: 10.0}, draft_ms=5.0, draft_ms_by_batch={1: 5.0, 9: 9.0})
    assert batched.catchup_batch_ms(1) == 5.0
    assert batched.catchup_batch_ms(40) == pytest.approx(40.0)  # extrapolated: 9 ms / 9
    assert DeviceProfile("p", {1: 10.0}, draft_ms=5.0).catchup_batch_ms(40) == 5.0
    d = Drafter(runs=[0] * 100, step_ms=5.0, catchup_ms=batched.catchup_batch_ms, max_ahead=3)
    d.rest(0.0, True)
    d.advance(1.0)
    for committed in range(1, 41):
        d.hear(10.0 * committed, committed)
    d.rest(400.0, False)
    d.advance(400.0)
    assert d.base == 40 and d.ready == [440.0]


def test_a_profile_with_a_draft_batch_curve_round_trips() -> None:
    p = DeviceProfile("p", {1: 10.0, 9: 20.0}, draft_ms=5.0, draft_ms_by_batch={1: 5.0, 9: 9.0})
    assert DeviceProfile.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_free_drafters_replay_their_rounds_on_the_profile() -> None:
    from duo.bench.sim.profiles import DeviceProfile
    from duo.bench.sim.sim import simulate_free

    cheap = DeviceProfile(name="gpu", main_ms_by_batch={1: 10.0, 9: 11.0}, draft_ms=1.0)
    rounds = [[0, 0], [8, 8], [4, 1], [0, 0]]  # 1 + 9 + 2 + 1 tokens
    result = simulate_free(rounds, cheap, overhead_ms=0.5)
    assert result.tokens == 13 and result.drafted == 12 and result.accepted == 9
    assert result.ms == pytest.approx(10 + 11 + cheap.main_ms(5) + 10 + 4 * 0.5)


def test_each_lead_back_run_across_a_link_is_projected_with_that_link() -> None:
    """duo bench --rtt runs lead+back@Nms; duo sim projects each with N/2 ms more a way."""
    rng = random.Random(5)
    rounds = [[4, rng.randint(0, 4)] for _ in range(200)]
    report = {
        "settings": {"draft_max": 4},
        "profile": {
            "main_ms_by_batch": {"1": 30.0, "5": 60.0},
            "draft_ms_by_batch": {"1": 15.0},
        },
        "modes": [
            {"mode": "sync", "tokens_per_second": 20.0, "trace": rounds},
            *(
                {"mode": f"lead+back:f{f}@{rtt}ms", "tokens_per_second": 30.0 - rtt / 10}
                for rtt in (0, 20, 50)
                for f in (0, 2)
            ),
            {"mode": "llama-server-rd@20ms", "tokens_per_second": 9.0},
        ],
    }
    projections = {
        p.mode: p
        for p in project_bench(report, bench_profile(report), k=4, max_ahead=12, policy="adaptive")
    }
    links = [projections[f"lead+back:f0@{rtt}ms"] for rtt in (0, 20, 50)]
    assert [p.measured for p in links] == [30.0, 28.0, 25.0]
    assert links[0].projected >= links[1].projected >= links[2].projected > 0
    assert links[0].projected > links[2].projected  # 50 ms of round trip costs something
    assert "lead+back:f2@20ms" not in projections  # fan-out is not simulated


# -- links: llama.cpp's remote drafting, and the seeds' devices on two hosts ---------------


def test_remote_draft_cost_by_hand() -> None:
    """A round of 4 tokens with 7 draft tokens crosses the link 8 times: 20 ms more round
    trip costs 20 * 8 / 4 = 40 ms more per token."""
    assert remote_draft_ms_per_token(100.0, 4.0, 7.0, 20.0) == pytest.approx(140.0)
    assert remote_draft_ms_per_token(100.0, 4.0, 7.0, 0.0) == 100.0


def test_remote_draft_runs_projected_from_the_shortest_link() -> None:
    def run(rtt: int, speed: float) -> dict[str, object]:
        return {
            "mode": f"llama-server-rd@{rtt}ms",
            "tokens_per_second": speed,
            "mean_acceptance_length": 4.0,  # 3 accepted + 1 a round
            "acceptance_rate": 0.5,  # of 6 drafted
        }

    report = {"modes": [run(10, 8.0), run(0, 10.0)]}
    (row,) = remote_draft_projections(report)
    assert row.mode == "llama-server-rd@10ms"
    assert row.projected == pytest.approx(1000 / (100 + 10 * 7 / 4))
    assert row.measured == 8.0


def test_seed_links_never_gain_from_a_longer_link() -> None:
    rows = project_seed_links(trace(5), k=8, max_ahead=12, policy="fixed")
    assert [r[0] for r in rows] == list(SEEDS)
    for _, _, target, speeds in rows:
        assert len(speeds) == len(LINKS)
        assert all(v > target for v in speeds), "a back on its own host beats the main model"
        assert speeds[-1] <= speeds[0] * 1.02  # a far link never helps (within the replay's grain)


# -- fan-out (assumption 9) ----------------------------------------------------------------


def test_fanout_answers_rejections_only_with_branches_made_and_never_costs_a_fast_drafter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drafter 50x faster than the main model is max_ahead ahead every round: it branches
    while it would idle, and a branch spares it the catch-up after some rejections."""
    made: list[Drafter] = []
    init = Drafter.__init__

    def keep(self: Drafter, *a: object, **kw: object) -> None:
        init(self, *a, **kw)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(Drafter, "__init__", keep)
    profile = flat(main_ms=100.0, draft_ms=2.0)
    t = geometric(0.7)
    plain = simulate_async(t, profile, 8, max_ahead=6, policy="fixed")
    assert made[-1].adopted == 0
    branched = simulate_async(t, profile, 8, max_ahead=6, policy="fixed", fanout=2)
    adopted = made[-1].adopted
    assert 0 < adopted < branched.rounds * FANOUT_HIT  # some rejections, at most the rate
    assert branched.tokens_per_second > plain.tokens_per_second
    again = simulate_async(t, profile, 8, max_ahead=6, policy="fixed", fanout=2)
    assert again.tokens_per_second == branched.tokens_per_second  # deterministic


def test_a_drafter_that_never_idles_never_branches() -> None:
    """Slower than the main model: never max_ahead ahead, so fan-out changes nothing."""
    profile = flat(main_ms=10.0, draft_ms=30.0)
    t = geometric(0.7)
    plain = simulate_async(t, profile, 8, max_ahead=12, policy="fixed")
    branched = simulate_async(t, profile, 8, max_ahead=12, policy="fixed", fanout=4)
    assert branched.tokens_per_second == plain.tokens_per_second


# -- measured device costs (scripts/gpu/check.sh) ----------------------------------------

DEVICE_COSTS = Path(__file__).with_name("device_costs.json")


def test_a_device_costs_file_is_a_profile_per_placement() -> None:
    from duo.bench.sim.profiles import measured_profiles

    profiles = {p.name: p for p in measured_profiles(json.loads(DEVICE_COSTS.read_text()))}
    assert sorted(profiles) == [
        f"test box: main {m}, draft {d}" for m in ("cpu", "gpu") for d in ("cpu", "gpu")
    ]
    seed002 = profiles["test box: main cpu, draft gpu"]  # seed 002's placement
    assert seed002.main_ms(1) == 100.0 and seed002.main_ms(16) == 550.0
    assert seed002.draft_ms == 2.0 and seed002.catchup_batch_ms(16) == 2.4
    assert seed002.main_concurrent_slowdown == 1.0 and "separate devices" in seed002.note
    both_cpu = profiles["test box: main cpu, draft cpu"]
    assert (both_cpu.main_concurrent_slowdown, both_cpu.draft_concurrent_slowdown) == (1.5, 1.4)
    both_gpu = profiles["test box: main gpu, draft gpu"]
    assert "not measured (1.0 assumed)" in both_gpu.note and "2025-01-01" in both_gpu.note


def test_sim_projects_each_placement_of_a_device_costs_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.json"
    bench = str(bench_report(tmp_path))
    argv = ["sim", "--bench", bench, "--profile", str(DEVICE_COSTS), "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| test box: main cpu, draft gpu |" in text and "| placement | target-1 |" in text
    rows = json.loads(out.read_text())["placements"]
    placements = {p["profile"]["name"]: p["modes"] for p in rows}
    target = {m["mode"]: m for m in placements["test box: main gpu, draft gpu"]}["target-1"]
    assert target["projected"] == pytest.approx(100.0) and target["measured"] is None
    seed002 = {m["mode"]: m["projected"] for m in placements["test box: main cpu, draft gpu"]}
    assert seed002["target-1"] == pytest.approx(10.0) and seed002["async"] > 10.0


def test_a_device_costs_file_with_one_device_is_one_setup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    costs = json.loads(DEVICE_COSTS.read_text())
    del costs["costs_ms"]["gpu"]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(costs))
    assert main(["sim", "--bench", str(bench_report(tmp_path)), "--profile", str(path)]) == 0
    assert "profile: test box: main cpu, draft cpu" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["costs_ms"].update(tpu=c["costs_ms"]["gpu"]), "'tpu' is not one of"),
        (lambda c: c["costs_ms"]["gpu"]["main"].pop("1"), "gpu main needs a positive time"),
        (lambda c: c.pop("date"), "not a device-costs file"),
        (lambda c: c.update(costs_ms={}), "times no device"),
    ],
)
def test_a_malformed_device_costs_file_is_refused_naming_what(
    tmp_path: Path, change: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    costs = json.loads(DEVICE_COSTS.read_text())
    change(costs)  # type: ignore[operator]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(costs))
    assert main(["sim", "--bench", str(bench_report(tmp_path)), "--profile", str(path)]) == 2
    assert message in capsys.readouterr().err
