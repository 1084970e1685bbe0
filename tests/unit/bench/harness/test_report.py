"""duo bench's report arithmetic (no models)."""

from __future__ import annotations

from typing import Any

import pytest

from duo.bench.harness.modes import MODES, PEER_MODES, RUNNERS
from duo.bench.harness.report import ModeResult
from duo.bench.harness.suite import _take_turns, ceiling, run
from duo.bench.variants import REMOTE_DRAFT, parse_variant, split_half, variants
from duo.core.stats import Stats
from duo.errors import UsageError
from duo.session.config import ModelConfig, SpecConfig


def sync_run(trace: list[tuple[int, int]]) -> ModeResult:
    return ModeResult("sync", 0.0, [], 0.0, 0.0, 1.0, [], 0.0, trace=trace)


def test_without_drafts_the_ceiling_is_the_main_model_alone() -> None:
    assert ceiling({1: 10.0, 9: 12.0}, sync_run([]), 8) == pytest.approx(100.0)


def test_a_drafter_always_right_on_cheap_batches_gives_nearly_k_plus_1_tokens_per_pass() -> None:
    # 9 tokens per 10 ms pass at most; the first round has no draft yet, and the unseen
    # bonus positions agree at the measured rate (just under 1), so a little less.
    assert 800.0 < ceiling({1: 10.0, 9: 10.0}, sync_run([(8, 8)] * 50), 8) <= 900.0


def test_streaks_of_agreement_raise_the_ceiling_over_the_per_position_average() -> None:
    # Half the rounds agree on all 8 tokens, half on none, in long streaks. Batches are dear
    # (8 tokens cost 4 single passes): on average a draft pays 1 + 4 tokens for 40 ms,
    # 125 tok/s; verifying only during streaks pays 9 tokens per 40 ms there.
    trace = ([(8, 8)] * 20 + [(8, 0)] * 20) * 3
    costs = {1: 10.0, 2: 20.0, 9: 40.0}
    average = 1000 * (1 + 4) / costs[9]
    assert ceiling(costs, sync_run(trace), 8) > 1.2 * average


class Recorder:
    """A runner, or a round of device costs, that only notes when it is called."""

    def __init__(self, mode: str, calls: list[str]) -> None:
        self.mode, self.calls, self.devices = mode, calls, ""

    def one(self, i: int) -> tuple[Stats, float]:
        self.calls.append(f"{self.mode}{i}")
        return Stats(tokens=10, decode_seconds=0.1), 0.01

    def extras(self) -> dict[str, Any]:
        self.calls.append(f"{self.mode} done")
        return {"wire_bytes_per_token": 1.5}

    def renew(self) -> None:
        self.calls.append(f"{self.mode} new")

    def measure(self) -> None:
        self.calls.append("costs")


def take_turns(modes: str, count: int, repeat: int, often: bool) -> list[str]:
    calls: list[str] = []
    runners = [Recorder(m, calls) for m in modes]
    measure = Recorder("", calls).measure
    results = _take_turns(runners, count, repeat, lambda _: None, measure, often)  # type: ignore[arg-type]
    assert list(results) == list(modes)
    assert all(r.tokens_per_second == pytest.approx(100.0) for r in results.values())
    assert all(r.wire_bytes_per_token == 1.5 for r in results.values())  # the runner's extras
    return calls


def test_modes_take_turns_prompt_by_prompt_with_device_costs_between() -> None:
    """Each mode goes first in its turn: a fixed order would give the first mode every
    prompt's host as the last mode left it (on the 1.5B pair's chat prompts, `default`,
    always first, ran 0.96x `free-all`, which places the same way)."""
    assert take_turns("ab", count=4, repeat=1, often=True) == [
        "costs", "a0", "b0", "b1", "a1", "costs", "a2", "b2", "b3", "a3", "a done", "b done",
    ]  # fmt: skip
    # The last round of device costs is the caller's, after every mode is done. Each repeat
    # after the first opens every mode again (a new process for those in one).
    assert take_turns("ab", count=2, repeat=2, often=True) == [
        "costs", "a0", "b0", "costs", "b1", "a1", "costs",
        "a new", "b new", "b0", "a0", "costs", "a1", "b1", "a done", "b done",
    ]  # fmt: skip
    calls = take_turns("abc", count=3, repeat=3, often=False)
    assert [i for i, c in enumerate(calls) if c.endswith("new")] == [9, 10, 11, 21, 22, 23]
    firsts = [c for c in calls if not c.endswith("new")][::3][:9]
    assert firsts == ["a0", "b1", "c2", "b0", "c1", "a2", "c0", "a1", "b2"]  # each prompt too


def test_one_mode_alone_measures_no_device_costs_while_it_holds_its_devices() -> None:
    """(bench.run measures them before it opens the mode: an rpc-server takes one client.)"""
    assert take_turns("a", count=3, repeat=1, often=False) == ["a0", "a1", "a2", "a done"]


def test_each_async_mode_runs_at_each_fanout_and_each_back_across_each_link() -> None:
    modes = ["target-1", "async", "lead+back"]
    assert variants(modes, [0], [0.0]) == modes
    assert variants(modes, [0, 2], [0.0]) == [
        "target-1", "async:f0", "async:f2", "lead+back:f0", "lead+back:f2"
    ]  # fmt: skip
    assert variants(modes, [2], [0.0, 20.0]) == [
        "target-1", "async", "lead+back@0ms", "lead+back@20ms"
    ]  # fmt: skip
    assert parse_variant("lead+back+free:f2@2.5ms") == ("lead+back+free", 2, 2.5)
    assert parse_variant("async") == ("async", None, None)
    assert parse_variant("llama.cpp-all") == ("llama.cpp-all", None, None)


def test_each_mode_runs_with_each_of_several_main_model_types() -> None:
    assert variants(["target-1", "async"], [0], [0.0], ["BF16"]) == ["target-1", "async"]
    assert variants(["target-1", "lead+back"], [0], [0.0, 20.0], ["BF16", "F16"]) == [
        "target-1/BF16", "target-1/F16", "lead+back@0ms/BF16", "lead+back@0ms/F16",
        "lead+back@20ms/BF16", "lead+back@20ms/F16",
    ]  # fmt: skip
    assert split_half("async:f2/F16") == ("async:f2", "F16")
    assert split_half("llama-server+ngram/k8") == ("llama-server+ngram/k8", None)
    assert parse_variant("lead+back:f2@20ms/BF16") == ("lead+back", 2, 20.0)
    assert parse_variant("llama.cpp-all/F16") == ("llama.cpp-all", None, None)


def test_every_mode_has_one_runner() -> None:
    assert list(RUNNERS) == [*MODES, *PEER_MODES, REMOTE_DRAFT]
    assert len(set(RUNNERS)) == len(MODES) + len(PEER_MODES) + 1


def test_a_mode_without_a_runner_is_refused_before_anything_loads(tmp_path: Any) -> None:
    models = ModelConfig(main=tmp_path / "none.gguf", draft=tmp_path / "none.gguf")
    with pytest.raises(UsageError, match="nope: no such mode"):
        run(models, SpecConfig(), ["sync", "nope"], [], 8, 1, print)
