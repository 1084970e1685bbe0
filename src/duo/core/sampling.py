"""Samplers: pick the main model's next token from its logits.

A sampler is called once per emitted token, in order, with its own random stream, so a
seeded sampler gives the same text with or without speculation (duo.verify draws exactly
one sample per emitted token). The chain follows llama.cpp's default order:
repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from duo.errors import UsageError

Logits = npt.NDArray[np.float32]  # one row of logits per evaluated position


class Sampler(Protocol):
    def sample(self, logits: Logits, history: Sequence[int]) -> int:
        """The next token given the logits after `history` (prompt + emitted so far)."""
        ...


@dataclass(frozen=True)
class SamplingParams:
    """Sampler settings, with llama.cpp server's defaults and names."""

    temperature: float = 0.8  # 0 = greedy
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1 = off
    min_p: float = 0.05  # 0 = off
    repeat_penalty: float = 1.0  # 1 = off
    repeat_last_n: int = 64  # tokens of history the penalty looks at
    seed: int | None = None  # None = a random seed

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
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def sampler(self) -> Sampler:
        return Greedy(self) if self.greedy else Dist(self)


GREEDY = SamplingParams(temperature=0.0)


def _penalised(logits: Logits, history: Sequence[int], p: SamplingParams) -> Logits:
    if p.repeat_penalty == 1.0 or p.repeat_last_n == 0 or not history:
        return logits
    recent = np.unique(np.asarray(history[-p.repeat_last_n :], dtype=np.int64))
    recent = recent[(recent >= 0) & (recent < logits.shape[0])]
    out = np.array(logits, dtype=np.float32)
    values = out[recent]
    out[recent] = np.where(values > 0, values / p.repeat_penalty, values * p.repeat_penalty)
    return out


class Greedy:
    """Temperature 0: the most likely token (lowest ID on ties, like llama.cpp)."""

    def __init__(self, params: SamplingParams = GREEDY) -> None:
        self.params = params

    def sample(self, logits: Logits, history: Sequence[int]) -> int:
        return int(np.argmax(_penalised(logits, history, self.params)))


class Dist:
    """Sampling from the filtered, tempered distribution with a seeded random stream."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def probabilities(
        self, logits: Logits, history: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(candidate token IDs, their probabilities), most likely first."""
        p = self.params
        x = _penalised(logits, history, p).astype(np.float64)
        k = p.top_k if 0 < p.top_k < x.shape[0] else x.shape[0]
        ids = np.argpartition(-x, k - 1)[:k] if k < x.shape[0] else np.arange(x.shape[0])
        ids = ids[np.lexsort((ids, -x[ids]))]  # descending logit, then ascending ID
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
        ids, probs = self.probabilities(logits, history)
        # Slices are laid out by token ID, not by probability: where batched and single-token
        # logits differ in the last digits, near-equal logits cannot swap places and move
        # every boundary after them (with --deterministic the logits are identical anyway).
        return self.pick(ids, probs, self.rng.random())  # exactly one draw per token

    @staticmethod
    def pick(ids: np.ndarray, probs: np.ndarray, u: float) -> int:
        """The token whose slice of [0, 1) holds u, slices laid out by token ID."""
        order = np.argsort(ids, kind="stable")
        ids, probs = ids[order], probs[order]
        index = min(int(np.searchsorted(np.cumsum(probs), u, side="right")), len(ids) - 1)
        return int(ids[index])
