"""The drafter: a draft model that mirrors the lead's committed tokens and guesses ahead.

`Mirror` is the drafter's state machine for one sequence of the draft model (no threads,
no I/O): it follows the committed tokens, rolling its KV cache back to the first
disagreement, and extends its guess one token at a time. `DraftWorker` runs mirrors on
its own thread (its own core or device), one per generation it drafts for, drafting
continuously up to `max_ahead` tokens past the committed ones and publishing each new
draft. The in-process async mode and `duo back` both use it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from duo.core.draft import Draft, common_prefix
from duo.core.sampling import Greedy, Logits, Sampler
from duo.drafting.fanout import Fanout, FanoutBranch
from duo.llama.backend import CACHE_BYTES, Model
from duo.llama.passes import ModelSequence

log = logging.getLogger(__name__)

# A catch-up of more tokens than this is evaluated alone, with logits for its last token
# only, not in the pass of every generation's next tokens (which computes every row's).
BATCHED = 4


class Mirror:
    """The committed tokens as the drafter knows them, followed by its own guesses.

    `seq` = the tokens in the draft model's KV cache + `pending`, the guess sampled from
    the last logits (not yet evaluated). The draft for committed tokens C is seq[len(C):].
    """

    def __init__(self, model: Model | ModelSequence, sampler: Sampler | None = None) -> None:
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

    def plan(self, committed: Sequence[int], max_ahead: int) -> list[int]:
        """The tokens to evaluate next ([] when there is nothing to do), whose last row of
        logits `took` then takes.

        If the committed tokens are a prefix of our guesses, the guesses stand, and the
        next one to evaluate is the pending guess, while the draft is less than max_ahead
        tokens ahead. Otherwise roll the KV back to the first disagreement and evaluate the
        committed tokens from there (a catch-up when joining, the correction after a
        rejection), at least one to get fresh logits.
        """
        if not committed:
            return []
        agree = common_prefix(self.seq, committed)
        if agree < len(committed) or self.pending is None:
            keep = min(agree, len(self.model.tokens), len(committed) - 1)
            self.model.truncate(keep)
            self.pending = None
            return list(committed[keep:])
        if self.ahead(len(committed)) < max_ahead and len(self.model.tokens) + 1 < self.model.n_ctx:
            guess, self.pending = self.pending, None  # if decode fails, the mirror stays whole
            return [guess]
        return []

    def took(self, logits: Logits) -> None:
        """The planned tokens were evaluated: sample the next guess from their last row."""
        self.pending = self.sampler.sample(logits, self.model.tokens)

    def evaluate(self, tokens: Sequence[int]) -> None:
        """Evaluate planned tokens in a pass of their own (logits for the last only)."""
        self.took(self.model.decode(tokens, all_logits=False)[-1])

    def step(self, committed: Sequence[int], max_ahead: int) -> bool:
        """Evaluate what `plan` asks for, alone; return whether there was anything."""
        tokens = self.plan(committed, max_ahead)
        if tokens:
            self.evaluate(tokens)
        return bool(tokens)


@dataclass(eq=False)
class Track:
    """One sequence of the draft model and the generation it drafts for, if any."""

    mirror: Mirror
    seq: int
    fan: Fanout | None = None  # its branches (fan-out), in sequences of their own
    key: int | None = None  # the generation's key (a slot, a session); None: free
    committed: list[int] | None = None  # the generation's committed tokens
    began: int = 0  # when it took its generation (a count of begins)
    version: int = 0  # of `committed`, bumped by every change
    seen: int = -1  # the version of the last draft published
    idle: bool = False  # nothing to draft until the next change
    resting: bool = False
    ended: bool = False  # its generation ended since: its cells may be parked


class DraftWorker:
    """Runs mirrors on their own thread, drafting ahead of the commits they are given: one
    sequence of the draft model per generation it drafts for, up to `sequences` at once
    (a lead's slots, or the sessions of a lead's slots), their next tokens evaluated
    together in one pass.

    `begin`, `commit`, `end` and `rest` may be called from any thread with a generation's
    key and never block on the draft model; a generation beyond `sequences` takes the
    sequence of the one that began first. `publish(key, draft, branches)` is called on the
    worker thread with each new draft.

    With `fanout` F > 0, each generation also has up to F branches (duo.drafting.fanout),
    in F more sequences of the draft model (made with `forks=sequences * F`), and each
    pass takes up to F branch steps besides the chains' next guesses.

    The sequence of a generation that ended is parked in host memory (up to `cache_bytes`
    in all) at the worker's next pass, as the lead parks its idle slots: in one KV buffer
    its cells would slow every pass of the others (duo.llama.backend.Model.park). They
    come back when a generation takes the sequence again, which keeps the part its prompt
    shares with them, as it would have without parking.
    """

    def __init__(
        self,
        model: Model,
        publish: Callable[[int, Draft, tuple[Draft, ...]], None],
        *,
        sequences: int = 1,
        max_ahead: int = 8,
        fanout: int = 0,
        cores: set[int] | None = None,
        name: str = "drafter",
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        self.model = model
        self.cache_bytes = cache_bytes
        self.publish = publish
        self.max_ahead = max_ahead
        self.fanout = fanout
        self.cores = cores
        one = sequences == 1 and not fanout  # a model of one sequence: no batches needed
        self.tracks = [
            Track(Mirror(model if one else model.sequence(seq)), seq) for seq in range(sequences)
        ]
        for i, track in enumerate(self.tracks):
            if fanout:
                forks = range(sequences + i * fanout, sequences + (i + 1) * fanout)
                track.fan = Fanout(model, list(forks), depth=max_ahead)
        self._cv = threading.Condition()
        self._begun = 0
        self._stopped = False
        self._held = False
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

    def begin(self, key: int, prompt: Sequence[int]) -> None:
        with self._cv:
            track = self._track(key) or min(
                self.tracks,
                key=lambda t: (
                    t.key is not None,  # a free sequence first,
                    t.began if t.key is not None else 0,  # else the oldest generation's,
                    -common_prefix(t.mirror.model.tokens, prompt),  # sharing most of the prompt
                ),
            )
            self._begun += 1
            track.key, track.committed, track.began = key, list(prompt), self._begun
            track.resting = track.ended = False
            self._changed(track)

    def commit(self, key: int, start: int, tokens: Sequence[int]) -> None:
        with self._cv:
            track = self._track(key)
            if track is None or track.committed is None:
                return
            del track.committed[start:]
            track.committed.extend(tokens)
            self._changed(track)

    def end(self, key: int | None = None) -> None:
        """A generation is over (None: every one)."""
        with self._cv:
            for track in self.tracks:
                if key is None or track.key == key:
                    track.key, track.committed = None, None
                    track.ended = True

    def rest(self, key: int, resting: bool) -> None:
        """While resting the worker does not decode for this generation; it still hears
        every commit and catches up with them in one batch when it drafts again."""
        with self._cv:
            track = self._track(key)
            if track is not None and track.resting != resting:
                track.resting = resting
                self._cv.notify()

    def hold(self, held: bool) -> None:
        """While held the worker decodes for no generation (its cores are lent to the
        main model); it catches up with the commits once released."""
        with self._cv:
            self._held = held
            self._cv.notify()

    @property
    def held(self) -> bool:
        return self._held

    def _track(self, key: int) -> Track | None:
        return next((t for t in self.tracks if t.key == key), None)

    def _changed(self, track: Track) -> None:
        """A track's committed tokens moved: the worker is woken only if it may decode for
        it (a held or resting worker would wake to find nothing to do, every round, on
        cores the main model is using: it sees the change when it is released)."""
        track.version += 1
        if not self._held and not track.resting:
            self._cv.notify()

    # -- the worker thread -----------------------------------------------------------

    def _run(self) -> None:
        if self.cores:
            os.sched_setaffinity(0, self.cores)  # pins this thread only (Linux)
        while True:
            with self._cv:
                while not self._stopped and not (work := self._work()):
                    self._cv.wait()
                if self._stopped:
                    return
            try:
                self._step(work)
            except Exception:  # a drafter failure must never reach the lead
                log.exception("drafter step failed; waiting for the next commit")
                for track, *_ in work:
                    track.idle = True

    def _work(self) -> list[tuple[Track, int, list[int], bool]]:
        """Under the lock: (track, key, committed tokens, changed since its last draft)
        of every generation with something to do."""
        work: list[tuple[Track, int, list[int], bool]] = []
        if self._held:
            return work
        for t in self.tracks:
            if t.key is None or t.committed is None or t.resting:
                continue
            changed = t.version != t.seen
            if changed or not t.idle:
                t.seen = t.version
                work.append((t, t.key, list(t.committed), changed))
        return work

    def _step(self, work: list[tuple[Track, int, list[int], bool]]) -> None:
        """One pass for every generation with work: each one's catch-up or next guess, and
        its most valuable branch steps.

        A draft is published whenever it grew or the committed tokens moved (a new
        generation may find its whole draft already in the mirror, e.g. a repeated prompt).
        """
        for t in self.tracks:
            if t.ended:  # a begin meanwhile finds its cells back when it decodes
                t.ended = False
                self.model.park(t.seq, self.cache_bytes)
        branching = [(t, self._branch_steps(t, committed)) for t, _, committed, _ in work]
        planned = [(t, t.mirror.plan(committed, self.max_ahead)) for t, _, committed, _ in work]
        together = [(t, tokens) for t, tokens in planned if 0 < len(tokens) <= BATCHED]
        alone = [(t, tokens) for t, tokens in planned if len(tokens) > BATCHED]
        steps = [(t.fan, b) for t, chosen in branching if t.fan for b in chosen]
        if len(together) > 1 or steps:
            rows = self.model.decode_batch(
                [(t.seq, tokens) for t, tokens in together]
                + [(b.seq, b.tokens[-1:]) for _, b in steps]
            )
            for (t, _), logits in zip(together, rows[: len(together)], strict=True):
                self._took(t, logits[-1])
            for (fan, b), logits in zip(steps, rows[len(together) :], strict=True):
                fan.took(b, logits[-1])
        else:
            alone += together
        for t, tokens in alone:
            self._took(t, t.mirror.model.decode(tokens, all_logits=False)[-1])
        for (t, key, committed, changed), (_, tokens), (_, chosen) in zip(
            work, planned, branching, strict=True
        ):
            t.idle = not tokens and not chosen
            if tokens or chosen or changed:
                n = len(committed)
                chain = t.mirror.seq
                branches = t.fan.drafts(chain, n) if t.fan is not None else ()
                self.publish(key, Draft(n, tuple(chain[n : n + self.max_ahead])), branches)

    def _took(self, t: Track, logits: Logits) -> None:
        t.mirror.took(logits)
        if t.fan is not None:
            t.fan.observe(len(t.mirror.model.tokens), logits)

    def _branch_steps(self, t: Track, committed: list[int]) -> list[FanoutBranch]:
        """Follow the commits with `t`'s branches (adopting the one they took), and choose
        this pass's branch steps: none while the chain disagrees with the commits."""
        if t.fan is None:
            return []
        taken = t.fan.adopt(committed, t.seq)
        if taken is not None:
            t.seq, t.mirror = taken.seq, Mirror(self.model.sequence(taken.seq))
            t.mirror.pending = taken.tokens[-1]
        chain = t.mirror.seq
        t.fan.prune(chain, committed)
        n = len(committed)
        if chain[:n] != committed or t.mirror.pending is None:
            return []
        extending = t.mirror.ahead(n) < self.max_ahead
        return t.fan.steps(chain, t.seq, n, self.fanout, extending)
