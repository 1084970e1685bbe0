"""Copy following: where in its own context the output is copying from, kept across rounds.

An n-gram lookup finds a draft afresh every round from the last few tokens, and takes the
most recent earlier occurrence of them. When the output copies a long passage (a file
being edited, a list being repeated), that short key is often ambiguous: in a file with
three `check_*` functions, "    if not" occurs three times, and the most recent one is the
wrong one two times in three. The copy itself knows better: if the last tokens were copied
from position p, the next one is most likely the one at p + 1, however common the key.

So a `CopyPointer` follows the output through the context once a lookup has found where
it copies from:
- a committed token equal to the one at the pointer moves it on (the run grows);
- an edit costs it little: a token that differs is taken for a substitution (the pointer
  moves on past the replaced token, as `load_` became `read_`), unless it occurs a few
  tokens further on, which is a deletion (the pointer jumps past it); after MAX_MISSES
  differing tokens in a row the output has left the copy, and the pointer is dropped
  until a lookup finds a new one.

An edit the output made once it often makes again: a rename, `ValueError` for `TypeError`
throughout a file. So a substitution that the copy confirms (the token after it copied
again) is remembered for the request, and the pointer's proposal makes it wherever the
copy meets the replaced token again; a copied token that a remembered edit would have
replaced drops that edit. (A substitution of one token for one token: longer rewrites
are not learnt.)

Its proposal (the tokens from the pointer on) is graded by how it stands: in a run longer
than any n-gram key, in a shorter run, right after an edit, or making a remembered edit,
so the lead learns apart how far to trust each.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_MISSES = 3  # differing tokens in a row after which the output has left the copy
SKIP = 4  # how far ahead a differing token is looked for (the output left tokens out)
# grades: a run past the longest n-gram, shorter, after an edit, making a remembered edit
LONG, SHORT, EDITED, REDONE = 50, 51, 52, 53


class CopyPointer:
    def __init__(self, long_run: int) -> None:
        self.long_run = long_run  # a run this long is longer than any n-gram key
        self.reset()

    def reset(self) -> None:
        """A new request: no copy, no edits."""
        self.drop()
        self.edits: dict[int, int] = {}  # a replaced token -> the output's token for it
        self.replaced: tuple[int, int] | None = None  # the last substitution, unconfirmed

    def drop(self) -> None:
        """The output left the copy."""
        self.src: int | None = None  # where the next token is expected to come from
        self.run = 0  # tokens copied in a row up to the pointer
        self.misses = 0  # differing tokens in a row

    def follow(self, start: int, matched: int) -> None:
        """A lookup found that the last `matched` tokens occurred before `start`: copy
        from there (unless the pointer already follows a copy)."""
        if self.src is None:
            self.src, self.run, self.misses = start, matched, 0

    def extend(self, seq: Sequence[int], first: int) -> None:
        """`seq[first:]` were just committed: move the pointer over them."""
        if self.src is None:  # no copy to follow (most rounds of most text)
            return
        for end in range(first, len(seq)):
            src = self.src
            if src is None or src >= end:  # nothing earlier left to copy
                self.drop()
                return
            token, copied = seq[end], seq[src]
            if token == copied or token == self.edits.get(copied):
                if token == copied:
                    self.edits.pop(copied, None)  # copied as it was: not an edit everywhere
                if self.misses == 1 and self.replaced is not None:  # a confirmed substitution
                    self.edits[self.replaced[0]] = self.replaced[1]
                self.src, self.run, self.misses = src + 1, self.run + 1, 0
                continue
            ahead = seq[src + 1 : min(src + 1 + SKIP, end)]
            if token in ahead:  # tokens left out, then the copy goes on
                self.src, self.run, self.misses = src + 2 + ahead.index(token), 1, 0
                continue
            self.misses += 1
            self.replaced = (copied, token)
            if self.misses > MAX_MISSES:
                self.drop()
            else:  # taken for a substitution of the token at the pointer
                self.src, self.run = src + 1, 0

    def propose(self, seq: Sequence[int], limit: int) -> tuple[tuple[int, ...], int] | None:
        """The tokens from the pointer on (at most `limit`) and their grade, if any."""
        src = self.src
        if src is None or limit <= 0 or src >= len(seq):
            return None
        tokens = tuple(seq[src : src + limit])
        grade = LONG if self.run > self.long_run else SHORT if self.run else EDITED
        if self.edits:
            edited = tuple(self.edits.get(t, t) for t in tokens)
            if edited != tokens:
                return edited, REDONE
        return tokens, grade
