"""Model drafters in this process (classic and concurrent), and several sources as one."""

from __future__ import annotations

from collections.abc import Sequence

from duo.core.draft import Draft, Proposal, usable
from duo.core.engine import DraftSource
from duo.drafting.drafter import DraftWorker, Mirror
from duo.llama.backend import Model

MODEL = "model"  # the source name of a draft model in this process


class SyncDrafts:
    """Classic speculative decoding: the lead waits while the drafter guesses k tokens."""

    def __init__(self, model: Model) -> None:
        self.mirror = Mirror(model)

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        self.mirror.follow(committed)
        while self.mirror.ahead(len(committed)) < limit:
            self.mirror.extend()
        return [Proposal(MODEL, self.mirror.draft(len(committed))[:limit])]

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        pass

    def rest(self, resting: frozenset[str]) -> None:
        pass  # drafts only when asked

    def end(self) -> None:
        pass


class ThreadDrafts:
    """A drafter on its own thread (and core): the lead takes whatever draft is ready."""

    def __init__(self, model: Model, *, max_ahead: int, cores: set[int] | None = None) -> None:
        self.n_vocab = model.n_vocab
        self._latest: Draft | None = None  # replaced whole by the worker: no lock needed
        self.worker = DraftWorker(Mirror(model), self._publish, max_ahead=max_ahead, cores=cores)
        self.worker.start()

    def _publish(self, draft: Draft) -> None:
        self._latest = draft

    def begin(self, prompt: Sequence[int]) -> None:
        self._latest = None
        self.worker.begin(prompt)

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        tokens = usable(committed, self._latest, limit, self.n_vocab)
        return [Proposal(MODEL, tuple(tokens))] if tokens else []

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        self.worker.commit(start, tokens)

    def end(self) -> None:
        self.worker.end()

    def rest(self, resting: frozenset[str]) -> None:
        self.worker.rest(MODEL in resting)

    def close(self) -> None:
        self.worker.stop()


class Sources:
    """Several draft sources at once: every proposal goes to the policy, which picks."""

    def __init__(self, sources: list[DraftSource]) -> None:
        self.sources = sources

    def begin(self, prompt: Sequence[int]) -> None:
        for s in self.sources:
            s.begin(prompt)

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        return [p for s in self.sources for p in s.propose(committed, limit)]

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        for s in self.sources:
            s.commit(start, tokens)

    def end(self) -> None:
        for s in self.sources:
            s.end()

    def rest(self, resting: frozenset[str]) -> None:
        for s in self.sources:
            s.rest(resting)


class Shared:
    """A draft source that follows one sequence at a time (a draft model mirrors one
    sequence; a back drafts for one session), shared by generations that run at once: it
    is lent to one of them, and the first to ask once it is free takes it over."""

    def __init__(self, source: DraftSource) -> None:
        self.source = source
        self.holder: Lent | None = None

    def lend(self) -> Lent:
        """A generation's handle on the source: a DraftSource that proposes while held."""
        return Lent(self)


class Lent:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    @property
    def held(self) -> bool:
        return self.shared.holder is self

    def begin(self, prompt: Sequence[int]) -> None:
        if self.shared.holder is None:
            self.shared.holder = self
            self.shared.source.begin(prompt)

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        if self.shared.holder is None:  # free again: take it over, from here on
            self.shared.holder = self
            self.shared.source.begin(committed)
            return []
        return self.shared.source.propose(committed, limit) if self.held else []

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        if self.held:
            self.shared.source.commit(start, tokens)

    def end(self) -> None:
        if self.held:
            self.shared.source.end()
            self.shared.holder = None

    def rest(self, resting: frozenset[str]) -> None:
        if self.held:
            self.shared.source.rest(resting)
