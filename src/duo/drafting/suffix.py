"""Suffix decoding: draft from what earlier requests said after the same words.

Requests repeat one another (agents re-send the same tool calls, users re-ask, a
template fills the same boilerplate). SuffixDecoding (arXiv 2411.04975, Snowflake
ArcticInference) keeps the prompt and output of finished requests, finds where the
longest suffix of the current context occurred in them, and drafts the most frequent
continuation: a greedy walk down a suffix tree, taking the commonest child at each
step while the share of occurrences that agree with the whole draft stays above a
threshold (ArcticInference's `min_token_prob`, whose default is 0.1 as here).

This is that idea with flat arrays instead of a tree, so that memory is small and exact:
- the tokens of every stored request sit end to end in one int32 buffer;
- for each indexed suffix length k (every length from `min_match` to 4, then about 1.5x
  apart up to `max_match`: 2, 3, 4, 6, 8, 12, 16, 24, 32), every position p that has a
  token of its own request after it gets one uint64 key,
      level (4 bits) | 28-bit hash of the k tokens before p | p (32 bits),
  kept in sorted runs (a log-structured merge: a new request's keys form a run, and the
  newest runs merge while the older run is at most 4 times bigger).
So a stored token costs 4 bytes plus 8 per level: 76 bytes with the default levels
(tracemalloc: 76 at 1M tokens, 90 at 2M with evicted requests awaiting compaction; a
merge briefly doubles a run). The tests assert < 200 bytes a token.

A lookup sends one `searchsorted` per run for all levels at once: the key range of a
suffix's hash at a level, from the first live position on, holds its occurrences in
order of position. The longest level with hits gives the candidates; their exact match
lengths (up to the next level) are checked against the tokens, which also discards hash
collisions, and only the longest survive. Candidates are capped at the `max_candidates`
most recent ones, which bounds the time of a lookup; up to that cap the result is exact.
With 1-2M tokens stored a lookup takes 30-100 us (median), an `add` about 1 ms (mean 3,
with the occasional merge or compaction of the big runs taking up to a few hundred ms).

Eviction drops the oldest whole requests: their positions stay in the runs until the
dead tokens reach a quarter of `max_tokens`, and meanwhile lookups simply start their key
ranges at the first live position. Compaction then filters the runs, shifts the buffer
and rebases positions, so memory stays within about 1.25 times that of `max_tokens` live
tokens. A request longer than `max_tokens` keeps its last `max_tokens` tokens (the output
end is what later requests are likeliest to repeat).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from duo.drafting.ngram import Match

_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1
_BASE = 0x9E3779B97F4A7C15  # odd, so hashing is a polynomial in an invertible base
_MIX = 0xD6E8FEB86659FD93  # odd multiplier that spreads the polynomial into the top bits
_HASH_SHIFT = 36  # keep the top 28 bits of the mixed 64-bit hash
_LEVEL_SHIFT = 60
_MAX_LEVELS = 15  # level numbers 0..14 leave room for the exclusive upper key of a range
_MERGE_FACTOR = 4

Keys = npt.NDArray[np.uint64]
Positions = npt.NDArray[np.int64]


def match_levels(min_match: int, max_match: int) -> tuple[int, ...]:
    """Suffix lengths that get an index: all up to 4, then alternately x1.5 and x4/3."""
    levels: list[int] = []
    k = min_match
    while k <= max_match:
        levels.append(k)
        if k < 4:
            k += 1
        elif k & (k - 1) == 0:
            k = k * 3 // 2
        else:
            k = k * 4 // 3
    return tuple(levels)


def tally(column: list[int]) -> tuple[int, int]:
    """How many times the commonest token occurs, and which (ties: the one seen last)."""
    first = column[0]
    if column.count(first) == len(column):  # all agree: the usual case, at C speed
        return len(column), first
    counts: dict[int, int] = {}
    for token in column:
        counts[token] = counts.get(token, 0) + 1
    top = max(counts.values())
    return top, next(token for token in reversed(column) if counts[token] == top)


class SuffixCache:
    """Finished requests (prompt + output), and drafts from them for a new context."""

    def __init__(
        self,
        max_tokens: int = 2_000_000,
        max_match: int = 32,
        min_match: int = 2,
        max_candidates: int = 256,
    ) -> None:
        if not 1 <= max_tokens < 1 << 31:
            raise ValueError(f"max_tokens must be in [1, 2**31), got {max_tokens}")
        if not 1 <= min_match <= max_match:
            raise ValueError(f"need 1 <= min_match <= max_match, got {min_match}, {max_match}")
        if max_candidates < 1:
            raise ValueError(f"max_candidates must be positive, got {max_candidates}")
        self.max_tokens = max_tokens
        self.max_match = max_match
        self.min_match = min_match
        self.max_candidates = max_candidates
        self.levels = match_levels(min_match, max_match)
        if len(self.levels) > _MAX_LEVELS:
            raise ValueError(f"max_match {max_match} needs more than {_MAX_LEVELS} levels")
        self._powers = [pow(_BASE, j, 1 << 64) for j in range(max_match)]
        self._buffer = np.zeros(1024, dtype=np.int32)
        self._end = 0  # buffer[:end] is used; buffer[:live] holds evicted requests
        self._live = 0
        self._starts: deque[int] = deque()  # live requests, oldest first
        self._ends: deque[int] = deque()
        self._bounds: tuple[Positions, Positions] | None = None
        self._runs: list[Keys] = []  # sorted keys, oldest positions first

    @property
    def tokens(self) -> int:
        """Tokens stored in live requests."""
        return self._end - self._live

    @property
    def requests(self) -> int:
        return len(self._starts)

    def add(self, tokens: Sequence[int]) -> None:
        """Remember a finished request, evicting the oldest whole requests to make room.

        An empty request is ignored; one longer than max_tokens keeps its last max_tokens.
        """
        request = np.asarray(tokens, dtype=np.int32)[-self.max_tokens :]
        if request.size == 0:
            return
        self._evict(self.max_tokens - request.size)
        if 4 * self._live >= self.max_tokens:
            self._compact()
        start = self._append(request)
        self._starts.append(start)
        self._ends.append(start + request.size)
        self._bounds = None
        keys = self._keys(request, start)
        if keys.size:
            self._push(keys)

    def lookup(
        self, context: Sequence[int], limit: int, min_confidence: float = 0.1
    ) -> Match | None:
        """Greedy most-frequent continuation of the longest suffix of `context` seen before.

        Candidates are the stored positions preceded by the longest suffix of `context`
        (between min_match and max_match tokens, within one request) that occurs at all.
        Each step drafts the token most of the remaining candidates continue with (ties
        go to the most recent), drops those that disagree, and stops at `limit`, when no
        candidate has a next token in its own request, or when fewer than `min_confidence`
        of the original candidates agree with the whole draft.
        """
        if limit <= 0 or not self._starts:
            return None
        tail = [int(token) for token in context[-self.max_match :]]
        if len(tail) < self.min_match:
            return None
        found = self._longest(tail)
        if found is None:
            return None
        positions, ends, length = found
        return self._walk(positions, ends, length, limit, min_confidence)

    # Storing.

    def _evict(self, budget: int) -> None:
        """Drop the oldest requests until at most `budget` tokens are live."""
        while self._starts and self._end - self._live > budget:
            self._starts.popleft()
            self._ends.popleft()
            self._live = self._starts[0] if self._starts else self._end
            self._bounds = None

    def _compact(self) -> None:
        """Free the evicted requests: filter the runs, shift the buffer, rebase positions."""
        shift = self._live
        size = self._end - shift
        buffer = np.zeros(max(1024, 2 * size), dtype=np.int32)
        buffer[:size] = self._buffer[shift : self._end]
        self._buffer = buffer
        runs = []
        for run in self._runs:
            kept = run[(run & np.uint64(_MASK32)) >= np.uint64(shift)]
            if kept.size:
                kept -= np.uint64(shift)  # live positions are >= shift: no borrow
                runs.append(kept)
        self._runs = runs
        self._starts = deque(start - shift for start in self._starts)
        self._ends = deque(end - shift for end in self._ends)
        self._end, self._live, self._bounds = size, 0, None

    def _append(self, request: npt.NDArray[np.int32]) -> int:
        start, end = self._end, self._end + request.size
        if end > self._buffer.size:
            buffer = np.zeros(max(2 * self._buffer.size, end), dtype=np.int32)
            buffer[:start] = self._buffer[:start]
            self._buffer = buffer
        self._buffer[start:end] = request
        self._end = end
        return start

    def _keys(self, request: npt.NDArray[np.int32], start: int) -> Keys:
        """One key per level per position that has a token after it in this request."""
        size = request.size
        values = request.astype(np.uint64) + np.uint64(1)
        window = np.zeros(size + 1, dtype=np.uint64)  # window[e]: hash of the k tokens before e
        parts = []
        summed = 0  # window holds the hashes of the `summed` tokens before each position
        for level, k in enumerate(self.levels):
            if k >= size:
                break
            for j in range(summed, k):
                window[j + 1 :] += values[: size - j] * np.uint64(self._powers[j])
            summed = k
            ends = np.arange(start + k, start + size, dtype=np.uint64)
            hashes = (window[k:size] * np.uint64(_MIX)) >> np.uint64(_HASH_SHIFT)
            prefix = np.uint64(level << _LEVEL_SHIFT)
            parts.append(prefix | (hashes << np.uint64(32)) | ends)
        if not parts:
            return np.zeros(0, dtype=np.uint64)
        keys = np.concatenate(parts)
        keys.sort()
        return keys

    def _push(self, keys: Keys) -> None:
        """Add a run; merge the newest runs while the older one is not much bigger."""
        runs = self._runs
        runs.append(keys)
        while len(runs) > 1 and runs[-2].size <= _MERGE_FACTOR * runs[-1].size:
            newer = runs.pop()
            older = runs.pop()
            merged = np.concatenate((older, newer))
            merged.sort(kind="stable")  # in place; timsort merges the two sorted halves
            runs.append(merged)

    # Looking up.

    def _request_bounds(self) -> tuple[Positions, Positions]:
        if self._bounds is None:
            self._bounds = (
                np.fromiter(self._starts, dtype=np.int64, count=len(self._starts)),
                np.fromiter(self._ends, dtype=np.int64, count=len(self._ends)),
            )
        return self._bounds

    def _suffix_keys(self, tail: list[int]) -> list[int]:
        """The key prefix of each level's suffix of `tail` (as many levels as fit)."""
        size = len(tail)
        prefixes = []
        window = 0
        k = 0
        for level, length in enumerate(self.levels):
            if length > size:
                break
            while k < length:
                window = (window + (tail[size - 1 - k] + 1) * self._powers[k]) & _MASK64
                k += 1
            hashed = ((window * _MIX) & _MASK64) >> _HASH_SHIFT
            prefixes.append((level << _LEVEL_SHIFT) | (hashed << 32))
        return prefixes

    def _longest(self, tail: list[int]) -> tuple[Positions, Positions, int] | None:
        """Positions preceded by the longest matching suffix, their request ends, its length."""
        prefixes = self._suffix_keys(tail)
        if not prefixes:
            return None
        bounds = []
        for prefix in prefixes:
            bounds += [prefix | self._live, prefix + (1 << 32)]
        queries = np.array(bounds, dtype=np.uint64)
        ranges = [np.searchsorted(run, queries) for run in self._runs]
        hits = sum((r[1::2] - r[0::2] for r in ranges), np.zeros(len(prefixes), np.int64))
        for level in range(len(prefixes) - 1, -1, -1):
            if not hits[level]:
                continue
            raw = [
                run[r[2 * level] : r[2 * level + 1]]
                for run, r in zip(self._runs, ranges, strict=True)
                if r[2 * level + 1] > r[2 * level]
            ]
            keys = np.concatenate(raw)[-self.max_candidates :]
            positions = (keys & np.uint64(_MASK32)).astype(np.int64)
            upto = self.levels[level + 1] - 1 if level + 1 < len(self.levels) else self.max_match
            found = self._verify(positions, tail, self.levels[level], min(upto, len(tail)))
            if found is not None:
                return found
        return None

    def _verify(
        self, positions: Positions, tail: list[int], shortest: int, longest: int
    ) -> tuple[Positions, Positions, int] | None:
        """Keep the positions whose exact match with `tail` is longest (and >= shortest)."""
        starts, ends = self._request_bounds()
        request = np.searchsorted(starts, positions, side="right") - 1
        back = positions[:, None] - np.arange(1, longest + 1)
        want = np.array(tail[::-1][:longest], dtype=np.int64)
        same = (self._buffer[np.maximum(back, 0)] == want) & (back >= starts[request][:, None])
        lengths = np.where(same.all(axis=1), longest, same.argmin(axis=1))
        best = int(lengths.max())
        if best < shortest:
            return None  # hash collisions only
        keep = lengths == best
        return positions[keep], ends[request[keep]], best

    def _walk(
        self, positions: Positions, ends: Positions, length: int, limit: int, threshold: float
    ) -> Match | None:
        """The greedy suffix-tree walk over the candidates (see `lookup`)."""
        total = positions.size
        room = (ends - positions).tolist()
        span = min(limit, max(room))
        columns = np.minimum(positions[:, None] + np.arange(span), self._end - 1)
        rows = self._buffer[columns].tolist()
        alive = list(range(total))  # in order of position, so the last one is the newest
        draft: list[int] = []
        support = 0
        for step in range(span):
            alive = [i for i in alive if room[i] > step]
            if not alive:
                break
            column = [rows[i][step] for i in alive]
            top, best = tally(column)
            if top / total < threshold:
                break
            support = support or top
            draft.append(best)
            if top < len(column):
                alive = [i for i, token in zip(alive, column, strict=True) if token == best]
            if len(alive) == 1:  # a single path: copy it (its agreement no longer changes)
                i = alive[0]
                draft += rows[i][step + 1 : min(span, room[i])]
                break
        if not draft:
            return None
        return Match(tuple(draft), length, support, support / total)
