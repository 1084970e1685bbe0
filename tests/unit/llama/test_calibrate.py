"""The main model's pass costs, timed once per model file, machine and settings, then
read from $DUO_HOME/costs (a fake model: only how often it is timed matters here)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from duo.core.policy import CostModel
from duo.llama import calibrate
from duo.llama.backend import Model
from duo.llama.calibrate import cached


class Timed:
    """What calibrating needs of a model, counting its passes."""

    def __init__(self, path: Path, settings: list[Any]) -> None:
        self.path = path
        self.settings = settings
        self.n_ctx = 4096
        self.n_threads = 1
        self.tokens: list[int] = []
        self.passes = 0
        self.threads_seen: set[int] = set()

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> None:
        self.passes += 1
        self.threads_seen.add(self.n_threads)
        self.tokens.extend(tokens)

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def set_threads(self, n: int) -> None:
        self.n_threads = n


class Load:
    """The share of the machine other work takes while a model is timed."""

    others = 0.0

    def share(self) -> float:
        return self.others


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Timed:
    monkeypatch.setenv("DUO_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(calibrate, "OtherLoad", Load)
    Load.others = 0.0
    gguf = tmp_path / "main.gguf"
    gguf.write_bytes(b"GGUF")
    return Timed(gguf, [0, "auto"])


def costs(model: Timed, **kwargs: Any) -> dict[int, float]:
    return cached(cast(Model, model), 9, **kwargs).seconds


def test_the_sizes_are_timed_three_times_and_the_slots_multiples_once(model: Timed) -> None:
    costs(model, extra=[18, 27])
    assert model.passes == 1 + 9 * 3 + 2  # the context, then each size


def test_sizes_that_do_not_fit_the_context_are_not_timed(model: Timed) -> None:
    """`duo lead -c 128` has four slots: a pass of every slot's round (4 x 49 tokens) does
    not fit one sequence's context."""
    model.n_ctx = 8 + 7  # the context's 8 tokens, then 7 more
    assert sorted(costs(model, extra=[18])) == list(range(1, 8))
    assert model.tokens == []


def test_a_context_of_one_token_times_one_token_alone(model: Timed) -> None:
    model.n_ctx = 1
    assert sorted(costs(model)) == [1]
    assert model.passes == 3 and model.tokens == []


def test_costs_timed_on_a_busy_machine_are_used_not_kept(model: Timed, tmp_path: Path) -> None:
    Load.others = 0.5  # another process took half the machine meanwhile
    assert sorted(costs(model)) == list(range(1, 10))
    assert not (tmp_path / "home" / "costs").exists()
    timed = model.passes
    Load.others = 0.0
    costs(model)  # timed again, quietly: kept
    costs(model)
    assert model.passes == 2 * timed


class Scripted(Timed):
    """A model whose passes take the seconds of a script, on a clock of its own."""

    def __init__(self, path: Path, seconds: list[float]) -> None:
        super().__init__(path, [0, "auto"])
        self.clock = 0.0
        self.script = iter(seconds)

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> None:
        super().decode(tokens, all_logits=all_logits)
        self.clock += next(self.script)


def scripted(model: Timed, monkeypatch: pytest.MonkeyPatch, seconds: list[float]) -> Scripted:
    fake = Scripted(model.path, [0.0, *seconds])  # the context's pass first, untimed
    monkeypatch.setattr(time, "perf_counter", lambda: fake.clock)
    return fake


def test_each_size_costs_its_fastest_repeat(model: Timed, monkeypatch: pytest.MonkeyPatch) -> None:
    """Other work only ever adds time: two slow passes of three must not set the cost."""
    fake = scripted(model, monkeypatch, [0.05, 0.05, 0.01] * 2 + [0.06, 0.02, 0.06])
    seconds = calibrate.calibrate(cast(Model, fake), 3).seconds
    assert seconds == pytest.approx({1: 0.01, 2: 0.01, 3: 0.02})


def test_a_long_pass_is_timed_once(model: Timed, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeats are for short passes, where a hiccup is much of the time."""
    fake = scripted(model, monkeypatch, [0.2, 0.1, 0.2, 0.3, 0.5, 0.1])  # sizes 1, 2, 3
    seconds = calibrate.calibrate(cast(Model, fake), 3).seconds
    assert seconds == pytest.approx({1: 0.1, 2: 0.3, 3: 0.5})
    assert next(fake.script) == 0.1  # the last size's second pass never ran


def test_costs_are_timed_once_then_read(model: Timed, tmp_path: Path) -> None:
    first = costs(model, extra=[18, 27])
    timed = model.passes
    assert timed > 0 and sorted(first) == [*range(1, 10), 18, 27]
    assert costs(model, extra=[18, 27]) == first  # read back, as measured
    assert model.passes == timed
    assert len(list((tmp_path / "home" / "costs").glob("main-1t-*.json"))) == 1
    assert model.tokens == []  # the KV holds what it held


def test_other_threads_sizes_or_settings_are_timed_anew(model: Timed) -> None:
    costs(model)
    for change in ({"threads": 2}, {"extra": [18]}, {"context": 64}, {"all_logits": False}):
        before = model.passes
        costs(model, **change)
        assert model.passes > before, change
    assert model.threads_seen == {1, 2} and model.n_threads == 1  # its threads given back
    before = model.passes
    model.settings = [0, "on"]  # flash attention: another model's costs
    costs(model)
    assert model.passes > before


def test_a_changed_file_or_a_spoilt_cache_is_timed_anew(model: Timed, tmp_path: Path) -> None:
    costs(model)
    (file,) = (tmp_path / "home" / "costs").glob("*.json")
    file.write_text("{not json")
    before = model.passes
    costs(model)
    assert model.passes > before
    model.path.write_bytes(b"GGUF, another size")
    before = model.passes
    costs(model)
    assert model.passes > before


def test_a_home_that_cannot_be_written_costs_a_timing_not_a_start(
    model: Timed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "a file"
    home.write_text("")
    monkeypatch.setenv("DUO_HOME", str(home))
    assert sorted(costs(model)) == list(range(1, 10))


def test_timing_runs_on_a_thread_that_ends_with_it() -> None:
    # llama.cpp's OpenMP keeps a team of workers per thread that ran a pass on several
    # threads; a team left on the lead's main thread slowed every engine-thread pass.
    seen: list[threading.Thread] = []

    def timing() -> CostModel:
        seen.append(threading.current_thread())
        return CostModel({1: 0.01})

    assert calibrate.apart(timing).seconds == {1: 0.01}
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()

    def failing() -> CostModel:
        raise ValueError("a pass failed")

    with pytest.raises(ValueError, match="a pass failed"):
        calibrate.apart(failing)


ZEN2 = "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma f16c avx2 bmi2\n"
ZEN4 = "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma f16c avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16\n"  # noqa: E501


def test_a_cpu_of_the_same_name_with_other_vector_extensions_is_another_machine() -> None:
    """A virtual machine's CPU may be named the same on hosts with and without AVX-512:
    costs timed on one are not the other's."""
    zen2, zen4 = (calibrate.describe_cpu(info, 2, "x86_64") for info in (ZEN2, ZEN4))
    assert zen2 == "AMD EPYC x2 x86_64 [avx avx2 fma f16c]"
    assert zen4.startswith("AMD EPYC x2 x86_64 [") and "avx512_vnni" in zen4
    arm = calibrate.describe_cpu("Features\t: fp asimd asimddp i8mm\n", 8, "aarch64")
    assert arm.endswith("x8 aarch64 [asimd asimddp i8mm]")


def test_costs_timed_on_another_cpu_are_timed_again(
    model: Timed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibrate, "this_cpu", lambda: calibrate.describe_cpu(ZEN4, 2, "x86_64"))
    cached(cast(Model, model), 3)
    timed = model.passes
    cached(cast(Model, model), 3)
    assert model.passes == timed  # read back
    monkeypatch.setattr(calibrate, "this_cpu", lambda: calibrate.describe_cpu(ZEN2, 2, "x86_64"))
    cached(cast(Model, model), 3)
    assert model.passes > timed


class BySize(Timed):
    """A model whose passes of each size take that size's script, on a clock of its own."""

    def __init__(self, path: Path, seconds: dict[int, list[float]]) -> None:
        super().__init__(path, [0, "auto"])
        self.clock = 0.0
        self.scripts = {n: iter(s) for n, s in seconds.items()}
        self.order: list[int] = []

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> None:
        super().decode(tokens, all_logits=all_logits)
        if len(tokens) in self.scripts:
            self.order.append(len(tokens))
            self.clock += next(self.scripts[len(tokens)])


def test_a_replay_s_table_takes_each_size_s_median_in_shuffled_turns(
    model: Timed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fluke fast pass (7 tokens at 0.27 s among 0.35 s) must not set a replay's cost, and
    long passes are timed as often as short ones."""
    fake = BySize(
        model.path,
        {1: [0.06, 0.07, 0.06], 7: [0.27, 0.35, 0.36], 49: [1.9, 1.8, 2.5]},
    )
    monkeypatch.setattr(time, "perf_counter", lambda: fake.clock)
    fake.tokens = [5] * 10
    seconds = calibrate.median_costs(cast(Model, fake), [1, 7, 49], repeats=3, context=20).seconds
    assert seconds == pytest.approx({1: 0.06, 7: 0.35, 49: 1.9})
    assert sorted(fake.order) == [1] * 3 + [7] * 3 + [49] * 3
    assert fake.order[:3] != [1, 7, 49] or fake.order[3:6] != [1, 7, 49]  # shuffled
    assert fake.tokens == [5] * 10  # the KV as it was


def test_a_replay_s_table_leaves_out_sizes_the_context_cannot_hold(model: Timed) -> None:
    model.n_ctx = 64
    seconds = calibrate.median_costs(cast(Model, model), [1, 8, 49], repeats=2, context=20)
    assert sorted(seconds.seconds) == [1, 8]
    assert model.tokens == []
