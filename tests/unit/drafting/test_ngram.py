from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duo.drafting.ngram import Match, NgramIndex

# A small alphabet, so that n-grams repeat.
token_lists = st.lists(st.integers(0, 3), max_size=60)
sizes = st.tuples(st.integers(1, 4), st.integers(0, 3)).map(lambda t: (t[0], t[0] + t[1]))


def naive(tokens: list[int], n_min: int, n_max: int, limit: int) -> Match | None:
    """The specification, written as the plainest O(n²) scan."""
    if limit <= 0:
        return None
    size = len(tokens)
    for n in range(n_max, n_min - 1, -1):
        if n >= size:
            continue
        tail = tokens[size - n :]
        ends = [end for end in range(n, size) if tokens[end - n : end] == tail]
        if not ends:
            continue
        start = max(ends)
        support = sum(tokens[end] == tokens[start] for end in ends)
        return Match(tuple(tokens[start : start + limit]), n, support, support / len(ends))
    return None


@given(token_lists, sizes, st.integers(0, 8))
def test_lookup_equals_a_naive_scan(tokens: list[int], size: tuple[int, int], limit: int) -> None:
    index = NgramIndex(*size)
    index.reset(tokens)
    assert len(index) == len(tokens)
    assert index.lookup(limit) == naive(tokens, *size, limit)


@given(token_lists, st.lists(st.integers(0, 9), max_size=8), sizes)
def test_extend_equals_reset_on_the_concatenation(
    tokens: list[int], cuts: list[int], size: tuple[int, int]
) -> None:
    grown = NgramIndex(*size)
    grown.reset(tokens[: cuts[0]] if cuts else [])
    position = len(grown)
    for cut in [*cuts[1:], len(tokens)]:
        grown.extend(tokens[position : position + cut])
        position = len(grown)
        assert grown.lookup(6) == naive(tokens[:position], *size, 6)
    grown.extend(tokens[position:])
    whole = NgramIndex(*size)
    whole.reset(tokens)
    assert len(grown) == len(whole) == len(tokens)
    for limit in range(5):
        assert grown.lookup(limit) == whole.lookup(limit)


@given(token_lists, st.integers(1, 8))
def test_a_match_is_a_real_earlier_occurrence(tokens: list[int], limit: int) -> None:
    index = NgramIndex(2, 4)
    index.reset(tokens)
    match = index.lookup(limit)
    if match is None:
        return
    assert 1 <= len(match.tokens) <= limit
    assert 2 <= match.length <= 4
    assert match.support >= 1
    assert 0.0 < match.confidence <= 1.0
    tail = tokens[len(tokens) - match.length :]
    starts = [
        end
        for end in range(match.length, len(tokens))
        if tokens[end - match.length : end] == tail
        and tuple(tokens[end : end + len(match.tokens)]) == match.tokens
    ]
    assert starts  # the draft is copied from an earlier place that the tail matches


def test_the_most_recent_occurrence_wins_and_support_counts_the_rest() -> None:
    index = NgramIndex(2, 2)
    index.reset([1, 2, 7, 1, 2, 8, 1, 2, 7, 5, 1, 2])
    assert index.lookup(3) == Match((7, 5, 1), 2, support=2, confidence=2 / 3)


def test_the_longest_ngram_wins() -> None:
    index = NgramIndex(2, 3)
    index.reset([0, 1, 2, 9, 5, 1, 2, 8, 0, 1, 2])
    assert index.lookup(2) == Match((9, 5), 3, support=1, confidence=1.0)


def test_an_occurrence_overlapping_the_end_proposes_what_exists() -> None:
    index = NgramIndex(2, 4)
    index.reset([3, 1, 1, 1])
    assert index.lookup(5) == Match((1,), 2, support=1, confidence=1.0)
    index.reset([4, 5, 4, 5, 4, 5])
    assert index.lookup(9) == Match((4, 5), 4, support=1, confidence=1.0)


@pytest.mark.parametrize("tokens", [[], [1], [1, 1], [1, 2, 3, 4], [1, 2, 3, 1]])
def test_short_or_unrepeated_inputs_propose_nothing(tokens: list[int]) -> None:
    index = NgramIndex(2, 4)
    index.reset(tokens)
    assert index.lookup(4) is None


def test_a_zero_limit_proposes_nothing() -> None:
    index = NgramIndex()
    index.reset([1, 2, 1, 2, 1, 2])
    assert index.lookup(0) is None
    assert index.lookup(1) == Match((1,), 4, support=1, confidence=1.0)


def test_reset_forgets_the_previous_request() -> None:
    index = NgramIndex(2, 2)
    index.reset([1, 2, 3, 1, 2])
    assert index.lookup(1) is not None
    index.reset([1, 2])
    assert len(index) == 2
    assert index.lookup(1) is None


@pytest.mark.parametrize(("n_min", "n_max"), [(0, 2), (3, 2), (-1, 1)])
def test_invalid_sizes_are_rejected(n_min: int, n_max: int) -> None:
    with pytest.raises(ValueError):
        NgramIndex(n_min, n_max)
