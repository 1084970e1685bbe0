"""The drafter: a draft model that mirrors the lead's committed tokens and guesses ahead.

`Mirror` is the drafter's state machine (no threads, no I/O): it follows the committed
tokens, rolling its KV cache back to the first disagreement, and extends its guess one
token at a time. `DraftWorker` runs a mirror on its own thread (its own core or device),
drafting continuously up to `max_ahead` tokens past the committed ones and publishing
each new draft. The in-process async mode and `duo back` both use it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

from duo.core.draft import Draft, common_prefix
from duo.core.sampling import Greedy, Sampler
from duo.llama.backend import Model

log = logging.getLogger(__name__)


class Mirror:
    """The committed tokens as the drafter knows them, followed by its own guesses.

    `seq` = the tokens in the draft model's KV cache + `pending`, the guess sampled from
    the last logits (not yet evaluated). The draft for committed tokens C is seq[len(C):].
    """

    def __init__(self, model: Model, sampler: Sampler | None = None) -> None:
        self.model = model
        self.sampler = sampler or Greedy()
        self.pending: int | None = None

    @property
    def seq(self) -> list[int]:
        tokens = self.model.tokens
        return tokens if self.pending is None else [*tokens, self.pending]

    def ahead(self, n_committed: int) -> int:
        return len(self.model.tokens) + (self.pending is not None) - n_committed

    def draft(self, n_committed: int) -> tuple[int, ...]:
        return tuple(self.seq[n_committed:])

    def follow(self, committed: Sequence[int]) -> bool:
        """Line up with the committed tokens; return True if that needed a decode.

        If the committed tokens are a prefix of our guesses, the guesses stand. Otherwise
        roll the KV back to the first disagreement and evaluate the committed tokens
        from there (a catch-up when joining, the correction after a rejection).
        """
        if not committed:
            return False
        seq = self.seq
        agree = common_prefix(seq, committed)
        if agree == len(committed) and self.pending is not None:
            return False
        # Keep what agrees, but re-evaluate at least one token to get fresh logits.
        keep = min(agree, len(self.model.tokens), len(committed) - 1)
        self.model.truncate(keep)
        logits = self.model.decode(committed[keep:], all_logits=False)
        self.pending = self.sampler.sample(logits[-1], committed)
        return True

    def extend(self) -> None:
        """Guess one more token: evaluate the pending guess and sample the next."""
        if self.pending is None:
            raise RuntimeError("extend() before follow()")
        guess = self.pending
        self.pending = None  # if decode fails, the mirror stays consistent
        logits = self.model.decode([guess], all_logits=False)
        self.pending = self.sampler.sample(logits[-1], self.model.tokens)


class DraftWorker:
    """Runs a Mirror on its own thread, drafting ahead of the commits it is given.

    `begin`, `commit` and `end` may be called from any thread and never block on the
    draft model. `publish` is called on the worker thread with each new draft.
    """

    def __init__(
        self,
        mirror: Mirror,
        publish: Callable[[Draft], None],
        *,
        max_ahead: int = 8,
        cores: set[int] | None = None,
        name: str = "drafter",
    ) -> None:
        self.mirror = mirror
        self.publish = publish
        self.max_ahead = max_ahead
        self.cores = cores
        self._cv = threading.Condition()
        self._committed: list[int] | None = None
        self._version = 0
        self._published_version = -1
        self._stopped = False
        self._resting = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> DraftWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()
        self._thread.join()

    # -- called by the lead side (any thread) ----------------------------------------

    def begin(self, prompt: Sequence[int]) -> None:
        with self._cv:
            self._committed = list(prompt)
            self._version += 1
            self._cv.notify()

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        with self._cv:
            if self._committed is None:
                return
            del self._committed[start:]
            self._committed.extend(tokens)
            self._version += 1
            self._cv.notify()

    def end(self) -> None:
        with self._cv:
            self._committed = None
            self._version += 1

    def rest(self, resting: bool) -> None:
        """While resting the worker does not decode; it still hears every commit and
        catches up with them in one batch when it drafts again."""
        if resting == self._resting:
            return
        with self._cv:
            self._resting = resting
            self._cv.notify()

    # -- the worker thread -----------------------------------------------------------

    def _run(self) -> None:
        if self.cores:
            os.sched_setaffinity(0, self.cores)  # pins this thread only (Linux)
        seen = -1
        idle = False
        while True:
            with self._cv:
                while not self._stopped and (
                    self._committed is None or self._resting or (idle and self._version == seen)
                ):
                    self._cv.wait()
                if self._stopped:
                    return
                assert self._committed is not None
                committed = list(self._committed)
                seen = self._version
            try:
                idle = self._step(committed, changed=self._version_changed(seen))
            except Exception:  # a drafter failure must never reach the lead
                log.exception("drafter step failed; waiting for the next commit")
                idle = True

    def _version_changed(self, seen: int) -> bool:
        changed = seen != self._published_version
        self._published_version = seen
        return changed

    def _step(self, committed: list[int], *, changed: bool) -> bool:
        """At most one decode; returns True when idle until the next commit.

        The draft is published whenever it grew or the committed tokens moved (a new
        generation may find its whole draft already in the mirror, e.g. a repeated prompt).
        """
        mirror = self.mirror
        n = len(committed)
        grew = mirror.follow(committed)
        if (
            not grew
            and mirror.ahead(n) < self.max_ahead
            and len(mirror.model.tokens) + 1 < mirror.model.n_ctx
        ):
            mirror.extend()
            grew = True
        if grew or changed:
            self.publish(Draft(n, mirror.draft(n)[: self.max_ahead]))
        return not grew
