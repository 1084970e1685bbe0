"""The lead's decoding loop: one verification round at a time, never waiting for drafts.

Per round (a Generation's plan, then settle): take the proposals ready that continue the
committed tokens (possibly none), let the policy choose which one and how much of it to
verify, evaluate [last committed] + draft in one batch with logits for every position,
sample-and-compare (duo.core.verify), commit the accepted tokens plus the correction or bonus,
roll the main KV back past what was rejected, and tell the draft sources what was
committed. `generate` runs one generation alone; `step` runs one round of several, each
on its own sequence of the main model, in a single pass (the lead's parallel slots). The
loop is synchronous and does no I/O: the CLI, the in-process async mode and the lead
service all drive it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from duo.core.choice import Chooser, Longest
from duo.core.draft import Proposal
from duo.core.policy import ALONE, Base
from duo.core.prompt import Prefill, check_prompt, prefill, reuse
from duo.core.sampling import Greedy, Logits, Sampler
from duo.core.verify import verify
from duo.errors import UsageError

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
        catch up when they are no longer in it. Told before a generation's first proposal
        and whenever the set changes."""

    def received(self) -> Mapping[str, int]:
        """Draft tokens that reached the lead for this generation so far, by source name:
        a drafter's work, whether or not any of it was ever usable (sources that compute
        their proposals on demand, the lookups, report none)."""
        ...


class DraftPool(Protocol):
    """A drafter that serves several generations at once (a model drafter, the backs)."""

    def source(self, slot: int) -> DraftSource:
        """The DraftSource of one generation, running in `slot` of the main model."""
        ...


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

    def received(self) -> Mapping[str, int]:
        return {}


# What the round before a round did: verified a draft and accepted all of it, rejected
# some of it, or verified none (the first round too). A drafter running ahead has its next
# guesses ready after an acceptance; after a rejection it must first hear the correction.
After = Literal["acceptance", "rejection", "no draft"]
AFTER: tuple[After, ...] = ("acceptance", "rejection", "no draft")


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
    after: After = "no draft"  # what the generation's previous round did
    # a usable draft was offered when this round was planned (None: no room for one, the
    # generation's last token)
    ready: bool | None = None


def run(
    main: MainModel, g: Generation, on_prefill: Callable[[Prefill], None] | None = None
) -> Iterator[Round]:
    """A generation alone on `main`, round by round, to its end. The draft source hears
    of the prompt first, so a concurrent drafter evaluates it at the same time as the main
    model.

    llama.cpp evaluates one token with other kernels than a batch (logits differ in the
    last digits), so a round that verifies a draft may round differently from one that
    does not. A deterministic main model pads every pass to a batch (duo.llama.ubatch):
    all modes then compute bit-identical logits, and a seeded sampler gives bit-identical
    text in every mode."""
    try:
        filled = g.start()
        if on_prefill:
            on_prefill(filled)
        while not g.finish:
            batch = g.plan()
            t0 = time.perf_counter()
            logits = main.decode(batch)
            yield g.settle(logits, time.perf_counter() - t0, len(batch))
    finally:
        g.end()


class BatchModel(Protocol):
    """A main model with several sequences, evaluated together (duo.llama.backend.Model)."""

    n_batch: int  # most tokens one pass holds

    def decode_batch(
        self,
        parts: Sequence[tuple[int, Sequence[int]]],
        prefill: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> list[Logits]: ...


def step(
    main: BatchModel,
    gens: Sequence[tuple[int, Generation]],
    prefill: Sequence[tuple[int, Sequence[int]]] = (),
) -> list[Round | Exception]:
    """One round of several generations, each on its own sequence `seq` of `main`, in one
    pass: [(seq, generation), ...] -> each one's Round, in order, or the exception that
    ended it (one generation's failure leaves the others' rounds alone; a failed pass
    raises). Pieces of prompts (`prefill`: [(seq, tokens), ...]) ride along in the same
    pass; a generation whose prompt ends with such a piece runs its first round in the
    pass that reads it (the piece goes before its batch), as llama-server samples a
    request's first token from the pass that reads the end of its prompt.

    Each generation's policy chooses its draft knowing what the batch already holds: the
    prompt pieces, the tokens and expected yield of the generations before it, and one
    token (yielding one) for each after it. A draft worth verifying alone can be worth less
    in a large batch, and none is longer than the pass has room for (n_batch).
    """
    results: list[Round | Exception | None] = [None] * len(gens)
    parts: list[tuple[int, Sequence[int]]] = []
    planned: list[int] = []
    prompt = sum(len(piece) for _, piece in prefill)  # the pass reads them too
    expected, tokens = 0.0, 0
    for i, (seq, g) in enumerate(gens):
        after = len(gens) - 1 - i
        try:
            space = main.n_batch - prompt - tokens - after - 1  # for this one's draft
            batch = g.plan(Base(expected + after, tokens + after, prompt), space)
        except Exception as e:
            results[i] = e
            continue
        parts.append((seq, batch))
        planned.append(i)
        expected += g.expected
        tokens += len(batch)
    if parts or prefill:
        t0 = time.perf_counter()
        logits = main.decode_batch(parts, prefill)
        seconds = time.perf_counter() - t0
        for i, rows in zip(planned, logits, strict=True):
            try:
                results[i] = gens[i][1].settle(rows, seconds, prompt + tokens)
            except Exception as e:
                results[i] = e
    return [r for r in results if r is not None]


class Generation:
    """One sequence's decoding, round by round: `plan` the batch (the last committed token
    and the chosen draft), evaluate it (alone, or with other generations' batches), then
    `settle` its logits: verify, commit, roll the KV back, tell the sources."""

    def __init__(
        self,
        main: MainModel,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        drafts: DraftSource | None = None,
        draft_max: int = 8,
        sampler: Sampler | None = None,
        policy: Chooser | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        if max_tokens <= 0:
            raise UsageError("the number of tokens to generate must be positive")
        self.main = main
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.drafts = drafts or NoDrafts()
        self.draft_max = draft_max
        self.sampler = sampler or Greedy()
        self.policy = policy or Longest()
        self.on_end = on_end  # frees what the generation held (a grammar)
        self.committed = list(prompt)
        self.produced = 0
        self.finish: Finish | None = None
        self.expected = 1.0  # the planned round's expected yield, by the policy's estimates
        self._started = 0.0
        self._offered: list[Proposal] = []
        self._chosen: Proposal | None = None
        self._draft: list[int] = []
        self._after: After = "no draft"
        self._room = 0
        self._resting: frozenset[str] | None = None  # what the sources were last told

    def start(self) -> Prefill:
        """The draft source hears of the prompt, then the main model evaluates it."""
        self._open()
        return prefill(self.main, self.prompt)

    def begin(self) -> tuple[int, Sequence[int]]:
        """Start, leaving the prompt to the caller: the draft source hears of it, and the
        main KV keeps its shared prefix. Returns (tokens kept, the prompt tokens the caller
        must evaluate before the first round, as `step`'s prefill)."""
        self._open()
        return reuse(self.main, self.prompt)

    def _open(self) -> None:
        """The request starts: its prompt is checked, the policy counts its rounds apart,
        and the draft source hears of the prompt."""
        check_prompt(self.main, self.prompt)  # before a drafter begins on it
        self.policy.begin()
        self.drafts.begin(self.prompt)

    def plan(self, base: Base = ALONE, space: int = 1 << 30) -> list[int]:
        """The tokens this round evaluates: the last committed token and the draft (of at
        most `space` tokens: what the pass has room for)."""
        self._started = time.perf_counter()
        committed = self.committed
        # Room for the draft: the bonus token counts against max_tokens too.
        room = min(
            self.draft_max,
            space,
            self.max_tokens - self.produced - 1,
            self.main.n_ctx - len(committed),
        )
        resting = self.policy.resting
        if resting != self._resting:  # the sources hear of a change, once
            self.drafts.rest(resting)
            self._resting = resting
        self._room = room
        self._offered = self.drafts.propose(committed, room) if room > 0 else []
        chosen, n, self.expected = self.policy.choose(self._offered, base)
        self._chosen = chosen if n else None
        self._draft = list(chosen.tokens[:n]) if chosen else []
        return [committed[-1], *self._draft]

    def settle(self, logits: Logits, seconds: float, batch: int) -> Round:
        """Verify the planned draft against `logits` (the rows of this generation's
        batch), which a pass of `batch` tokens computed in `seconds`."""
        committed, draft = self.committed, self._draft
        start = len(committed)
        try:
            verdict = verify(draft, _sampler_at(self.sampler, logits, committed, draft))
        finally:
            del committed[start:]  # the draft tokens the sampler saw as history
        self.main.truncate(start + verdict.accepted)
        self.policy.observe(
            self._chosen,
            len(draft),
            verdict.accepted,
            seconds,
            self._offered,
            verdict.tokens,
            batch,
        )
        tokens, finish = _finish(self.main, verdict.tokens)
        committed.extend(tokens)
        self.produced += len(tokens)
        full = self.produced >= self.max_tokens or len(committed) >= self.main.n_ctx
        self.finish = finish or ("length" if full else None)
        if tokens:
            self.drafts.commit(start, tokens)
        source = self._chosen.source if self._chosen else None
        after = self._after
        if not draft:
            self._after = "no draft"
        else:
            self._after = "acceptance" if verdict.accepted == len(draft) else "rejection"
        return Round(
            tokens,
            len(draft),
            verdict.accepted,
            time.perf_counter() - self._started,
            seconds,
            self.finish,
            source,
            after,
            bool(self._offered) if self._room > 0 else None,
        )

    def received(self) -> Mapping[str, int]:
        """Draft tokens that reached this generation, by source (DraftSource.received)."""
        return self.drafts.received()

    def end(self) -> None:
        """The generation is over (finished, stopped or abandoned): the sources hear."""
        try:
            self.drafts.end()
        finally:
            if self.on_end:
                self.on_end()


def _sampler_at(
    sampler: Sampler, logits: Logits, committed: list[int], draft: list[int]
) -> Callable[[int], int]:
    """Sample position i of a round: the main model's token after committed + draft[:i].

    verify calls it for i = 0, 1, ... while the draft is accepted, so draft[i - 1] is
    appended to `committed` in place (the caller removes the draft tokens afterwards): the
    history costs no copy of the whole context per sample."""

    def sample_at(i: int) -> int:
        if i:
            committed.append(draft[i - 1])
        return sampler.sample(logits[i], committed)

    return sample_at


def _finish(main: MainModel, tokens: tuple[int, ...]) -> tuple[tuple[int, ...], Finish | None]:
    """Cut the emitted tokens at an end-of-generation token (which is not emitted)."""
    for i, token in enumerate(tokens):
        if main.is_eog(token):
            return tokens[:i], "stop"
    return tokens, None
