"""Draft sources for one process: classic (synchronous) and concurrent (async) drafting."""

from __future__ import annotations

from collections.abc import Sequence

from duo.core.draft import Draft, usable
from duo.core.engine import DraftSource
from duo.drafting.drafter import DraftWorker, Mirror
from duo.llama.backend import Model


class SyncDrafts:
    """Classic speculative decoding: the lead waits while the drafter guesses k tokens."""

    def __init__(self, model: Model) -> None:
        self.mirror = Mirror(model)

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def propose(self, committed: Sequence[int], limit: int) -> list[int]:
        self.mirror.follow(committed)
        while self.mirror.ahead(len(committed)) < limit:
            self.mirror.extend()
        return list(self.mirror.draft(len(committed))[:limit])

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        pass

    def rest(self, resting: bool) -> None:
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

    def propose(self, committed: Sequence[int], limit: int) -> list[int]:
        return usable(committed, self._latest, limit, self.n_vocab)

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        self.worker.commit(start, tokens)

    def end(self) -> None:
        self.worker.end()

    def rest(self, resting: bool) -> None:
        self.worker.rest(resting)

    def close(self) -> None:
        self.worker.stop()


class Longest:
    """Several draft sources at once: the longest usable proposal wins."""

    def __init__(self, sources: list[DraftSource]) -> None:
        self.sources = sources

    def begin(self, prompt: Sequence[int]) -> None:
        for s in self.sources:
            s.begin(prompt)

    def propose(self, committed: Sequence[int], limit: int) -> list[int]:
        return max((s.propose(committed, limit) for s in self.sources), key=len, default=[])

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        for s in self.sources:
            s.commit(start, tokens)

    def end(self) -> None:
        for s in self.sources:
            s.end()

    def rest(self, resting: bool) -> None:
        for s in self.sources:
            s.rest(resting)
