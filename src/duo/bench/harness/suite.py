"""`duo bench`: every mode (duo.bench.harness.modes) on the same prompts, in the same run,
on pinned "devices".

Warm-up runs are excluded; each figure is the median over repeats of the whole suite. The
suite is run in order, so no prompt follows itself (a drafter would otherwise still hold
the previous answer in its cache and look better than it is). By default every mode stays
loaded and the modes take turns prompt by prompt: a shared host's speed drifts by tens of
percent over a minute, and taking turns spreads that drift over all modes alike. duo's
modes run each in a process of its own, a new one for each repeat: a process's speed
depends on where its memory lands (duo.bench.harness.isolated), and llama.cpp's peers
start one per prompt.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from importlib import resources
from pathlib import Path
from typing import Any

from duo.bench.harness.costs import Profiler
from duo.bench.harness.llamacpp import find_bin, rpc_server_bin
from duo.bench.harness.modes import PEER_MODES, RUNNERS, Opening
from duo.bench.harness.report import ModeResult, Report
from duo.bench.harness.runners import Prompt, Runner, in_turn, prompt_tokens
from duo.bench.net.link import Link
from duo.bench.net.netns import FarHost
from duo.bench.sim.profiles import DeviceProfile
from duo.bench.sim.sim import simulate_async
from duo.bench.sim.trace import Trace
from duo.bench.variants import (
    FANOUT_MODES,
    LINK_MODES,
    REMOTE_DRAFT,
    parse_variant,
    split_half,
    variants,
)
from duo.core.sampling import GREEDY, SamplingParams
from duo.core.stats import Stats
from duo.errors import UsageError
from duo.llama import hugepages
from duo.llama.calibrate import this_cpu
from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import Session

SUITES: dict[str, tuple[str, ...]] = {
    "chat": ("suite.jsonl",),
    "grounded": ("grounded.jsonl",),
    "all": ("suite.jsonl", "grounded.jsonl"),
}


def load_prompts(path: str | None, suite: str = "chat") -> list[Prompt]:
    """A JSON-lines file of prompts, or a bundled suite: chat (everyday questions, code,
    stories) or grounded (answers that reuse the prompt: rewrite, extract, convert)."""
    if path is None:
        bundled = resources.files("duo").joinpath("prompts")
        text = "\n".join(bundled.joinpath(name).read_text() for name in SUITES[suite])
    else:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror}") from None
    prompts = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            prompts.append(Prompt(obj.get("kind", "chat"), obj.get("category", ""), obj["text"]))
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{path}:{i}: expected a JSON object with a 'text' field") from None
    if not prompts:
        raise UsageError("the prompt suite is empty")
    return prompts


def _mean_context(main: ModelConfig, prompts: list[Prompt], n: int) -> int:
    """Tokens of context a pass sees on average in this bench: prompt + half the output."""
    with Session(main, SpecConfig(mode="target")) as session:
        lengths = [len(prompt_tokens(session.main, p)) for p in prompts]
    return round(statistics.mean(lengths)) + n // 2


def _summarise(mode: str, runs: list[list[Stats]], ttfts: list[float], devices: str) -> ModeResult:
    per_run = [sum(s.tokens for s in r) / sum(s.decode_seconds for s in r) for r in runs]
    total = Stats()
    for r in runs:
        for s in r:
            total.merge(s)
            total.trace.extend(s.trace)

    def per_token(seconds: float) -> float | None:
        timed = total.llama_seconds > 0 and total.tokens > 0  # peers time no passes
        return 1000 * seconds / total.tokens if timed else None

    return ModeResult(
        mode=mode,
        tokens_per_second=statistics.median(per_run),
        tokens_per_second_runs=per_run,
        ttft_ms=1000 * statistics.median(ttfts),
        acceptance_rate=total.acceptance_rate,
        mean_acceptance_length=total.mean_acceptance_length if total.drafted else 1.0,
        accepted_at=[a / d for a, d in zip(total.accepted_at, total.drafted_at, strict=True) if d],
        overhead_ms_per_round=total.overhead_ms_per_round,
        pass_ms_per_token=per_token(total.llama_seconds),
        outside_pass_ms_per_token=per_token(total.decode_seconds - total.llama_seconds),
        rounds_after_rejection=total.readiness("rejection").rounds,
        drafted_rounds=total.rounds_drafted / total.rounds if total.rounds else None,
        ready_after_rejection=total.readiness("rejection").fraction,
        ready_after_acceptance=total.readiness("acceptance").fraction,
        devices=devices,
        trace=total.trace if total.drafted else [],
        sources={
            name: {
                "draft_n": x.drafted,
                "draft_n_accepted": x.accepted,
                "draft_n_received": x.received,
                "acceptance_rate": x.acceptance_rate,
            }
            for name, x in total.by_source.items()
        },
    )


def ceiling(main_ms_by_batch: dict[int, float], sync: ModeResult, k: int) -> float:
    """Tokens/s with a drafter that costs nothing and always has guesses ready.

    The sync run's agreement trace is replayed by `duo sim` on the measured main-model
    costs, verifying a fixed L tokens every round (the best L) or as the adaptive policy
    chooses, whichever does better; never less than the main model alone. Replaying the
    trace keeps the streaks of agreement that a per-position average would miss.
    """
    alone = 1000 / main_ms_by_batch[1]
    if not any(d for d, _ in sync.trace):
        return alone
    trace = Trace.from_rounds(sync.trace, k)
    free = DeviceProfile("a drafter that costs nothing", main_ms_by_batch, draft_ms=1e-9)
    ahead = 2 * k  # always enough guesses ready
    runs = [
        simulate_async(trace, free, n, max_ahead=ahead, policy="fixed") for n in range(1, k + 1)
    ]
    runs.append(simulate_async(trace, free, k, max_ahead=ahead, policy="adaptive"))
    return max(alone, *(r.tokens_per_second for r in runs))


def run(
    models: ModelConfig,
    spec: SpecConfig,
    modes: list[str],
    prompts: list[Prompt],
    n: int,
    repeat: int,
    log: Any,
    sampling: SamplingParams = GREEDY,
    llama_cpp_bin: str | None = None,
    interleave: bool = True,
    fanouts: Sequence[int] = (0,),
    rtts: Sequence[float] = (0.0,),
    jitter_ms: float = 0.0,
    far: FarHost | None = None,
    costs: bool = True,
    halves: dict[str, Path] | None = None,
) -> Report:
    """Measure `modes` on `prompts`. Interleaved (the default), every mode stays loaded and
    they take turns prompt by prompt, so a host that drifts over the run slows them all
    alike; otherwise each mode runs alone, one after another (for models that fit in
    memory only once). Device costs are measured between turns (`costs.Profiler`), unless
    not `costs` (the report then has no profile for `duo sim --bench`).

    With several `fanouts`, each mode with an asynchronous model drafter runs at each
    setting, as MODE:fF (async:f0, async:f2...); with `rtts` other than (0,), each mode
    with a back runs with the back across a link of each round-trip time, as MODE@Nms.
    With `far`, each back and rpc-server runs in that namespace, across its veth pair.
    With `halves` (16-bit type -> main model file), each mode runs with each, as MODE/BF16
    and MODE/F16; device costs are those of `models`."""
    halves = halves or {}
    modes = variants(modes, fanouts, rtts, list(halves))
    cores = len(os.sched_getaffinity(0))
    report = Report(
        machine=_machine(cores),
        settings={
            **_settings(models, spec, n, repeat, len(prompts), sampling, halves),
            "fanout": list(fanouts),
            "rtt_ms": list(rtts),
            "jitter_ms": jitter_ms,
            "link": "netns" if far else "loopback",
            "order": "interleaved" if interleave else "sequential",
        },
    )
    _check_modes(modes, models, llama_cpp_bin)
    target = replace(models, draft=None)
    profiler = Profiler(models, spec, spec.draft_max + 1, _mean_context(target, prompts, n))
    link = Link(jitter_ms=jitter_ms, far=far)  # a back's (a draft's), at each variant's rtt
    base = Opening("", models, spec, prompts, n, sampling, link, llama_cpp_bin, cores)

    def measure(what: str = "measuring a round") -> None:
        if costs:
            log(f"device costs: {what}")
            profiler.measure()

    def open_runner(label: str) -> Runner:
        log(f"{label}: loading")
        return RUNNERS[parse_variant(label)[0]](_opening(label, base, fanouts, rtts, halves))

    results = _run_modes(modes, interleave, open_runner, measure, len(prompts), repeat, log)
    measure("last round")
    report.profile = profiler.result()
    report.modes = [results[mode] for mode in modes]
    _note_variants(report.modes, fanouts, rtts)
    _compare(report.modes)
    first = variants(["sync"], fanouts, rtts, list(halves))[0]  # with the profile's model
    report.ceiling_tokens_per_second = _ceiling(report, first, spec.draft_max)
    return report


def _machine(cores: int) -> dict[str, Any]:
    """The machine a report was measured on."""
    return {
        "cpu": this_cpu(),  # name, count, architecture, vector extensions
        "cpus": cores,
        "platform": sys.platform,
        "python": sys.version.split()[0],
        "hugepages": hugepages.in_effect(),  # duo's modes; the peers run as given
    }


def _settings(
    models: ModelConfig,
    spec: SpecConfig,
    n: int,
    repeat: int,
    prompts: int,
    sampling: SamplingParams,
    halves: dict[str, Path],
) -> dict[str, Any]:
    """What a report's modes ran with (the link and the order besides)."""
    return {
        "main": str(models.main),
        "draft": str(models.draft),
        "n": n,
        "repeat": repeat,
        "draft_max": spec.draft_max,
        "max_ahead": spec.max_ahead,
        "prompts": prompts,
        "policy": "adaptive" if spec.adaptive else "fixed",
        "sampling": asdict(sampling),
        "halves": {h: str(path) for h, path in halves.items()},
    }


def _check_modes(modes: list[str], models: ModelConfig, llama_cpp_bin: str | None) -> None:
    """Refuse, before anything loads, an unknown mode, and llama.cpp's peers given
    --rpc/--rpcd servers or without the binaries they run."""
    if unknown := [m for m in modes if parse_variant(m)[0] not in RUNNERS]:
        raise UsageError(f"{unknown[0]}: no such mode (the modes: {', '.join(RUNNERS)})")
    peers = [m for m in modes if m in PEER_MODES or parse_variant(m)[0] == REMOTE_DRAFT]
    if peers and (models.rpc or models.rpcd):
        raise UsageError(f"{peers[0]}: llama.cpp's peers are not given --rpc/--rpcd servers")
    if any(mode in PEER_MODES for mode in modes):  # fail before measuring anything
        find_bin(llama_cpp_bin, "llama-completion")
        find_bin(llama_cpp_bin, "llama-speculative-simple")
    if any(parse_variant(mode)[0] == REMOTE_DRAFT for mode in modes):
        find_bin(llama_cpp_bin, "llama-server")
        rpc_server_bin(llama_cpp_bin)


def _opening(
    label: str,
    base: Opening,
    fanouts: Sequence[int],
    rtts: Sequence[float],
    halves: dict[str, Path],
) -> Opening:
    """`base` as the variant `label` runs: with its fan-out, its back's round trip and its
    main model (the first fan-out and round trip where the label names none)."""
    _, fanout, rtt = parse_variant(label)
    half = split_half(label)[1]
    return replace(
        base,
        label=label,
        models=replace(base.models, main=halves[half]) if half else base.models,
        spec=replace(base.spec, fanout=fanouts[0] if fanout is None else fanout),
        link=replace(base.link, rtt_ms=rtts[0] if rtt is None else rtt),
    )


def _run_modes(
    modes: list[str],
    interleave: bool,
    open_runner: Callable[[str], Runner],
    measure: Callable[[], None],
    count: int,
    repeat: int,
    log: Any,
) -> dict[str, ModeResult]:
    """Every mode, all loaded at once and taking turns (`interleave`), or each alone in
    turn; each runner closed once its turn is done."""
    turns = [modes] if interleave else [[mode] for mode in modes]
    results: dict[str, ModeResult] = {}
    for group in turns:
        if not interleave:  # before the mode holds its devices (an rpc-server takes one client)
            measure()
        with contextlib.ExitStack() as stack:
            runners = []
            for mode in group:
                runner = open_runner(mode)
                stack.callback(runner.close)
                runners.append(runner)
            results.update(_take_turns(runners, count, repeat, log, measure, interleave))
    return results


def _note_variants(
    results: list[ModeResult], fanouts: Sequence[int], rtts: Sequence[float]
) -> None:
    """Each result's fan-out and round trip, where its mode has them."""
    for m in results:
        base_mode, fanout, rtt = parse_variant(m.mode)
        if base_mode in FANOUT_MODES:
            m.fanout = fanouts[0] if fanout is None else fanout
        if base_mode in LINK_MODES:
            m.rtt_ms = rtts[0] if rtt is None else rtt


def _compare(results: list[ModeResult]) -> None:
    """Each result's speedups over target-1 and sync, those with the same main model."""
    by_mode = {m.mode: m for m in results}
    for m in results:
        half = split_half(m.mode)[1]
        same = f"/{half}" if half else ""  # against the modes with the same main model
        if (alone := by_mode.get("target-1" + same)) is not None:
            m.speedup_vs_target_1 = m.tokens_per_second / alone.tokens_per_second
        if (sync := by_mode.get("sync" + same)) is not None:
            m.speedup_vs_sync = m.tokens_per_second / sync.tokens_per_second


def _ceiling(report: Report, sync_mode: str, k: int) -> float | None:
    """The report's ceiling (see ceiling) from its `sync_mode` run; None without that run
    or without measured device costs."""
    sync = {m.mode: m for m in report.modes}.get(sync_mode)
    if sync is None or not report.profile:
        return None
    return ceiling(report.profile["main_ms_by_batch"], sync, k)


def _take_turns(
    runners: list[Runner],
    count: int,
    repeat: int,
    log: Any,
    measure: Callable[[], None],
    often: bool,
) -> dict[str, ModeResult]:
    """Prompt 0..count-1, `repeat` times, each prompt through every runner in turn, each
    runner going first in its turn (duo.bench.harness.runners.in_turn), and each repeat
    after the first in a new process for the modes in one (Runner.renew). When
    `often` (the modes interleaved), a round of device costs is measured first and after
    every half of the prompts."""
    runs: dict[str, list[list[Stats]]] = {r.mode: [] for r in runners}
    ttfts: dict[str, list[float]] = {r.mode: [] for r in runners}
    if often:
        measure()
    half = max(1, math.ceil(count / 2))
    for rep in range(repeat):
        for r in runners:
            if rep:
                log(f"{r.mode}: opening it again for run {rep + 1}/{repeat}")
                r.renew()
            runs[r.mode].append([])
        for i in range(count):
            for r in in_turn(runners, rep + i):  # a prompt too: each mode first in a repeat
                stats, ttft = r.one(i)
                runs[r.mode][-1].append(stats)
                ttfts[r.mode].append(ttft)
                log(
                    f"{r.mode}: run {rep + 1}/{repeat}, prompt {i + 1}/{count}: "
                    f"{stats.tokens_per_second:.1f} tok/s"
                )
            last = rep == repeat - 1 and i == count - 1
            if often and (i + 1) % half == 0 and not last:
                measure()
    return {
        r.mode: replace(_summarise(r.mode, runs[r.mode], ttfts[r.mode], r.devices), **r.extras())
        for r in runners
    }
