from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duo.drafting.lookup import (
    NGRAM,
    OPENING,
    SUFFIX,
    WEAK,
    NgramDrafts,
    SuffixDrafts,
    SuffixMemory,
    grade,
)
from duo.drafting.ngram import NgramIndex
from duo.drafting.suffix import SuffixCache

tokens = st.lists(st.integers(0, 6), min_size=2, max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.lists(tokens, min_size=1, max_size=4), tokens)
def test_the_bigram_filter_never_hides_a_match(
    earlier: list[list[int]], context: list[int]
) -> None:
    """Skipping the cache when the last two tokens were never seen together loses nothing."""
    drafts = SuffixDrafts()
    for request in earlier:
        drafts.begin(request)
        drafts.end()
    proposals = drafts.propose(context, 8)
    direct = drafts.cache.lookup(context, 8)
    assert [p.tokens for p in proposals] == ([] if direct is None else [direct.tokens])
    assert all(p.source == SUFFIX for p in proposals)


def test_ngram_drafts_follow_the_commits() -> None:
    drafts = NgramDrafts(2, 4)
    drafts.begin([1, 2, 3, 4, 5, 1, 2])
    [proposal] = drafts.propose([1, 2, 3, 4, 5, 1, 2], 3)
    assert (proposal.source, proposal.tokens, proposal.grade) == (NGRAM, (3, 4, 5), 2)
    drafts.commit(7, [3, 4])
    [proposal] = drafts.propose([1, 2, 3, 4, 5, 1, 2, 3, 4], 8)
    assert proposal.tokens[:2] == (5, 1) and proposal.grade == 4
    assert drafts.propose([9, 9, 9, 8], 0) == []  # out of step: resynced, and no room


@settings(max_examples=200, deadline=None)
@given(tokens, tokens, st.lists(st.integers(0, 6), max_size=20), st.booleans())
def test_a_slots_next_prompt_is_indexed_from_where_the_last_request_ended(
    first: list[int], answer: list[int], turn: list[int], goes_on: bool
) -> None:
    """A prompt that starts with the last request's tokens (a chat's next turn) costs the
    index only its new tokens; any other prompt is indexed afresh. Either way the drafts
    are those of an index built on the prompt alone."""
    kept = NgramDrafts(2, 4)
    kept.index = index = CountingIndex(2, 4)
    kept.begin(first)
    kept.commit(len(first), answer)
    prompt = [*first, *answer, *turn] if goes_on else [*turn, *first]
    index.indexed = 0
    kept.begin(prompt)
    fresh = NgramDrafts(2, 4)
    fresh.begin(prompt)
    assert kept.propose(prompt, 8) == fresh.propose(prompt, 8)
    assert index.tokens == prompt
    if goes_on:
        assert index.indexed == len(turn)


class CountingIndex(NgramIndex):
    """An index that counts the tokens it indexes."""

    indexed = 0

    def extend(self, tokens: Iterable[int]) -> None:
        tokens = list(tokens)
        self.indexed += len(tokens)
        super().extend(tokens)


def test_the_suffix_cache_learns_from_finished_requests_and_forgets() -> None:
    drafts = SuffixDrafts()
    answer = [7, 8, 9, 10, 11, 12]
    drafts.begin([1, 2])
    drafts.commit(2, answer)
    assert drafts.propose([1, 2, *answer[:2]], 4) == []  # not finished yet: not in the cache
    drafts.end()
    [proposal] = drafts.propose([5, 2, 7, 8], 4)  # "2, 7, 8" occurred: 3 tokens match
    assert proposal.tokens == (9, 10, 11, 12)
    drafts.forget()
    assert drafts.propose([5, 2, 7, 8], 4) == []


def test_a_suffix_match_of_prompt_tokens_is_graded_apart() -> None:
    """Until the answer has the cache's shortest match of its own, a match shows what
    followed the same question, and has the OPENING grade; then the usual grade."""
    drafts = SuffixDrafts()
    drafts.begin([1, 2, 3])
    drafts.commit(3, [4, 5, 6, 7, 8])
    drafts.end()
    prompt = [9, 1, 2, 3]  # another request ending in the same question
    drafts.begin(prompt)
    for answered in range(4):
        context = [*prompt, *[4, 5, 6, 7][:answered]]
        [proposal] = drafts.propose(context, 8)
        m = drafts.cache.lookup(context, 8)
        assert m is not None and proposal.tokens == m.tokens
        assert proposal.grade == (OPENING if answered < drafts.cache.min_match else grade(m))


def test_the_suffix_memory_refuses_a_cache_its_filter_would_hide() -> None:
    with pytest.raises(ValueError):
        SuffixMemory(SuffixCache(min_match=2))


def test_a_key_followed_by_other_tokens_a_third_of_the_time_is_graded_apart() -> None:
    """(1, 2) was followed by 6 twice in three: doubtful. By 6 three times in four: not."""
    doubtful = [1, 2, 6, 9, 1, 2, 5, 1, 2, 6, 1, 2]
    trusted = [1, 2, 6, 9, 1, 2, 5, 1, 2, 6, 8, 1, 2, 6, 1, 2]
    for tokens, expected in ((doubtful, WEAK + 2), (trusted, 2)):
        drafts = NgramDrafts(2, 4)
        drafts.begin(tokens)
        [proposal] = drafts.propose(tokens, 2)
        assert (proposal.tokens[0], proposal.grade) == (6, expected)
