from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duo.core.draft import Draft, common_prefix, usable

COMMITTED = [5, 6, 7, 8]


@pytest.mark.parametrize(
    ("draft", "limit", "expected"),
    [
        (None, 4, []),
        (Draft(4, (1, 2, 3)), 8, [1, 2, 3]),  # starts right after the committed tokens
        (Draft(4, (1, 2, 3)), 2, [1, 2]),  # capped by the limit
        (Draft(2, (7, 8, 1, 2)), 8, [1, 2]),  # overlap matches the committed tokens
        (Draft(2, (7, 9, 1, 2)), 8, []),  # overlap disagrees: stale draft
        (Draft(5, (1, 2)), 8, []),  # a gap: starts past the committed tokens
        (Draft(2, (7, 8)), 8, []),  # entirely behind: nothing new
        (Draft(4, (1, 99, 2)), 8, [1]),  # out-of-vocabulary token ends the draft
        (Draft(4, (-1, 2)), 8, []),  # negative IDs too
        (Draft(4, (1, 2)), 0, []),
    ],
)
def test_usable(draft: Draft | None, limit: int, expected: list[int]) -> None:
    assert usable(COMMITTED, draft, limit, n_vocab=16) == expected


@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40))
def test_common_prefix(a: list[int], b: list[int]) -> None:
    n = common_prefix(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]
