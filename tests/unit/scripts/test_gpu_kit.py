"""scripts/gpu: synth.py's word order and check.py's readers of each tool's output (no
models; tests/integration/test_gpu_kit.py runs them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

GPU = Path(__file__).parents[3] / "scripts" / "gpu"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


synth = load("synth")
check = load("check")


def test_the_word_order_is_one_cycle_over_the_plain_words() -> None:
    tokens = ["<s>", "\u0120the", "cat", "\u0120sat", "!", "\u0120on", "a", "\u0120mat"]
    types = [3, 1, 1, 1, 1, 1, 1, 1]
    order, nxt = synth.word_map(tokens, types, seed=0)
    assert sorted(order) == [1, 2, 3, 5, 7]  # not the control token, "!" nor one letter
    step = dict(zip(order, nxt, strict=True))
    seen, t = [], order[0]
    for _ in order:
        seen.append(t)
        t = step[t]
    assert t == order[0] and sorted(seen) == sorted(order)


@pytest.mark.parametrize("agree", [1.0, 0.75, 0.0])
def test_a_draft_follows_the_order_on_the_agreed_share_and_stays_a_permutation(
    agree: float,
) -> None:
    order = np.arange(1000)
    nxt = np.roll(order, -1)
    draft = synth.disagree(order, nxt, agree, seed=0)
    assert sorted(draft) == sorted(nxt)
    assert np.mean(draft == nxt) == pytest.approx(agree, abs=0.01)


def test_pool_rows_never_repeat() -> None:
    rows = synth.Pool(0).take((3000, 64), 1.0)
    assert len({r.tobytes() for r in rows}) == 3000 and rows.std() == pytest.approx(1, abs=0.02)


def test_check_reads_each_tools_speed() -> None:
    duo = (
        "encoded   12 tokens in    0.002 s, speed:  5272.88 t/s\n"
        "decoded   64 tokens in    2.000 s, speed:    32.00 t/s\n"
        "drafted 40, accepted 30, acceptance rate 0.75\nplacement: main model on 16 threads\n"
    )
    assert check.speed(duo) == {
        "tokens": 64, "seconds": 2.0, "tokens_per_second": 32.0, "drafted": 40,
        "accepted": 30, "placement": "placement: main model on 16 threads",
    }  # fmt: skip
    llama = (
        "common_perf_print: prompt eval time =  0.75 ms /  5 tokens\n"
        "common_perf_print:        eval time =  500.00 ms /  63 runs   (7.9 ms per token)\n"
    )
    assert check.completion_speed(llama)["tokens_per_second"] == pytest.approx(126.0)
    with pytest.raises(RuntimeError, match="decoded"):
        check.speed("nothing")
