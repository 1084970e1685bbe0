from __future__ import annotations

import random
import tracemalloc
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duo.drafting.ngram import Match
from duo.drafting.suffix import SuffixCache, match_levels


def nbytes(cache: SuffixCache) -> int:
    """Bytes the cache holds in arrays (buffer capacity, evicted tokens not yet compacted
    included)."""
    return int(cache._buffer.nbytes + sum(run.nbytes for run in cache._runs))


# A small alphabet, so that suffixes repeat within and across requests.
requests_lists = st.lists(st.lists(st.integers(0, 3), max_size=30), max_size=8)
contexts = st.lists(st.integers(0, 3), max_size=14)
thresholds = st.sampled_from([0.0, 0.1, 0.34, 0.5, 1.0])


def stored(requests: Sequence[list[int]], max_tokens: int) -> list[list[int]]:
    """The requests a cache should still hold: the newest ones that fit, the last truncated."""
    live: list[list[int]] = []
    for request in requests:
        kept = request[-max_tokens:]
        if not kept:
            continue
        live.append(kept)
        while sum(map(len, live)) > max_tokens:
            live.pop(0)
    return live


def naive(
    requests: list[list[int]],
    context: list[int],
    limit: int,
    min_confidence: float,
    min_match: int = 2,
    max_match: int = 32,
) -> Match | None:
    """The specification, written as the plainest scan over every stored position."""
    tail = context[-max_match:]
    if limit <= 0 or len(tail) < min_match:
        return None
    candidates: list[tuple[int, int]] = []
    length = len(tail)
    while length >= min_match and not candidates:
        candidates = [
            (r, p)
            for r, request in enumerate(requests)
            for p in range(length, len(request))
            if request[p - length : p] == tail[len(tail) - length :]
        ]
        length -= 1
    total = len(candidates)
    draft: list[int] = []
    support = 0
    for step in range(limit):
        counts: dict[int, int] = {}
        newest: dict[int, int] = {}
        for order, (r, p) in enumerate(candidates):
            if p + step < len(requests[r]):
                token = requests[r][p + step]
                counts[token] = counts.get(token, 0) + 1
                newest[token] = order
        if not counts:
            break
        best = max(counts, key=lambda token: (counts[token], newest[token]))
        if counts[best] / total < min_confidence:
            break
        support = support or counts[best]
        draft.append(best)
        candidates = [
            (r, p)
            for r, p in candidates
            if p + step < len(requests[r]) and requests[r][p + step] == best
        ]
    if not draft:
        return None
    return Match(tuple(draft), length + 1, support, support / total)


@settings(max_examples=300)
@given(
    requests_lists,
    contexts,
    st.integers(0, 8),
    thresholds,
    st.integers(4, 120),
    st.tuples(st.integers(1, 3), st.sampled_from([3, 4, 5, 7, 9, 32])),
)
def test_lookup_equals_a_naive_scan(
    requests: list[list[int]],
    context: list[int],
    limit: int,
    min_confidence: float,
    max_tokens: int,
    match: tuple[int, int],
) -> None:
    min_match, max_match = match
    cache = SuffixCache(max_tokens, max_match, min_match, max_candidates=10_000)
    for request in requests:
        cache.add(request)
    live = stored(requests, max_tokens)
    assert cache.requests == len(live)
    assert cache.tokens == sum(map(len, live)) <= max_tokens
    expected = naive(live, context, limit, min_confidence, min_match, max_match)
    assert cache.lookup(context, limit, min_confidence) == expected


@given(requests_lists, contexts, st.integers(1, 8))
def test_drafts_never_cross_into_the_next_request(
    requests: list[list[int]], context: list[int], limit: int
) -> None:
    cache = SuffixCache()
    for request in requests:
        cache.add(request)
    match = cache.lookup(context, limit, min_confidence=0.0)
    if match is None:
        return
    assert 1 <= len(match.tokens) <= limit
    assert 0.0 < match.confidence <= 1.0
    assert match.support >= 1
    suffix = context[len(context) - match.length :]
    whole = suffix + list(match.tokens)
    assert any(
        request[i : i + len(whole)] == whole for request in requests for i in range(len(request))
    )


def test_the_most_frequent_continuation_wins_until_agreement_falls() -> None:
    cache = SuffixCache()
    for request in ([1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9, 9]):
        cache.add(request)
    assert cache.lookup([7, 1, 2], 4, 0.5) == Match((3,), 2, support=2, confidence=2 / 3)
    # 4 and 5 tie at the second step: the more recent request wins.
    assert cache.lookup([7, 1, 2], 4, 0.3) == Match((3, 5), 2, support=2, confidence=2 / 3)
    assert cache.lookup([7, 1, 2], 4, 0.7) is None


def test_the_longest_suffix_decides_the_candidates() -> None:
    cache = SuffixCache()
    cache.add([5, 1, 2, 8, 8])
    cache.add([1, 2, 7, 7])
    cache.add([0, 1, 2, 7, 6])
    assert cache.lookup([5, 1, 2], 5) == Match((8, 8), 3, support=1, confidence=1.0)
    assert cache.lookup([3, 1, 2], 5) == Match((7, 6), 2, support=2, confidence=2 / 3)


def test_limit_is_respected() -> None:
    cache = SuffixCache()
    cache.add(list(range(100)))
    assert cache.lookup([10, 11], 5) == Match((12, 13, 14, 15, 16), 2, 1, 1.0)
    assert cache.lookup([10, 11], 0) is None


def test_no_draft_runs_past_the_end_of_its_request() -> None:
    cache = SuffixCache()
    cache.add([1, 2, 3])
    cache.add([4, 5, 6])
    assert cache.lookup([1, 2], 8) == Match((3,), 2, 1, 1.0)
    assert cache.lookup([2, 3], 8) is None  # [2, 3] ends its request: nothing follows it


def test_eviction_drops_the_oldest_whole_requests() -> None:
    cache = SuffixCache(max_tokens=10)
    cache.add([1, 2, 3, 4])
    cache.add([5, 6, 7])
    assert (cache.requests, cache.tokens) == (2, 7)
    cache.add([8, 9, 10, 11])
    assert (cache.requests, cache.tokens) == (2, 7)
    assert cache.lookup([1, 2], 3) is None
    assert cache.lookup([5, 6], 3) == Match((7,), 2, 1, 1.0)
    assert cache.lookup([8, 9], 3) == Match((10, 11), 2, 1, 1.0)
    cache.add([12] * 10)
    assert (cache.requests, cache.tokens) == (1, 10)
    assert cache.lookup([8, 9], 3) is None


def test_a_request_longer_than_the_cache_keeps_its_end() -> None:
    cache = SuffixCache(max_tokens=5)
    cache.add(list(range(10)))
    assert (cache.requests, cache.tokens) == (1, 5)
    assert cache.lookup([0, 1], 3) is None
    assert cache.lookup([5, 6], 3) == Match((7, 8, 9), 2, 1, 1.0)


def test_candidates_are_capped_to_the_most_recent() -> None:
    requests = [[1, 2, 7], [1, 2, 7], [1, 2, 7], [1, 2, 8]]
    full, capped = SuffixCache(), SuffixCache(max_candidates=2)
    for request in requests:
        full.add(request)
        capped.add(request)
    assert full.lookup([1, 2], 2, 0.0) == Match((7,), 2, 3, 3 / 4)
    assert capped.lookup([1, 2], 2, 0.0) == Match((8,), 2, 1, 1 / 2)


@pytest.mark.parametrize("context", [[], [1], (1,)])
def test_short_contexts_and_an_empty_cache_propose_nothing(context: Sequence[int]) -> None:
    cache = SuffixCache()
    assert cache.lookup([1, 2], 4) is None
    cache.add([])
    assert (cache.requests, cache.tokens) == (0, 0)
    cache.add([1, 1, 1, 1])
    assert cache.lookup(context, 4) is None
    assert cache.lookup((1, 1), 4) == Match((1, 1), 2, 2, 1.0)


def test_levels_are_dense_then_geometric() -> None:
    assert match_levels(2, 32) == (2, 3, 4, 6, 8, 12, 16, 24, 32)
    assert match_levels(1, 5) == (1, 2, 3, 4)
    assert match_levels(5, 5) == (5,)


@pytest.mark.parametrize(
    "arguments",
    [
        {"max_tokens": 0},
        {"max_tokens": 1 << 31},
        {"min_match": 0},
        {"min_match": 5, "max_match": 4},
        {"max_candidates": 0},
        {"max_match": 1000},
    ],
)
def test_invalid_settings_are_rejected(arguments: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        SuffixCache(**arguments)


def synthetic_requests(count: int, size: int, seed: int = 0) -> list[list[int]]:
    """Requests over a 32k vocabulary that partly repeat earlier ones."""
    rng = random.Random(seed)
    requests: list[list[int]] = []
    for _ in range(count):
        request: list[int] = []
        while len(request) < size:
            if requests and rng.random() < 0.5:
                source = rng.choice(requests)
                start = rng.randrange(len(source))
                request += source[start : start + rng.randrange(8, 64)]
            else:
                request += [rng.randrange(32_000) for _ in range(rng.randrange(4, 32))]
        requests.append(request[:size])
    return requests


def test_a_stored_token_costs_less_than_200_bytes() -> None:
    requests = synthetic_requests(100, 2_000)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        cache = SuffixCache()
        for request in requests:
            cache.add(request)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cache.tokens == 200_000
    assert (after - before) / cache.tokens < 200
    assert nbytes(cache) / cache.tokens < 200


def test_eviction_frees_memory() -> None:
    requests = synthetic_requests(200, 1_000, seed=1)
    cache = SuffixCache(max_tokens=20_000)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for request in requests:
            cache.add(request)
            assert cache.tokens <= 20_000
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cache.requests == 20
    assert (after - before) < 1.25 * 20_000 * 200
    assert nbytes(cache) < 1.25 * 20_000 * 200
    last = requests[-1]
    assert cache.lookup(last[100:140], 8, 0.0) is not None
