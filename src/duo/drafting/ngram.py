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

The index is built incrementally: each committed token counts the n_max - n_min + 2
n-grams it completes in one dict (keys sliced from a tuple of the last tokens) and marks
the ones it continues, and a lookup reads the trailing n-grams' entries it kept, with one
dict probe for the support (a few microseconds each).
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

    One dict keyed by n-gram tuples (n_min <= n <= n_max + 1), `grams[g] = [count, last]`:
    - `count`: occurrences of g within the known tokens;
    - `last`: for len(g) <= n_max, the end (exclusive) of the most recent occurrence of g
      that is followed by a known token, i.e. where its continuation starts (-1: none).

    For the trailing n-gram g, `last` is therefore its most recent *earlier* occurrence
    (the trailing one has no follower yet), `count - 1` its earlier occurrences, and the
    count of `g + (x,)` how many of those were followed by x. The trailing n-grams' entries
    are kept at hand: the next token sets their `last` without a lookup, and a lookup
    reads them directly.
    """

    def __init__(self, n_min: int = 2, n_max: int = 5) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_min = n_min
        self.n_max = n_max
        self.reset()
        self.found = 0  # where the last lookup's proposal starts in `tokens`

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[int]:
        """The known tokens (read only)."""
        return self._tokens

    def reset(self, tokens: Iterable[int] = ()) -> None:
        """Forget everything and index `tokens` (a new request's prompt)."""
        self._tokens: list[int] = []
        self._tail: tuple[int, ...] = ()  # the last n_max + 1 tokens
        self._grams: dict[tuple[int, ...], list[int]] = {}
        self._trailing: list[list[int]] = []  # the trailing n-grams' entries, shortest first
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append committed tokens, indexing the n-grams each one completes or continues."""
        seq, grams, tail, trailing = self._tokens, self._grams, self._tail, self._trailing
        n_min, n_max = self.n_min, self.n_max
        for token in tokens:
            end = len(seq)  # where `token` goes: it follows the n-grams ending here
            for followed in trailing:
                followed[1] = end
            seq.append(token := int(token))
            tail = (*tail[-n_max:], token)
            trailing = []
            for n in range(n_min, min(n_max + 1, end + 1) + 1):
                gram = tail[-n:]
                entry = grams.get(gram)
                if entry is None:
                    entry = grams[gram] = [0, -1]
                entry[0] += 1
                if n <= n_max:
                    trailing.append(entry)
        self._tail, self._trailing = tail, trailing

    def lookup(self, limit: int) -> Match | None:
        """What followed the most recent earlier occurrence of the longest trailing n-gram."""
        if limit <= 0:
            return None
        seq = self._tokens
        for i in range(len(self._trailing) - 1, -1, -1):
            count, start = self._trailing[i]
            if start < 0:
                continue
            n = self.n_min + i
            self.found = start
            proposal = tuple(seq[start : start + limit])
            support = self._grams[(*self._tail[-n:], proposal[0])][0]
            return Match(proposal, n, support, support / (count - 1))
        return None
