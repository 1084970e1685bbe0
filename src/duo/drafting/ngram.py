"""Prompt lookup: draft by copying what followed the last few tokens the last time they occurred.

Within one request the output often repeats the prompt or itself (code being edited, a
quoted passage, a list, a reasoning step repeated in the answer). If the last n tokens
occurred earlier, the tokens that followed them then are a free draft. This is llama.cpp's
`ngram-simple` (and `ngram-map-k`) and HF's prompt-lookup decoding: the longest n in
[n_min, n_max] whose n-gram occurred before wins, and its most recent earlier occurrence
supplies the draft.

llama.cpp keys on long n-grams (12 for `ngram-simple`, 24 for `ngram-mod`) because it
drafts 48-64 tokens blindly; here every match also carries how often the n-gram was
followed by the proposed token, so the lead can judge short matches, and the defaults are
short (2 to 5, longest first).

The index is built incrementally: each committed token adds n_max - n_min + 2 n-gram
counts and n_max - n_min + 1 "last seen" entries to two dicts (keys sliced from a tuple of
the last tokens), and a lookup costs at most n_max - n_min + 1 dict probes (both a few
microseconds).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Match:
    """A proposed continuation and how much the structure that found it believes in it."""

    tokens: tuple[int, ...]  # the proposed continuation, never empty
    length: int  # how many trailing context tokens matched (the n of the n-gram / suffix)
    support: int  # how many earlier occurrences back the first proposed token
    confidence: float  # estimated chance in [0, 1] that the first proposed token is right


class NgramIndex:
    """N-gram lookup over one request's own tokens (prompt + committed output).

    Two dicts keyed by n-gram tuples:
    - `count[g]`: occurrences of g (any length n_min..n_max+1) within the known tokens;
    - `last[g]`: for n_min <= len(g) <= n_max, the end (exclusive) of the most recent
      occurrence of g that is followed by a known token, i.e. where its continuation starts.

    For the trailing n-gram g, `last[g]` is therefore its most recent *earlier* occurrence
    (the trailing one has no follower yet), `count[g] - 1` its earlier occurrences, and
    `count[g + (x,)]` how many of those were followed by x.
    """

    def __init__(self, n_min: int = 2, n_max: int = 5) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_min = n_min
        self.n_max = n_max
        self._tokens: list[int] = []
        self._count: dict[tuple[int, ...], int] = {}
        self._last: dict[tuple[int, ...], int] = {}
        self.found = 0  # where the last lookup's proposal starts in `tokens`

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[int]:
        """The known tokens (read only)."""
        return self._tokens

    def reset(self, tokens: Iterable[int] = ()) -> None:
        """Forget everything and index `tokens` (a new request's prompt)."""
        self._tokens = []
        self._tail: tuple[int, ...] = ()  # the last n_max + 1 tokens
        self._count = {}
        self._last = {}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append committed tokens, indexing the n-grams each one completes or continues."""
        seq, count, last, tail = self._tokens, self._count, self._last, self._tail
        n_min, n_max = self.n_min, self.n_max
        for token in tokens:
            end = len(seq)  # where `token` goes: it follows the n-grams ending here
            for n in range(n_min, min(n_max, end) + 1):
                last[tail[-n:]] = end
            seq.append(token := int(token))
            tail = (*tail[-n_max:], token)
            for n in range(n_min, min(n_max + 1, end + 1) + 1):
                gram = tail[-n:]
                count[gram] = count.get(gram, 0) + 1
        self._tail = tail

    def lookup(self, limit: int) -> Match | None:
        """What followed the most recent earlier occurrence of the longest trailing n-gram."""
        seq, tail = self._tokens, self._tail
        if limit <= 0:
            return None
        for n in range(min(self.n_max, len(seq) - 1), self.n_min - 1, -1):
            gram = tail[-n:]
            start = self._last.get(gram)
            if start is None:
                continue
            self.found = start
            proposal = tuple(seq[start : start + limit])
            earlier = self._count[gram] - 1
            support = self._count[(*gram, proposal[0])]
            return Match(proposal, n, support, support / earlier)
        return None
