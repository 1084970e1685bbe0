"""Reading a prompt into the main model's KV cache before a generation's first round:
the part of its KV kept from the previous generation, the rest in passes of n_batch, all
at once (`prefill`) or a pass at a time (`prefill_steps`: whoever drives it may run other
work between two passes, as the lead runs its other requests' rounds)."""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from duo.core.sampling import Logits
from duo.errors import PromptTooLong, UsageError


class PromptModel(Protocol):
    """What reading a prompt needs of the main model (duo.core.rounds.MainModel has it)."""

    n_ctx: int

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> Logits: ...

    def reuse_prefix(self, tokens: Sequence[int]) -> int: ...


@dataclass(frozen=True, slots=True)
class Prefill:
    """The prompt evaluation before the first round."""

    prompt_tokens: int
    reused: int  # prompt tokens whose KV was kept from the previous generation
    seconds: float


def prefill(main: PromptModel, prompt: Sequence[int]) -> Prefill:
    """Fill the main KV with all prompt tokens but the last (the first round feeds it), in
    one call of the model's decode (which makes passes of n_batch itself)."""
    filled: Prefill = to_the_end(prefill_steps(main, prompt, piece=max(1, len(prompt))))
    return filled


PIECE = 512  # prompt tokens a step of prefill_steps reads, if the model has no n_batch
Steps = Generator[None, None, Any]  # work done a step at a time; its return value, its result


def to_the_end(steps: Steps) -> Any:
    """Run stepwise work through all its steps at once: its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def prefill_steps(
    main: PromptModel, prompt: Sequence[int], piece: int | None = None
) -> Generator[None, None, Prefill]:
    """`prefill`, a pass of at most `piece` tokens per step (default: the model's n_batch,
    -b): whoever drives it may run other work between two pieces (the lead's other
    requests' rounds)."""
    size: int = piece if piece is not None else getattr(main, "n_batch", PIECE)
    t0 = time.perf_counter()
    reused, missing = reuse(main, prompt)
    for start in range(0, len(missing), size):
        main.decode(missing[start : start + size], all_logits=False)
        if start + size < len(missing):
            yield
    return Prefill(len(prompt), reused, time.perf_counter() - t0)


def reuse(main: PromptModel, prompt: Sequence[int]) -> tuple[int, Sequence[int]]:
    """Keep the main KV's prefix shared with the prompt: (tokens kept, the prompt tokens
    the KV still needs: all but the last, which the first round feeds)."""
    check_prompt(main, prompt)
    reused = main.reuse_prefix(prompt[:-1])
    return reused, prompt[reused:-1]


def check_prompt(main: PromptModel, prompt: Sequence[int]) -> None:
    """A prompt the context holds, with room for one token: else UsageError/PromptTooLong."""
    if not prompt:
        raise UsageError("the prompt is empty")
    if len(prompt) >= main.n_ctx:
        raise PromptTooLong(
            f"the prompt has {len(prompt)} tokens; the context holds {main.n_ctx} "
            "(raise it with -c, or shorten the prompt)"
        )
