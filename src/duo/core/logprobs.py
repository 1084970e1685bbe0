"""Log-probabilities of the emitted tokens, and which of them the emitted text holds.

A token's log-probability is read from the main model's own logits at its position (the
log-softmax over the whole vocabulary, before logit bias, penalties, grammar, top-k/p and
temperature), as llama-server reports it by default and OpenAI describes it: the model's
distribution. The verification round holds those logits already, so a speculative run
reports the same values as the main model alone, with no extra pass, and a draft model's
probabilities never enter.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_TOP_LOGPROBS = 20  # alternatives per token, as OpenAI's top_logprobs allows


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One emitted token: its log-probability and the most likely alternatives."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token, logprob), most likely first


def token_logprob(logits: npt.NDArray[np.float32], token: int, top: int) -> TokenLogprob:
    """The log-softmax of one row of logits at `token`, and its `top` most likely tokens
    (ties by ascending token ID). The exponentials are taken in float32 and summed in
    float64: a few hundred microseconds for a 49k vocabulary, where float64 throughout
    costs ten times that (about as much as the main model's pass over a small model)."""
    x = np.asarray(logits, dtype=np.float32)
    m = float(x.max())
    log_z = m + float(np.log(np.exp(x - np.float32(m)).sum(dtype=np.float64)))
    alternatives: tuple[tuple[int, float], ...] = ()
    if top > 0:
        n = x.shape[0]
        ids = np.argpartition(x, n - top)[n - top :] if top < n else np.arange(n)
        ids = ids[np.lexsort((ids, -x[ids]))]
        alternatives = tuple((int(i), float(x[i]) - log_z) for i in ids)
    return TokenLogprob(int(token), float(x[token]) - log_z, alternatives)


class LogprobQueue:
    """Hands each token's entry out with the text that shows it.

    Text lags tokens: an incomplete UTF-8 character and what might begin a stop string
    are held back. An entry goes out once every byte of its token has been emitted; at the
    end, the held-back tokens go out whole, or, after a stop string, those whose text
    began before the cut (the stop string's own tokens are not reported).
    """

    def __init__(self, piece: Callable[[int], bytes]) -> None:
        self.piece = piece
        self._pending: deque[tuple[TokenLogprob, int, int]] = deque()  # entry, start, end
        self._end = 0  # bytes spelled by the tokens added so far
        self._emitted = 0  # bytes of text emitted so far

    def add(self, entries: Iterable[TokenLogprob]) -> None:
        for e in entries:
            start = self._end
            self._end += len(self.piece(e.token))
            self._pending.append((e, start, self._end))

    def emitted(self, text: str) -> tuple[TokenLogprob, ...]:
        """`text` was emitted: the entries whose tokens it completes."""
        self._emitted += _utf8_len(text)
        out = []
        while self._pending and self._pending[0][2] <= self._emitted:
            out.append(self._pending.popleft()[0])
        return tuple(out)

    def finish(self, text: str, stopped: bool) -> tuple[TokenLogprob, ...]:
        """The generation is over and `text` was its last piece of text."""
        self._emitted += _utf8_len(text)
        out = [e for e, start, _ in self._pending if not stopped or start < self._emitted]
        self._pending.clear()
        return tuple(out)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))
