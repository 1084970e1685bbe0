"""Drafts: proposed continuations of the committed tokens, and how the lead uses them.

A draft is anchored at an absolute position, so a drafter that is a little behind or
ahead of the lead still lines up: the part of it that overlaps the committed tokens must
match them exactly, and only what lies beyond the committed tokens is proposed.

A drafter with fan-out also offers branches: paths that leave its chain of guesses at a
position where it was unsure, with its runner-up token there. A branch is kept as a draft
of its own (the chain's guesses up to its fork, then its tokens), so after the lead
rejects the chain's guess at the fork and samples the runner-up, the branch lines up with
the committed tokens where the chain no longer does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Proposal:
    """A draft source's offer for the next round: tokens that continue the committed ones.

    `source` names where it came from ("model", "ngram", "suffix", "back:NAME"); `grade`
    is the source's own confidence class (an n-gram's match length, say): acceptance is
    learnt per (source, grade), so a long match can be trusted more than a short one.
    """

    source: str
    tokens: tuple[int, ...]
    grade: int = 0
    key: str = field(init=False, repr=False, compare=False)  # "source/grade", or "source"

    def __post_init__(self) -> None:
        key = f"{self.source}/{self.grade}" if self.grade else self.source
        object.__setattr__(self, "key", key)


@dataclass(frozen=True, slots=True)
class Draft:
    """Guessed tokens for positions start, start+1, ... of the sequence."""

    start: int
    tokens: tuple[int, ...]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (slice comparisons run at C speed)."""
    if type(a) is not type(b):  # a list never equals a tuple
        a, b = list(a), list(b)
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def merge(old: Draft | None, start: int, tokens: tuple[int, ...], cap: int = 1024) -> Draft:
    """Guesses from `start` on replace whatever was guessed there before."""
    if old is not None and old.start <= start <= old.start + len(old.tokens):
        return Draft(old.start, (old.tokens[: start - old.start] + tokens)[:cap])
    return Draft(start, tokens[:cap])


def delta(sent: Draft | None, draft: Draft) -> Draft | None:
    """What to send so that a peer holding `sent` holds `draft`: None if nothing new."""
    if sent is not None and sent.start <= draft.start <= sent.start + len(sent.tokens):
        known = sent.tokens[draft.start - sent.start :]
        n = common_prefix(known, draft.tokens)
        if n == len(draft.tokens):
            return None
        return Draft(draft.start + n, draft.tokens[n:])
    return draft if draft.tokens else None


def advance(committed: Sequence[int], draft: Draft | None) -> Draft | None:
    """Re-anchor `draft` right after the committed tokens, or None if it went stale.

    The part of the draft that overlaps the committed tokens must match them exactly
    (else the guesses beyond are continuations of something the lead rejected); a
    draft that starts past the committed tokens leaves a gap and is useless too.
    """
    if draft is None:
        return None
    end = len(committed)
    overlap = end - draft.start
    if overlap < 0 or overlap > len(draft.tokens):
        return None
    if overlap and tuple(committed[draft.start : end]) != draft.tokens[:overlap]:
        return None
    return draft if overlap == 0 else Draft(end, draft.tokens[overlap:])


def graft(chain: Draft | None, fork: int, tokens: tuple[int, ...]) -> Draft | None:
    """The path of a branch that leaves `chain` at position `fork` with `tokens`: None if
    the chain does not reach that far."""
    if chain is None or not chain.start <= fork <= chain.start + len(chain.tokens):
        return None
    return Draft(chain.start, chain.tokens[: fork - chain.start] + tokens)


def first_usable(
    committed: Sequence[int],
    drafts: Sequence[Draft | None],
    limit: int,
    n_vocab: int | None = None,
) -> list[int]:
    """`usable` of the first of `drafts` (a chain, then its branches) that continues the
    committed tokens."""
    for draft in drafts:
        tokens = usable(committed, draft, limit, n_vocab)
        if tokens:
            return tokens
    return []


def usable(
    committed: Sequence[int], draft: Draft | None, limit: int, n_vocab: int | None = None
) -> list[int]:
    """The part of `draft` that continues `committed`: at most `limit` in-vocabulary tokens
    (n_vocab None: the tokens were checked where they came in).

    Returns [] when the draft does not line up with the committed tokens (a stale draft
    from before a correction, a gap, a wrong position); such drafts cost nothing.
    """
    current = advance(committed, draft)
    if current is None or limit <= 0:
        return []
    if n_vocab is None:
        return list(current.tokens[:limit])
    out: list[int] = []
    for token in current.tokens[:limit]:
        if not 0 <= token < n_vocab:
            break
        out.append(token)
    return out
