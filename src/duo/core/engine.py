"""The lead's decoding loop: one verification round at a time, never waiting for drafts.

Per round: take the proposals ready that continue the committed tokens (possibly none),
let the policy choose which one and how much of it to verify, evaluate [last committed]
+ draft in one batch with logits for every position, sample-and-compare (duo.verify),
commit the accepted tokens plus the correction or bonus, roll the main KV back past what
was rejected, and tell the draft sources what was committed. The loop is synchronous and
does no I/O: the CLI, the in-process async mode and the lead service all drive it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from duo.core.choice import Chooser, Longest
from duo.core.draft import Proposal
from duo.core.sampling import Greedy, Logits, Sampler
from duo.core.verify import verify
from duo.errors import PromptTooLong, UsageError

Finish = Literal["stop", "length"]  # an end-of-generation token / the token budget


class MainModel(Protocol):
    """What the loop needs of the main model (duo.llama.backend.Model, or a fake)."""

    n_ctx: int

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> Logits:
        """Append tokens to the KV cache; logits for every position (or the last)."""
        ...

    def truncate(self, n: int) -> None:
        """Forget the KV entries at positions >= n."""

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest KV prefix shared with tokens; return its length."""
        ...

    def is_eog(self, token: int) -> bool: ...


class DraftSource(Protocol):
    """Where drafts come from: nothing, a drafter, the network, lookups; or several."""

    def begin(self, prompt: Sequence[int]) -> None:
        """A new generation starts from these prompt tokens."""

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        """Proposals continuing `committed` (at most `limit` tokens each); maybe none."""
        ...

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        """The lead committed `tokens` at positions start, start+1, ..."""

    def end(self) -> None:
        """The generation is over."""

    def rest(self, resting: frozenset[str]) -> None:
        """Sources whose key is in `resting` stop drafting (but keep hearing commits) and
        catch up when they are no longer in it."""


class NoDrafts:
    """The main model alone: every round decodes one token."""

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        return []

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        pass

    def end(self) -> None:
        pass

    def rest(self, resting: frozenset[str]) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Round:
    """What one verification round did."""

    tokens: tuple[int, ...]  # emitted: the accepted draft prefix, then the main model's own
    drafted: int  # draft tokens tested
    accepted: int  # of which the main model agreed with
    seconds: float  # wall time of the round
    llama_seconds: float  # of which inside llama_decode
    finish: Finish | None = None
    source: str | None = None  # whose draft was verified


@dataclass(frozen=True, slots=True)
class Prefill:
    """The prompt evaluation before the first round."""

    prompt_tokens: int
    reused: int  # prompt tokens whose KV was kept from the previous generation
    seconds: float


def prefill(main: MainModel, prompt: Sequence[int]) -> Prefill:
    """Fill the main KV with all prompt tokens but the last (the first round feeds it)."""
    if not prompt:
        raise UsageError("the prompt is empty")
    if len(prompt) >= main.n_ctx:
        raise PromptTooLong(
            f"the prompt has {len(prompt)} tokens; the context holds {main.n_ctx} "
            "(raise it with -c, or shorten the prompt)"
        )
    t0 = time.perf_counter()
    reused = main.reuse_prefix(prompt[:-1])
    if reused < len(prompt) - 1:
        main.decode(prompt[reused:-1], all_logits=False)
    return Prefill(len(prompt), reused, time.perf_counter() - t0)


def generate(
    main: MainModel,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    drafts: DraftSource | None = None,
    draft_max: int = 8,
    sampler: Sampler | None = None,
    policy: Chooser | None = None,
    on_prefill: Callable[[Prefill], None] | None = None,
    min_batch: int = 1,
) -> Iterator[Round]:
    """Evaluate the prompt, then decode up to `max_tokens` tokens, round by round.

    The draft source hears of the prompt first, so a concurrent drafter evaluates it
    at the same time as the main model.

    llama.cpp evaluates one token with other kernels than a batch (logits differ in the
    last digits), so a round that verifies a draft may round differently from one that
    does not. With min_batch=2 every round is padded to a batch: all modes then compute
    bit-identical logits, and a seeded sampler gives bit-identical text in every mode.
    """
    if max_tokens <= 0:
        raise UsageError("the number of tokens to generate must be positive")
    drafts = drafts or NoDrafts()
    sampler = sampler or Greedy()
    policy = policy or Longest()
    committed = list(prompt)
    produced = 0
    drafts.begin(prompt)
    try:
        filled = prefill(main, prompt)
        if on_prefill:
            on_prefill(filled)
        while produced < max_tokens and len(committed) < main.n_ctx:
            t0 = time.perf_counter()
            # Room for the draft: the bonus token counts against max_tokens too.
            room = min(draft_max, max_tokens - produced - 1, main.n_ctx - len(committed))
            drafts.rest(policy.resting)
            offered = drafts.propose(committed, room) if room > 0 else []
            chosen, n = policy.choose(offered)
            draft = list(chosen.tokens[:n]) if chosen else []
            t1 = time.perf_counter()
            batch = [committed[-1], *draft]
            logits = main.decode(batch + batch[-1:] * (min_batch - len(batch)))
            t2 = time.perf_counter()
            verdict = verify(draft, _sampler_at(sampler, logits, committed, draft))
            main.truncate(len(committed) + verdict.accepted)
            policy.observe(chosen, n, verdict.accepted, t2 - t1, offered, verdict.tokens)
            tokens, finish = _finish(main, verdict.tokens)
            start = len(committed)
            committed.extend(tokens)
            produced += len(tokens)
            if finish is None and (produced >= max_tokens or len(committed) >= main.n_ctx):
                finish = "length"
            if tokens:
                drafts.commit(start, tokens)
            t3 = time.perf_counter()
            source = chosen.source if chosen and n else None
            yield Round(tokens, n, verdict.accepted, t3 - t0, t2 - t1, finish, source)
            if finish:
                return
    finally:
        drafts.end()


def _sampler_at(
    sampler: Sampler, logits: Logits, committed: list[int], draft: list[int]
) -> Callable[[int], int]:
    """Sample position i of a round: the main model's token after committed + draft[:i]."""

    def sample_at(i: int) -> int:
        return sampler.sample(logits[i], [*committed, *draft[:i]])

    return sample_at


def _finish(main: MainModel, tokens: tuple[int, ...]) -> tuple[tuple[int, ...], Finish | None]:
    """Cut the emitted tokens at an end-of-generation token (which is not emitted)."""
    for i, token in enumerate(tokens):
        if main.is_eog(token):
            return tokens[:i], "stop"
    return tokens, None
