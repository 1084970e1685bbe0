"""Free drafters: proposals that cost no model pass, as draft sources.

`NgramDrafts` looks the last few committed tokens up in the request's own tokens (prompt
lookup); `SuffixDrafts` looks them up in earlier requests (a suffix cache shared by every
generation of a process). Both answer in microseconds on the lead's engine thread, need
no core of their own and never rest. A proposal's grade is its match length, so the
policy learns how far to trust a long match apart from a short one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from duo.core.draft import Proposal
from duo.drafting.copying import LONG, CopyPointer
from duo.drafting.ngram import Match, NgramIndex
from duo.drafting.suffix import SuffixCache

NGRAM, SUFFIX = "ngram", "suffix"
Gram = TypeVar("Gram", int, npt.NDArray[np.int64])
WEAK = 100  # grade offset of a match whose continuation disagreed with itself before
DOUBTFUL = 2 / 3  # the confidence at or below which a match is WEAK
OPENING = 200  # the grade of a suffix match at an answer's first tokens (SuffixDrafts)


def grade(m: Match) -> int:
    """Match length, apart (WEAK) for matches whose key was followed by other tokens at
    least a third of the time before. In replays of the default pair's answers
    (scripts/replay-policy.py), a 2-gram followed by the proposed token once in two or
    more earlier occurrences was right 15% of the time, against 60% for one seen once;
    graded apart at or below 2/3, the policy made 0.2-1.2% more tokens per second on each of
    chat, grounded, multiturn, code-edit and agent."""
    return m.length + (WEAK if m.confidence <= DOUBTFUL else 0)


class NgramDrafts:
    """The lookup's proposal, and the copy pointer's where it differs (a copy the
    output has followed for longer than the lookup's key, or one resumed after an edit).

    Kept for a slot's requests one after another, it indexes only what a prompt adds to
    the last request's tokens, where they are its start (a chat's or an agent's next turn
    holds every earlier one, as the main model's KV does): on recorded agent sessions,
    indexing each prompt afresh was a quarter of the lookups' and the policy's time."""

    def __init__(self, n_min: int = 2, n_max: int = 5) -> None:
        self.index = NgramIndex(n_min, n_max)
        self.copy = CopyPointer(long_run=n_max)

    def begin(self, prompt: Sequence[int]) -> None:
        known = self.index.tokens
        if known and len(known) <= len(prompt) and list(prompt[: len(known)]) == known:
            self.index.extend(prompt[len(known) :])
        else:
            self.index.reset(prompt)
        self.copy.reset()

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        if len(self.index) != len(committed):  # out of step (never, for the lead): resync
            self.begin(committed)
        if limit <= 0:
            return []
        copied = self.copy.propose(self.index.tokens, limit)
        if copied and copied[1] == LONG:  # a longer match than any key: the lookup's rule
            return [Proposal(NGRAM, *copied)]
        m = self.index.lookup(limit)
        if m and copied is None:
            self.copy.follow(self.index.found, m.length)
        out = [Proposal(NGRAM, m.tokens, grade(m))] if m else []
        if copied and (not m or copied[0] != m.tokens):
            out.insert(0, Proposal(NGRAM, *copied))
        return out

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        if start == len(self.index):
            self.index.extend(tokens)
            self.copy.extend(self.index.tokens, start)

    def end(self) -> None:
        pass

    def rest(self, resting: frozenset[str]) -> None:
        pass  # costs the main model nothing

    def received(self) -> Mapping[str, int]:
        return {}  # computed on demand: nothing is sent


class Trigrams:
    """Which runs of three tokens the suffix cache may hold: a 4 MB bitmap of hashed
    trigrams, so a round whose last three tokens never occurred together skips the cache's
    lookup (tens of microseconds of numpy) for one array read. Trigrams are never removed:
    after an eviction the bitmap only errs towards looking."""

    BITS = 22

    def __init__(self) -> None:
        self.seen = np.zeros(1 << self.BITS, dtype=np.bool_)

    def add(self, tokens: Sequence[int]) -> None:
        t = np.asarray(tokens, dtype=np.int64)
        self.seen[_trigram_hash(t[:-2], t[1:-1], t[2:])] = True

    def may_hold(self, a: int, b: int, c: int) -> bool:
        return bool(self.seen[_trigram_hash(a, b, c)])


def _trigram_hash(a: Gram, b: Gram, c: Gram) -> Gram:
    """A trigram's slot in the bitmap (element-wise on arrays)."""
    return ((a * 0x9E3779B1) ^ (b * 0x85EBCA77) ^ c) & ((1 << Trigrams.BITS) - 1)


class SuffixMemory:
    """The earlier requests of a process: the suffix cache and its bigram filter, shared
    by every generation's SuffixDrafts (several run at once on a lead with slots)."""

    def __init__(self, cache: SuffixCache | None = None) -> None:
        self.cache = cache or SuffixCache(min_match=3)
        if self.cache.min_match < 3:  # the filter would hide its shorter matches
            raise ValueError("the suffix cache of a SuffixMemory matches 3 tokens or more")
        self.trigrams = Trigrams()

    def add(self, tokens: Sequence[int]) -> None:
        self.cache.add(tokens)
        self.trigrams.add(tokens)

    def forget(self) -> None:
        """Drop every earlier request (a benchmark's repeat must not find its answers)."""
        c = self.cache
        self.cache = SuffixCache(c.max_tokens, c.max_match, c.min_match, c.max_candidates)
        self.trigrams = Trigrams()


class SuffixDrafts:
    """Drafts from the earlier requests in `memory`; adds the request to it when it ends.

    Until the answer has as many tokens as the cache's shortest match, a match is made of
    the prompt's tokens: it shows what followed the same question in an earlier request
    (a template's turn, a scripted instruction), not the same answer, and a chat that
    asks the same thing of another text gets another answer. Those proposals have a grade
    of their own (OPENING), so the policy learns apart what they are worth: in one
    replay of multiturn chats, 48% of them had their first token right, against 90% for
    matches further into the answer.
    """

    def __init__(self, memory: SuffixMemory | None = None) -> None:
        self.memory = memory or SuffixMemory()
        self._seq: list[int] = []
        self._prompt = 0  # the request's prompt tokens

    @property
    def cache(self) -> SuffixCache:
        return self.memory.cache

    def begin(self, prompt: Sequence[int]) -> None:
        self._seq = list(prompt)
        self._prompt = len(prompt)

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        cache = self.memory.cache
        if not cache.requests or limit <= 0 or len(committed) < 3:
            return []
        if not self.memory.trigrams.may_hold(committed[-3], committed[-2], committed[-1]):
            return []
        m = cache.lookup(committed[-cache.max_match :], limit)
        if m is None:
            return []
        opening = len(committed) - self._prompt < cache.min_match
        return [Proposal(SUFFIX, m.tokens, OPENING if opening else grade(m))]

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        del self._seq[start:]
        self._seq.extend(tokens)

    def end(self) -> None:
        if self._seq:
            self.memory.add(self._seq)
        self._seq = []

    def rest(self, resting: frozenset[str]) -> None:
        pass

    def received(self) -> Mapping[str, int]:
        return {}

    def forget(self) -> None:
        self.memory.forget()
