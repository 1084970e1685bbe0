"""Reading llama.cpp's own summaries (the bench's peer)."""

from __future__ import annotations

import pytest

from duo.bench.harness.llamacpp import (
    ACCEPTED,
    DECODED,
    DRAFTED,
    EVAL,
    completion_timings,
    find_bin,
)
from duo.errors import UsageError

COMPLETION = """\
0.01.198.413 I common_perf_print:    sampling time =       6.40 ms
0.01.198.434 I common_perf_print:    samplers time =       2.57 ms /    34 tokens
0.01.575.181 I common_perf_print: prompt eval time =     507.62 ms /     4 tokens (  126.91 ms per token,     7.88 tokens per second)
0.01.575.195 I common_perf_print:        eval time =     470.19 ms /    31 runs   (   15.17 ms per token,    65.93 tokens per second)
"""  # noqa: E501
SPECULATIVE = """\
decoded  128 tokens in    3.456 seconds, speed:   37.037 t/s
n_draft   = 4
n_predict = 128
n_drafted = 140
n_accept  = 90
accept    = 64.286%
"""


def test_eval_time_is_not_the_prompt_eval_time() -> None:
    assert EVAL.findall(COMPLETION) == [("470.19", "31")]


def test_the_peer_is_timed_on_its_passes_and_their_sampling() -> None:
    """As duo's modes are: 31 passes after the prompt yield 31 of the 32 sampled tokens."""
    t = completion_timings(COMPLETION)
    assert t["tokens"] == 31
    assert t["pass_seconds"] == pytest.approx(0.47019)
    assert t["seconds"] == pytest.approx((470.19 + 6.40 * 31 / 32) / 1000)
    with pytest.raises(UsageError, match="timings"):
        completion_timings(COMPLETION.split("\n", 2)[2])  # no sampling time


def test_speculative_summary() -> None:
    decoded = DECODED.search(SPECULATIVE)
    assert decoded is not None and decoded.groups() == ("128", "3.456")
    drafted, accepted = DRAFTED.search(SPECULATIVE), ACCEPTED.search(SPECULATIVE)
    assert drafted is not None and drafted.group(1) == "140"
    assert accepted is not None and accepted.group(1) == "90"


def test_missing_binaries_say_how_to_build_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match=r"build-llama-cpp\.sh"):
        find_bin(str(tmp_path), "llama-completion")


def test_ngram_peers_draft_as_duo_does() -> None:
    from duo.bench.harness.llamacpp import ngram_flags

    assert ngram_flags("ngram-simple", 8) == [
        "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8",
    ]  # fmt: skip
    assert ngram_flags("draft-simple,ngram-mod", 6)[-2:] == ["--spec-ngram-mod-n-max", "6"]
    assert ngram_flags("draft-simple", 8) == ngram_flags("ngram-cache", 8) == []


def test_the_default_peers_take_llama_cpps_own_thread_count(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """llama.cpp-default and llama-server-default run as a user types them: no -t."""
    from pathlib import Path

    from duo.bench.harness import llamacpp, servers
    from duo.bench.harness.llamacpp import _greedy
    from duo.session.config import ModelConfig, SpecConfig

    assert "-t" not in _greedy(Path("m.gguf"), "hi", 8, None, 0)
    assert _greedy(Path("m.gguf"), "hi", 8, 2, 0)[6:8] == ["-t", "2"]
    started: list[list[str]] = []
    monkeypatch.setattr(llamacpp, "find_bin", lambda _d, name: tmp_path / name)
    monkeypatch.setattr(
        servers.Server, "__init__", lambda self, name, cmds, devices, url: started.extend(cmds)
    )
    models = ModelConfig(Path("m.gguf"), Path("d.gguf"))
    servers.start("llama-server-default", models, SpecConfig(), 1, None)
    servers.start("llama-server", models, SpecConfig(), 1, None)
    servers.start("duo", models, SpecConfig(), 1, None)
    default, tuned, duo = started
    assert "-t" not in default and "-tb" not in default and "--kv-unified" not in default
    assert "-t" in tuned and "-tb" in tuned
    # duo with the pair and no placement flags: -md, and no -t, --pin or --spec-type
    assert "-md" in duo and not {"-t", "--pin", "--spec-type"} & set(duo)
