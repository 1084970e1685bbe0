"""Fan-out: branches of a drafter's chain, ready for the outcomes of the round in flight.

When the lead rejects a guess of the chain, it commits its own token there (the
correction), and everything the chain guessed past it is lost: an asynchronous drafter
must hear of the commit, roll back and draft again before the lead has anything to
verify. A branch drafted beforehand removes that wait: at a position where the drafter is
unsure, it takes its runner-up token there and drafts a short continuation of it, in a
sequence of the draft model of its own that shares the chain's KV cells up to the fork.
If the lead's correction is that token, the branch is a ready draft, and the drafter
adopts it as its chain (`Fanout.adopt`) instead of rolling back.

What to draft is chosen by expected gain, from the drafter's own probabilities: a branch
at position f is worth reach(f) * p2(f), the chance that the lead gets to f (each guess
before it accepted, p1 each) and then commits the runner-up; each guess of a branch is
worth that times the p1 of the guesses before it in the branch. Branches take only the
drafter's idle passes, when its chain is `max_ahead` tokens ahead: each such pass takes
the `width` most valuable branch steps in one batch, none worth less than MIN_GAIN.

Measured on a 2-core CPU with the default pair (a 135M drafter only twice as fast as its
main model, and a pass of several tokens costing about as much per token as one): letting
branch steps into the chain's passes whenever they were worth more than its next guess
made a draft ready after 36-42% of the rejections (from 0-4%), but cost 1-8% of the
speed, as the chain fell behind; such a drafter is never idle, so there it drafts no
branches. A drafter several times faster than its main model (a GPU, a smaller model) is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from duo.core.draft import Draft, common_prefix
from duo.core.sampling import Logits
from duo.llama.backend import FORK_CELLS, Model

MIN_GAIN = 0.02  # a branch step less likely to be used than this is not drafted
UNSURE = 0.5  # p1 assumed where the drafter kept no probabilities


def top2(row: Logits) -> tuple[float, int, float]:
    """(p1, runner-up token, p2): the softmax probabilities of a row's two likeliest tokens."""
    two = np.argpartition(row, -2)[-2:]
    first, second = (two[1], two[0]) if row[two[1]] >= row[two[0]] else (two[0], two[1])
    top = row[first]
    total = float(np.exp(row - top).sum())
    return 1.0 / total, int(second), float(np.exp(row[second] - top)) / total


@dataclass(eq=False)
class FanoutBranch:
    """A path that leaves the chain at `fork` with the chain's runner-up token there. Its
    sequence holds the chain's tokens before the fork, then all of its tokens but the last
    (the next to evaluate)."""

    seq: int  # its sequence of the draft model
    fork: int  # the position of its first token
    tokens: list[int]  # from the fork on: the runner-up, then its own guesses
    gain: float  # the chance that the lead uses its next guess
    probs: list[tuple[float, int, float]] = field(default_factory=list)  # of tokens[1:]

    @property
    def depth(self) -> int:
        return len(self.tokens) - 1


class Fanout:
    """The branches of one chain (a generation the drafter drafts for): up to
    len(seqs) at once, each up to `depth` guesses past its runner-up token, in sequences
    `seqs` of the draft model."""

    def __init__(self, model: Model, seqs: list[int], depth: int) -> None:
        self.model = model
        self.free = list(seqs)
        self.branches: list[FanoutBranch] = []
        self.depth = min(depth, FORK_CELLS - 1)
        self.probs: dict[int, tuple[float, int, float]] = {}  # the chain's, by position

    def _tokens(self, b: FanoutBranch) -> list[int]:
        return self.model.sequence(b.seq).tokens

    def observe(self, pos: int, logits: Logits) -> None:
        """The chain guessed its token at `pos` from these logits."""
        self.probs[pos] = top2(logits)

    def drop(self, seq: int) -> None:
        """A sequence is no longer used: its cells go back to the buffer."""
        self.model.sequence(seq).truncate(0)
        self.free.append(seq)

    def reset(self) -> None:
        for b in self.branches:
            self.drop(b.seq)
        self.branches = []
        self.probs.clear()

    # -- following the commits -------------------------------------------------------

    def adopt(self, committed: list[int], chain_seq: int) -> FanoutBranch | None:
        """The branch the committed tokens took past its fork, if any, which becomes the
        chain: the other branches and the chain's sequence (`chain_seq`) are dropped, and
        the branch's probabilities become the chain's."""
        n = len(committed)
        best, agree = None, 0
        for b in self.branches:
            if b.fork < n and self._tokens(b)[: b.fork] == committed[: b.fork]:
                k = common_prefix(committed[b.fork :], b.tokens)
                if k > agree:
                    best, agree = b, k
        if best is None:
            return None
        self.branches.remove(best)
        self.reset()
        self.drop(chain_seq)
        self.probs = {best.fork + 1 + i: p for i, p in enumerate(best.probs)}
        return best

    def prune(self, chain: list[int], committed: list[int]) -> None:
        """Drop the branches the commits passed by, or whose fork left the chain."""
        n = len(committed)
        keep = []
        for b in self.branches:
            tokens = self._tokens(b)
            if n <= b.fork < len(chain) and tokens[: b.fork] == [*committed, *chain[n : b.fork]]:
                keep.append(b)
            else:
                self.drop(b.seq)
        self.branches = keep
        for pos in [pos for pos in self.probs if pos < n]:
            del self.probs[pos]

    # -- drafting --------------------------------------------------------------------

    def steps(
        self, chain: list[int], chain_seq: int, n: int, width: int, extending: bool
    ) -> list[FanoutBranch]:
        """Up to `width` branch steps for this pass, none while the chain is `extending`:
        existing branches' next guesses, or new branches forked off the chain (`chain`:
        the committed n tokens and the guesses past them, all but the last in sequence
        `chain_seq`)."""
        if extending:
            return []
        candidates: list[tuple[float, int, FanoutBranch | None]] = [
            (b.gain, b.fork, b) for b in self.branches if b.depth < self.depth
        ]
        forked = {b.fork for b in self.branches}
        reach = 1.0
        for pos in range(n, len(chain)):
            p1, alt, p2 = self.probs.get(pos, (UNSURE, -1, 0.0))
            if pos not in forked and alt >= 0 and alt != chain[pos]:
                candidates.append((reach * p2, pos, None))
            reach *= p1
        candidates.sort(key=lambda c: -c[0])
        chosen = []
        for gain, pos, b in candidates[:width]:
            if gain < MIN_GAIN:
                break
            if b is None:
                if not self.free:
                    continue
                b = FanoutBranch(self.free.pop(), pos, [self.probs[pos][1]], gain)
                self.model.fork(chain_seq, b.seq, pos)
                self.branches.append(b)
            chosen.append(b)
        return chosen

    def took(self, b: FanoutBranch, logits: Logits) -> None:
        """A branch's last token was evaluated: its next guess, from these logits."""
        probs = top2(logits)
        b.tokens.append(int(np.argmax(logits)))
        b.probs.append(probs)
        b.gain *= probs[0]

    def drafts(self, chain: list[int], n: int) -> tuple[Draft, ...]:
        """Each branch with a guess past its runner-up token, as a draft from position n."""
        return tuple(
            Draft(n, tuple(chain[n : b.fork]) + tuple(b.tokens))
            for b in self.branches
            if b.depth > 0
        )
