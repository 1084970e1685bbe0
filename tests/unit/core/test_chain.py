"""A request's own sampler chain (llama-server's `samplers`), the infill sampler among them."""

from __future__ import annotations

import numpy as np
import pytest

from duo.core.chain import infill, parse_samplers, run_chain
from duo.core.sampling import SamplingParams
from duo.errors import UsageError


class Vocab:
    """Token i spells PIECES[i]; token 0 ends a text."""

    PIECES = (b"", b"re", b"ret", b"return", b"x", b"y")

    def is_eog(self, token: int) -> bool:
        return token == 0

    def piece(self, token: int) -> bytes:
        return self.PIECES[token]

    def end_token(self) -> int:
        return 0


def test_names_letters_and_llama_cpp_s_other_spellings_are_read() -> None:
    assert parse_samplers(["top_k", "top-p", "infill"]) == ("top_k", "top_p", "infill")
    assert parse_samplers("kpt") == ("top_k", "top_p", "temperature")
    assert parse_samplers([]) == ()


@pytest.mark.parametrize("bad", [["top_q"], "kz"])
def test_an_unknown_sampler_is_refused_by_name(bad: list[str] | str) -> None:
    with pytest.raises(UsageError) as e:
        parse_samplers(bad)
    assert e.value.param == "samplers"


def test_the_chain_runs_in_the_order_named() -> None:
    logits = np.array([0.0, 3.0, 2.0, 1.0, 5.0, 4.0], dtype=np.float32)
    p = SamplingParams(top_k=2, temperature=0.0, samplers=("top_k", "temperature"))
    ids, _ = run_chain(logits, [], p, None)
    assert list(ids) == [4]  # temperature 0: the likeliest only
    p = SamplingParams(top_k=3, samplers=("top_k",))
    ids, z = run_chain(logits, [], p, None)
    assert list(ids) == [4, 5, 1] and list(z) == [5.0, 4.0, 3.0]  # no temperature applied


def test_a_chain_of_its_own_is_never_greedy() -> None:
    assert not SamplingParams(temperature=0.0, samplers=("top_k",)).greedy


def test_infill_merges_a_token_into_the_likelier_one_that_extends_it() -> None:
    # "re" (p .45) begins "ret" and "return": their probability goes to the likeliest of
    # each pair, so one text token is left (end tokens always stay).
    p = np.array([0.01, 0.45, 0.04, 0.5])  # by token ID
    order = np.array([3, 1, 2, 0])  # by descending probability
    ids, _ = infill((order, np.log(p[order])), Vocab())
    assert list(ids) == [3, 0]


def test_infill_keeps_only_end_tokens_when_ending_is_likely_enough() -> None:
    z = np.log(np.array([0.3, 0.35, 0.35]))
    ids, _ = infill((np.array([4, 5, 0]), z[[1, 2, 0]]), Vocab())
    assert list(ids) == [0]


def test_infill_ends_the_text_when_no_token_is_likely_enough() -> None:
    z = np.log(np.full(6, 1 / 6))
    ids, _ = infill((np.arange(6)[::-1].copy(), z), Vocab())
    assert list(ids) == [0]
