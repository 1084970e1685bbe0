"""Samplers: pick the main model's next token from its logits.

A sampler is called once per emitted token, in order, with its own random stream, so a
seeded sampler gives the same text with or without speculation (duo.core.verify draws exactly
one sample per emitted token). The chain follows llama.cpp's order:
logit bias -> penalties (repeat, frequency, presence) -> top-k -> top-p -> min-p ->
temperature -> draw. A grammar (a `Constraint`) is checked as llama.cpp's common sampler
does: the chain's token stands if the grammar allows it; otherwise the grammar masks the
logits and the chain picks again from what is left. Only the masked pick costs a pass over
the whole vocabulary. A draft token the grammar forbids is never sampled, so it simply
fails verification.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from duo.core.chain import InfillVocab, penalised, run_chain
from duo.core.logprobs import TokenLogprob, token_logprob
from duo.errors import GenerationFailed, UsageError

Logits = npt.NDArray[np.float32]  # one row of logits per evaluated position


class Sampler(Protocol):
    def sample(self, logits: Logits, history: Sequence[int]) -> int:
        """The next token given the logits after `history` (prompt + emitted so far)."""
        ...


class Constraint(Protocol):
    """A grammar the emitted tokens follow (duo.llama.grammar.Grammar), one per generation."""

    def allows(self, token: int) -> bool:
        """Whether the grammar accepts `token` next."""
        ...

    def mask(self, logits: Logits) -> Logits:
        """A copy of logits with -inf at every token the grammar forbids next."""
        ...

    def accept(self, token: int) -> None:
        """`token` was emitted: advance the grammar past it."""


@dataclass(frozen=True)
class SamplingParams:
    """Sampler settings, with llama.cpp server's defaults and names."""

    temperature: float = 0.8  # 0 = greedy
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1 = off
    min_p: float = 0.05  # 0 = off
    repeat_penalty: float = 1.0  # 1 = off
    repeat_last_n: int = 64  # tokens of history the penalties look at
    frequency_penalty: float = 0.0  # subtracted once per occurrence in that window
    presence_penalty: float = 0.0  # subtracted once if the token occurs in that window
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token, added to its logit)
    seed: int | None = None  # None = a random seed
    logprobs: int | None = None  # record log-probabilities with this many alternatives
    grammar: str | None = None  # GBNF the output must follow (llama.cpp's grammar format)
    # The samplers in a request's own order (duo.core.chain); None: the order above.
    samplers: tuple[str, ...] | None = None

    def check(self) -> SamplingParams:
        if self.temperature < 0:
            raise UsageError("temperature must be >= 0")
        if self.top_k < 0:
            raise UsageError("top_k must be >= 0")
        if not 0 < self.top_p <= 1:
            raise UsageError("top_p must be in (0, 1]")
        if not 0 <= self.min_p <= 1:
            raise UsageError("min_p must be in [0, 1]")
        if self.repeat_penalty <= 0:
            raise UsageError("repeat_penalty must be > 0")
        if self.repeat_last_n < 0:
            raise UsageError("repeat_last_n must be >= 0")
        if self.logprobs is not None and self.logprobs < 0:
            raise UsageError("logprobs must be >= 0")
        return self

    def to_request(self) -> dict[str, float | int]:
        """The settings as a request body's fields, under the names llama-server's and
        duo's APIs both read (seed -1: random): what every benchmark client sends, so
        that servers compared are given the same settings."""
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "repeat_penalty": self.repeat_penalty,
            "repeat_last_n": self.repeat_last_n,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
            "seed": -1 if self.seed is None else self.seed,
        }

    @property
    def greedy(self) -> bool:
        """Temperature 0 in the default chain (a chain of its own runs as named)."""
        return self.temperature == 0 and self.samplers is None

    def sampler(
        self,
        constraint: Constraint | None = None,
        record: list[TokenLogprob] | None = None,
        vocab: InfillVocab | None = None,
    ) -> Sampler:
        """A fresh sampler. With `record` (and `logprobs` set), each sampled token's entry
        is appended to it, in sampling order; `constraint` is this generation's grammar;
        `vocab`, what a chain's infill sampler reads."""
        if self.greedy:
            return Greedy(self, constraint, record)
        return Dist(self, constraint, record, vocab)


GREEDY = SamplingParams(temperature=0.0)


def adjusted(logits: Logits, history: Sequence[int], p: SamplingParams) -> Logits:
    """The logits after logit bias and penalties, as llama.cpp's chain applies them (in
    float32): bias added; then, for each token in the last repeat_last_n of history,
    divided (if > 0) or multiplied by repeat_penalty, minus count * frequency_penalty,
    minus presence_penalty. Returns `logits` itself when nothing applies."""
    penalties = p.repeat_penalty != 1.0 or p.frequency_penalty != 0 or p.presence_penalty != 0
    # A chain of the request's own applies its penalties in their place (duo.core.chain).
    penalise = penalties and p.repeat_last_n > 0 and len(history) > 0 and p.samplers is None
    if not p.logit_bias and not penalise:
        return logits
    n_vocab = logits.shape[0]
    out = np.array(logits, dtype=np.float32)
    for token, bias in p.logit_bias:
        if 0 <= token < n_vocab:
            out[token] += np.float32(bias)
    if penalise:
        recent = np.asarray(history[-p.repeat_last_n :], dtype=np.int64)
        ids, counts = np.unique(recent[(recent >= 0) & (recent < n_vocab)], return_counts=True)
        out[ids] = penalised(out[ids], counts, p)
    return out


class _Chain:
    """What both samplers share: the adjusted logits, the grammar, the recorded entries."""

    def __init__(
        self,
        params: SamplingParams,
        constraint: Constraint | None,
        record: list[TokenLogprob] | None,
    ) -> None:
        self.params = params
        self.constraint = constraint
        self.record = record if params.logprobs is not None else None

    def _masked(self, x: Logits) -> Logits:
        assert self.constraint is not None
        masked = self.constraint.mask(x)
        if not np.isfinite(masked).any():
            raise GenerationFailed("the grammar allows no token at this point")
        return masked

    def _emit(self, logits: Logits, token: int) -> int:
        if self.constraint is not None:
            self.constraint.accept(token)
        if self.record is not None:
            self.record.append(token_logprob(logits, token, self.params.logprobs or 0))
        return token


class Greedy(_Chain):
    """Temperature 0: the most likely token (lowest ID on ties, like llama.cpp)."""

    def __init__(
        self,
        params: SamplingParams = GREEDY,
        constraint: Constraint | None = None,
        record: list[TokenLogprob] | None = None,
    ) -> None:
        super().__init__(params, constraint, record)

    def sample(self, logits: Logits, history: Sequence[int]) -> int:
        x = adjusted(logits, history, self.params)
        token = int(x.argmax())  # the method: a few microseconds less than np.argmax
        if self.constraint is not None and not self.constraint.allows(token):
            token = int(np.argmax(self._masked(x)))  # the best token the grammar allows
        return self._emit(logits, token)


class Dist(_Chain):
    """Sampling from the filtered, tempered distribution with a seeded random stream."""

    def __init__(
        self,
        params: SamplingParams,
        constraint: Constraint | None = None,
        record: list[TokenLogprob] | None = None,
        vocab: InfillVocab | None = None,
    ) -> None:
        super().__init__(params, constraint, record)
        self.rng = np.random.default_rng(params.seed)
        self.vocab = vocab

    def filtered(
        self, adjusted_logits: Logits, history: Sequence[int] = ()
    ) -> tuple[np.ndarray, np.ndarray]:
        """top-k, top-p, min-p and temperature over logits already biased and penalised;
        or the request's own chain (duo.core.chain) over logits biased."""
        p = self.params
        if p.samplers is not None:
            ids, z = run_chain(adjusted_logits, history, p, self.vocab)
            probs = np.exp(z - z.max())
            return ids, probs / probs.sum()
        x = adjusted_logits.astype(np.float64)
        k = p.top_k if 0 < p.top_k < x.shape[0] else x.shape[0]
        ids = np.argpartition(-x, k - 1)[:k] if k < x.shape[0] else np.arange(x.shape[0])
        ids = ids[np.lexsort((ids, -x[ids]))]  # descending logit, then ascending ID
        ids = ids[np.isfinite(x[ids])]  # tokens a bias or a grammar ruled out
        z = x[ids]
        probs = np.exp(z - z[0])
        probs /= probs.sum()
        keep = len(ids)
        if p.top_p < 1.0:
            keep = min(keep, int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1)
        if p.min_p > 0.0:
            keep = min(keep, max(1, int(np.count_nonzero(probs >= p.min_p * probs[0]))))
        ids, z = ids[:keep], z[:keep]
        tempered = np.exp((z - z[0]) / p.temperature)
        return ids, tempered / tempered.sum()

    def sample(self, logits: Logits, history: Sequence[int]) -> int:
        x = adjusted(logits, history, self.params)
        ids, probs = self.filtered(x, history)
        # Slices are laid out by token ID, not by probability: where batched and single-token
        # logits differ in the last digits, near-equal logits cannot swap places and move
        # every boundary after them (with --deterministic the logits are identical anyway).
        u = self.rng.random()  # exactly one draw per token
        token, within = self.pick_within(ids, probs, u)
        if self.constraint is not None and not self.constraint.allows(token):
            # Pick again among the tokens the grammar allows, with the same draw: where it
            # fell inside the rejected token's slice is itself uniform in [0, 1). Without
            # truncation (top-k/p, min-p) the two picks together sample the distribution
            # renormalised over the allowed tokens exactly.
            ids, probs = self.filtered(self._masked(x), history)
            token, _ = self.pick_within(ids, probs, within)
        return self._emit(logits, token)

    @staticmethod
    def pick(ids: np.ndarray, probs: np.ndarray, u: float) -> int:
        """The token whose slice of [0, 1) holds u, slices laid out by token ID."""
        return Dist.pick_within(ids, probs, u)[0]

    @staticmethod
    def pick_within(ids: np.ndarray, probs: np.ndarray, u: float) -> tuple[int, float]:
        """pick, and where u fell inside the token's slice (scaled to [0, 1))."""
        order = np.argsort(ids, kind="stable")
        ids, probs = ids[order], probs[order]
        ends = np.cumsum(probs)
        index = min(int(np.searchsorted(ends, u, side="right")), len(ids) - 1)
        start = float(ends[index - 1]) if index else 0.0
        width = float(ends[index]) - start
        within = min(max((u - start) / width, 0.0), np.nextafter(1.0, 0.0)) if width > 0 else 0.0
        return int(ids[index]), float(within)
