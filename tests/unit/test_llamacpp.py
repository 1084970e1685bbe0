"""Reading llama.cpp's own summaries (the bench's peer)."""

from __future__ import annotations

import pytest

from duo.bench.llamacpp import ACCEPTED, DECODED, DRAFTED, EVAL, completion_timings, find_bin
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
    from duo.bench.llamacpp import ngram_flags

    assert ngram_flags("ngram-simple", 8) == [
        "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8",
    ]  # fmt: skip
    assert ngram_flags("draft-simple,ngram-mod", 6)[-2:] == ["--spec-ngram-mod-n-max", "6"]
    assert ngram_flags("draft-simple", 8) == ngram_flags("ngram-cache", 8) == []
