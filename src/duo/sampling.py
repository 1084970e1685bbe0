"""Samplers: pick the main model's next token from its logits.

A sampler is called once per emitted token, in order, so a seeded sampler gives the
same text with or without speculation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from duo.backend import Logits


class Sampler(Protocol):
    def sample(self, logits: Logits, history: Sequence[int]) -> int:
        """The next token given the logits after `history` (prompt + emitted so far)."""
        ...


class Greedy:
    """Temperature 0: the most likely token (lowest ID on ties, like llama.cpp)."""

    def sample(self, logits: Logits, history: Sequence[int]) -> int:
        return int(np.argmax(logits))
