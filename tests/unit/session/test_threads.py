"""Thread defaults as llama.cpp's: the math cores, less an in-process drafter's; flags win."""

from __future__ import annotations

from pathlib import Path

import pytest

from duo.session.config import ModelConfig, SpecConfig
from duo.session.threads import math_cores, parse_cpu_list, plan_threads, with_threads


def fake_sys(tmp_path: Path, siblings: dict[int, str]) -> Path:
    for cpu, text in siblings.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings").write_text(text + "\n")
    return tmp_path


def test_cpu_lists_are_read_as_linux_writes_them() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("") == set()


def test_math_cores_count_physical_cores_once_and_leave_out_efficiency_cores(
    tmp_path: Path,
) -> None:
    # 4 physical cores with 2 hyper-threads each (cpu i and i+4 are siblings), and on a
    # hybrid CPU, cpus 6 and 7's cores are efficiency cores.
    sys_cpu = fake_sys(tmp_path / "cpu", {i: f"{0x11 << (i % 4):x}" for i in range(8)})
    none = tmp_path / "no-such-file"
    assert math_cores(set(range(8)), sys_cpu, none) == 4
    assert math_cores({0, 4}, sys_cpu, none) == 1  # only one core's two threads allowed
    atoms = tmp_path / "atom-cpus"
    atoms.write_text("2-3,6-7\n")
    assert math_cores(set(range(8)), sys_cpu, atoms) == 2
    # No topology (a container without /sys): every CPU counts as a core.
    assert math_cores({0, 1, 2}, tmp_path / "nothing", none) == 3


@pytest.mark.parametrize("cores", [1, 2, 4, 8, 16, 64])
def test_without_a_drafter_beside_it_the_main_model_takes_every_core(cores: int) -> None:
    plan = plan_threads(cores, None, None, beside=False)
    assert (plan.main, plan.main_alone, plan.measured) == (cores, cores, False)


@pytest.mark.parametrize(("cores", "main", "draft"), [(2, 1, 1), (4, 3, 1), (8, 6, 2), (16, 12, 4)])
def test_a_drafter_beside_the_main_model_takes_its_threads_out_of_the_main_models(
    cores: int, main: int, draft: int
) -> None:
    plan = plan_threads(cores, None, None, beside=True)
    assert (plan.main, plan.draft) == (main, draft)
    assert plan.main + plan.draft == cores
    assert plan.measured and plan.main_alone == cores  # the drafter's cores are lent back


def test_flags_win_and_turn_the_measured_sharing_off() -> None:
    assert plan_threads(16, 3, None, beside=True) == plan_threads(16, 3, 4, beside=True)
    plan = plan_threads(16, 3, None, beside=True)
    assert (plan.main, plan.draft, plan.main_alone, plan.measured) == (3, 4, 3, False)
    plan = plan_threads(16, None, 6, beside=True)
    assert (plan.main, plan.draft, plan.measured) == (10, 6, False)
    plan = plan_threads(16, None, None, beside=True, explicit=True)  # --spec-type given
    assert (plan.main, plan.draft, plan.measured) == (12, 4, False)
    plan = plan_threads(1, None, None, beside=True)  # one core: nothing to lend
    assert (plan.main, plan.draft, plan.measured) == (1, 1, False)


def test_models_get_their_threads_from_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("duo.session.threads.math_cores", lambda: 8)
    models = ModelConfig(main=Path("m.gguf"), draft=Path("d.gguf"))
    placed = with_threads(models, SpecConfig())
    assert (placed.threads, placed.draft_threads, placed.threads_alone) == (6, 2, 8)
    # sync drafts and verifies in turn: both models on every core, nothing lent
    placed = with_threads(models, SpecConfig(mode="sync"))
    assert (placed.threads, placed.draft_threads, placed.threads_alone) == (8, 8, 0)
    # a drafter on a GPU takes no core from the main model
    placed = with_threads(ModelConfig(Path("m"), Path("d"), n_gpu_layers_draft=99), SpecConfig())
    assert (placed.threads, placed.threads_alone) == (8, 0)
    # free drafters only: every core for the main model
    placed = with_threads(models, SpecConfig(spec_types=frozenset({"ngram", "suffix"})))
    assert (placed.threads, placed.threads_alone) == (8, 0)
    # --pin: a thread per pinned core, as given
    pinned = SpecConfig(main_cores=frozenset({0, 1, 2}), draft_cores=frozenset({3}))
    placed = with_threads(models, pinned)
    assert (placed.threads, placed.draft_threads, placed.threads_alone) == (3, 1, 0)
    placed = with_threads(models, SpecConfig(), threads=5)
    assert (placed.threads, placed.draft_threads, placed.threads_alone) == (5, 2, 0)


def test_a_back_may_borrow_threads_only_where_the_lead_chose_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("duo.session.threads.math_cores", lambda: 8)
    lead = ModelConfig(main=Path("m.gguf"), draft=None)
    assert with_threads(lead, SpecConfig()).threads_lendable == 8
    assert with_threads(lead, SpecConfig(), threads=4).threads_lendable == 0  # -t
    pinned = SpecConfig(main_cores=frozenset({0, 1}))
    assert with_threads(lead, pinned).threads_lendable == 0  # --pin
    on_gpu = ModelConfig(main=Path("m.gguf"), draft=None, n_gpu_layers=99)
    assert with_threads(on_gpu, SpecConfig()).threads_lendable == 0
    on_servers = ModelConfig(main=Path("m.gguf"), draft=None, rpc="127.0.0.1:50052")
    assert with_threads(on_servers, SpecConfig()).threads_lendable == 0
    # with an in-process drafter beside it: every core, which that drafter lends first
    beside = ModelConfig(main=Path("m.gguf"), draft=Path("d.gguf"))
    assert with_threads(beside, SpecConfig()).threads_lendable == 8
