from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duo.core.verify import Verdict, verify


@pytest.mark.parametrize(
    ("draft", "samples", "expected"),
    [
        ([], [7], Verdict(0, (7,))),  # no draft: one token of the main model's own
        ([1, 2, 3], [1, 2, 3, 4], Verdict(3, (1, 2, 3, 4))),  # all accepted + bonus
        ([1, 2, 3], [9, 2, 3, 4], Verdict(0, (9,))),  # first token rejected
        ([1, 2, 3], [1, 9, 3, 4], Verdict(1, (1, 9))),  # correction in the middle
        ([1, 2, 3], [1, 2, 9, 4], Verdict(2, (1, 2, 9))),  # correction at the end
    ],
)
def test_verify_table(draft: list[int], samples: list[int], expected: Verdict) -> None:
    calls: list[int] = []

    def sample_at(i: int) -> int:
        calls.append(i)
        return samples[i]

    assert verify(draft, sample_at) == expected
    # One sample per emitted token, in order, never past the first disagreement.
    assert calls == list(range(len(expected.tokens)))


@given(
    truth=st.lists(st.integers(0, 5), min_size=9, max_size=9),
    draft=st.lists(st.integers(0, 5), max_size=8),
)
def test_accepted_prefix_plus_correction_equals_sampling_position_by_position(
    truth: list[int], draft: list[int]
) -> None:
    """With a main model whose sample at each position is truth[i] (given the draft so
    far agreed), the verdict equals sampling the main model alone token by token."""
    verdict = verify(draft, lambda i: truth[i])
    n = len(verdict.tokens)
    assert list(verdict.tokens) == truth[:n]
    assert list(verdict.tokens[: verdict.accepted]) == draft[: verdict.accepted]
    assert verdict.accepted == len(draft) or truth[verdict.accepted] != draft[verdict.accepted]
    assert n == verdict.accepted + 1
