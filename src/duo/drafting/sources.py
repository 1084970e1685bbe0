"""Model drafters in this process (classic and concurrent), and several sources as one.

A model drafter serves every slot of the lead: `source(slot)` is a generation's
DraftSource, drafting in the draft model's sequence of that slot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from duo.core.draft import Draft, Proposal, delta, first_usable
from duo.core.rounds import DraftSource
from duo.drafting.drafter import DraftWorker, Mirror
from duo.llama.backend import CACHE_BYTES, Model

MODEL = "model"  # the source name of a draft model in this process


class SyncDrafts:
    """Classic speculative decoding: the lead waits while the drafter guesses k tokens (in
    the draft model's sequence of the generation's slot)."""

    def __init__(self, model: Model, slots: int = 1) -> None:
        self.mirrors = [Mirror(model if slots == 1 else model.sequence(s)) for s in range(slots)]

    def source(self, slot: int) -> SyncSlot:
        return SyncSlot(self.mirrors[slot])

    def close(self) -> None:
        pass


class SyncSlot:
    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self.guessed = 0  # each step of the mirror samples one guess

    def begin(self, prompt: Sequence[int]) -> None:
        self.guessed = 0

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        while self.mirror.step(committed, limit):
            self.guessed += 1
        return [Proposal(MODEL, self.mirror.draft(len(committed))[:limit])]

    def received(self) -> Mapping[str, int]:
        return {MODEL: self.guessed}

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        pass

    def rest(self, resting: frozenset[str]) -> None:
        pass  # drafts only when asked

    def end(self) -> None:
        pass


class ThreadDrafts:
    """A drafter on its own thread (and core), drafting for every slot at once (a sequence
    of the draft model each, and `fanout` more for branches): the lead takes whatever
    draft is ready, the chain's or, after a rejection, the branch that took the lead's
    correction."""

    def __init__(
        self,
        model: Model,
        *,
        max_ahead: int,
        fanout: int = 0,
        cores: set[int] | None = None,
        slots: int = 1,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        self.n_vocab = model.n_vocab
        # by slot, replaced whole by the worker: the chain, then its branches
        self.latest: dict[int, tuple[Draft, ...]] = {}
        self.received: dict[int, int] = {}  # new draft tokens published, by slot
        self.worker = DraftWorker(
            model,
            self._publish,
            sequences=slots,
            max_ahead=max_ahead,
            fanout=fanout,
            cores=cores,
            cache_bytes=cache_bytes,
        )
        self.worker.start()

    def _publish(self, slot: int, draft: Draft, branches: tuple[Draft, ...]) -> None:
        known = list(self.latest.get(slot, ()))
        self.latest[slot] = (draft, *branches)
        for d in self.latest[slot]:
            self.received[slot] = self.received.get(slot, 0) + _new_tokens(known, d)
            known.append(d)

    def source(self, slot: int) -> ThreadSlot:
        return ThreadSlot(self, slot)

    def close(self) -> None:
        self.worker.stop()


def _new_tokens(known: list[Draft], draft: Draft) -> int:
    """The tokens of `draft` that none of the drafts known before it had."""
    news = (delta(d, draft) for d in known)
    return min((len(new.tokens) if new else 0 for new in news), default=len(draft.tokens))


class ThreadSlot:
    """One generation's share of a ThreadDrafts. While the worker is held (its cores lent
    to the main model, duo.session.share: on a small CPU, for good), the commits are not
    sent each round; the worker hears what it missed at the first proposal after it is
    released. (Held, it drafts nothing; sending them each round took 17 µs of the 130 the
    lead spent between two passes on the 1.5B pair's chat prompts.)"""

    def __init__(self, drafts: ThreadDrafts, slot: int) -> None:
        self.drafts = drafts
        self.slot = slot
        self.unsent: int | None = None  # the first committed position the worker lacks

    def begin(self, prompt: Sequence[int]) -> None:
        self.drafts.latest.pop(self.slot, None)
        self.drafts.received[self.slot] = 0
        self.unsent = None
        self.drafts.worker.begin(self.slot, prompt)

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        if self.drafts.worker.held:
            return []  # it drafts nothing; what it drafted before the hold falls behind
        if self.unsent is not None:
            self.drafts.worker.commit(self.slot, self.unsent, committed[self.unsent :])
            self.unsent = None
        latest = self.drafts.latest.get(self.slot, ())
        tokens = first_usable(committed, latest, limit, self.drafts.n_vocab)
        return [Proposal(MODEL, tuple(tokens))] if tokens else []

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        if self.unsent is not None:
            self.unsent = min(self.unsent, start)
        elif self.drafts.worker.held:
            self.unsent = start
        else:
            self.drafts.worker.commit(self.slot, start, tokens)

    def end(self) -> None:
        self.unsent = None
        self.drafts.worker.end(self.slot)

    def rest(self, resting: frozenset[str]) -> None:
        self.drafts.worker.rest(self.slot, MODEL in resting)

    def received(self) -> Mapping[str, int]:
        return {MODEL: self.drafts.received.get(self.slot, 0)}


class Sources:
    """Several draft sources at once: every proposal goes to the policy, which picks.
    Each source proposes at most its own cap (`caps`, by default the round's room): a
    model drafter's drafts are --draft long, a lookup's may be longer."""

    def __init__(self, sources: list[DraftSource], caps: list[int] | None = None) -> None:
        self.sources = sources
        self.caps = caps or [1 << 30] * len(sources)

    def begin(self, prompt: Sequence[int]) -> None:
        for s in self.sources:
            s.begin(prompt)

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        return [
            p
            for s, cap in zip(self.sources, self.caps, strict=True)
            for p in s.propose(committed, min(limit, cap))
        ]

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        for s in self.sources:
            s.commit(start, tokens)

    def end(self) -> None:
        for s in self.sources:
            s.end()

    def rest(self, resting: frozenset[str]) -> None:
        for s in self.sources:
            s.rest(resting)

    def received(self) -> Mapping[str, int]:
        return {name: n for s in self.sources for name, n in s.received().items()}
