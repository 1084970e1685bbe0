"""The lead's engine: one thread that owns the main model and runs every request on it.

The main model holds one sequence per slot (`duo lead --parallel N`, llama.cpp's -np).
A request waits in the queue until a slot is free, then takes the free slot whose KV
cache shares the longest prefix with its prompt, of equals the one taken longest ago (as
llama-server picks); if another slot, busy or not, holds a longer prefix of it, the
request's slot shares those KV cells. Its prompt is evaluated in pieces that ride along
with the running requests' rounds (whole batches when nothing else runs), and from then
on every running request advances together: one pass of the main model per round holds
each one's last token and chosen draft (duo.core.rounds.step).
A request that fails, stops or is cancelled leaves its slot without disturbing the
others. Its text streams back as events through `emit`, which must be thread-safe.
A `call` (a drafter-driven client's verification, duo.core.verifier) runs between rounds
in a free slot, as a pass of its own.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from duo.core.logprobs import LogprobQueue, TokenLogprob
from duo.core.prompt import Prefill
from duo.core.rounds import MainModel, Round, step
from duo.core.stats import Stats
from duo.core.text import Chunk, TextStream
from duo.errors import DuoError
from duo.lead.engine.calls import Call, Stepping
from duo.lead.engine.driven import EngineSession
from duo.lead.engine.events import Ending, Ticket
from duo.lead.engine.output import Outcomes, Running
from duo.lead.engine.schedule import (
    PIECE_STRETCH,
    TURN_STRETCH,
    Turns,
    prompt_pieces,
    prompt_room,
)
from duo.lead.engine.slots import SlotChoice
from duo.llama.backend import CACHE_BYTES
from duo.session.session import pinned

log = logging.getLogger(__name__)


class Engine:
    """The engine thread and its slots. `show(slot, chunk)` sees each request's text as it
    is generated (Chunks), then its end: its last text and a newline, as a str (the
    console). `done(stats, ending)` / `failed()` see each request that ended, finished or
    cancelled / failed."""

    def __init__(
        self,
        session: EngineSession,
        *,
        show: Callable[[int, Chunk | str], None] | None = None,
        done: Callable[[Stats, Ending], None] | None = None,
        failed: Callable[[], None] | None = None,
        flush: Callable[[], None] | None = None,
        stretch: float = PIECE_STRETCH,
        cache_bytes: int = CACHE_BYTES,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`flush` hands over the events emitted so far: the engine calls it before each
        pass of the main model and before it waits for work (duo.mailbox). A round that
        reads a piece of a new prompt costs at most `stretch` times a round without it.
        Idle slots are parked in up to `cache_bytes` of host memory (duo.lead.engine.slots).
        `clock` times the turns (duo.lead.engine.schedule)."""
        self.session = session
        self.stretch = stretch
        # Long prompts take turns with the running requests (see _turn), unless a stretch
        # bounds every round; the running requests' turn reads prompts within this one.
        self._turns = stretch == math.inf
        self._turn_stretch = TURN_STRETCH if self._turns else stretch
        self.slots = session.slots
        self._outcomes = Outcomes(
            slots=self.slots,
            cached=lambda slot: len(session.main.seqs[slot]),
            show=show,
            done=done,
            failed=failed,
        )
        self._choice = SlotChoice(session.main, self.slots, cache_bytes)
        self._owed = Turns(clock)
        self._clock = clock
        self._flush = flush or (lambda: None)
        self._queue: deque[Ticket] = deque()
        self._calls: deque[Call] = deque()
        self._running: dict[int, Running] = {}  # by slot; the engine thread's alone
        self._stepping = Stepping()  # the calls that hold a slot, a step at a time
        self._wake = threading.Condition()
        self._closing = False
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="engine", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error

    @property
    def busy(self) -> int:
        """Slots held: by requests, and by calls reading a prompt (/prefill, /verify)."""
        return len(self._running) + len(self._stepping)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def submit(self, ticket: Ticket) -> None:
        with self._wake:
            self._queue.append(ticket)
            self._wake.notify()

    def slot_states(self) -> list[tuple[int, int, Running | None]]:
        """(slot, tokens in its KV cache, its request or None), read from any thread: a
        snapshot that may be a round old."""
        running = dict(self._running)
        seqs = self.session.main.seqs
        return [(slot, len(seqs[slot]), running.get(slot)) for slot in range(self.slots)]

    def call(self, fn: Callable[[MainModel], Any], tokens: list[int]) -> Future[Any]:
        """Run fn(sequence) on the engine thread, between rounds, on the free slot whose
        KV shares the longest prefix with `tokens`; its result or exception in the Future."""
        call = Call(fn, tokens)
        with self._wake:
            self._calls.append(call)
            self._wake.notify()
        return call.future

    def cancelled(self) -> None:
        """A job was cancelled: if it is queued, it leaves the queue now; if it runs, it
        leaves its slot after this round."""
        with self._wake:
            self._queue = deque(t for t in self._queue if not t.job.cancelled.is_set())
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()

    # -- on the engine thread -------------------------------------------------------------

    def _main(self) -> None:
        with pinned(self.session.spec.main_cores):
            try:
                self.session.ready()
            except BaseException as e:
                self._error = e
                return
            finally:
                self._started.set()
            while self._next():
                self._flush()
                self._turn()
        for running in list(self._running.values()):
            self._end(running, None)
        for call in [*self._calls, *self._stepping]:
            call.future.set_exception(DuoError("the lead is shutting down"))
        self._flush()

    def _next(self) -> bool:
        """Wait for work, start what the free slots can take; False when closing."""
        with self._wake:
            while not (
                self._closing or self._queue or self._running or self._calls or self._stepping
            ):
                self._flush()
                self._wake.wait()
            if self._closing:
                return False
            calls: list[Call] = []
            while self._calls and self.busy + len(calls) < self.slots:
                calls.append(self._calls.popleft())
            starting: list[Ticket] = []
            while self._queue and self.busy + len(calls) + len(starting) < self.slots:
                ticket = self._queue.popleft()
                if not ticket.job.cancelled.is_set():  # nobody waits for it any more
                    starting.append(ticket)
        for call in calls:
            self._call(call)
        for ticket in starting:
            self._start(ticket)
        return True

    def _call(self, call: Call) -> None:
        slot = self._take_slot(call.tokens)
        self._stepping.start(call, slot, self.session.main.sequence(slot))

    def _turn(self) -> None:
        """The running requests' turn, or a turn of the pieces: the steps of every stepping
        call and a round that reads prompts in whole passes. The two take the engine in
        turns of equal time (duo.lead.engine.schedule.Turns): the requests' rounds read
        prompts that end in the pass whole and the others only as much as keeps a round
        within TURN_STRETCH of its cost. So a running stream waits for one turn of pieces
        at most, a short request is answered in the requests' turn, and a long prompt is
        read at half speed or more meanwhile. With nobody to serve, every turn is one of
        pieces. With --prompt-stretch X every round reads prompts within X, and only the
        calls' steps take turns."""
        t0 = self._clock()
        if self._owed.requests_turn(self._served()):
            self._round(self._turn_stretch, to_the_end=self._turns)
            self._owed.served_for(self._clock() - t0)
            return
        stepped = self._stepping.step_all()
        if self._running:
            self._round(self.stretch)
        # The pieces' time is owed to the running requests if a prompt is longer than what
        # the pass could hold (a prompt that fits is read in one pass, owing nothing).
        longer = self._turns and any(r.prompt for r in self._running.values())
        self._owed.pieces_took(self._clock() - t0, stepped or longer)

    def _served(self) -> bool:
        """Whether the running requests' turn has someone to serve: a request past its
        prompt, or one whose prompt a pass can read to its end (a short request that came
        while a long prompt is read: it is read and answered in that turn)."""
        most = self.session.main.n_batch - self._decoding()
        return any(len(r.prompt) < most for r in self._running.values())

    def _decoding(self) -> int:
        """Running requests past their prompt: each has a token in every pass."""
        return sum(not r.prompt for r in self._running.values())

    def _start(self, ticket: Ticket) -> None:
        job = ticket.job
        slot = self._take_slot(job.prompt, job.slot, job.cache_prompt)
        if not job.cache_prompt:  # read whole: nothing of the slot's cells is kept
            self.session.main.truncate(0, seq=slot)
        record: list[TokenLogprob] | None = [] if job.sampling.logprobs is not None else None
        try:  # a warm-up reads its prompt and ends (_prefilled): a generation of one
            gen = self.session.generation(
                job.prompt, max(job.max_tokens, 1), job.sampling, slot, record=record
            )
        except Exception as e:
            self._fail(ticket, e)
            return
        piece = self.session.main.vocab.piece
        running = Running(
            ticket,
            slot,
            gen,
            TextStream(piece, job.stops, job.limits),
            record,
            LogprobQueue(piece),
        )
        self._running[slot] = running
        running.since = self._clock()
        try:
            running.reused, missing = gen.begin()
        except Exception as e:
            self._end(running, e)
            return
        running.prompt = list(missing)
        if not missing:
            self._prefilled(running)

    def _prefilled(self, running: Running) -> None:
        """Its prompt is read: a warm-up (Job.warm_up) ends here."""
        prompt = running.gen.prompt
        seconds = self._clock() - running.since
        running.stats.add_prefill(Prefill(len(prompt), running.reused, seconds))
        if running.ticket.job.warm_up:
            self._end(running, "length")

    def _take_slot(self, prompt: list[int], asked: int | None = None, share: bool = True) -> int:
        free = [s for s in range(self.slots) if s not in self._running and s not in self._stepping]
        return self._choice.take(prompt, free, asked, share)

    def _round(self, stretch: float, to_the_end: bool = False) -> None:
        """One pass: every running request's round, and pieces of the prompts being read,
        as many as keep the pass within `stretch` times a round's cost (whole passes: inf);
        `to_the_end`: prompts the pass can read to their end are read whole."""
        for running in [r for r in self._running.values() if r.ticket.job.cancelled.is_set()]:
            self._end(running, "cancelled")
        if not self._running:
            return
        everyone = sorted(self._running.values(), key=lambda r: r.slot)
        reading = [r for r in everyone if r.prompt]
        whole = self.session.main.n_batch - self._decoding() if to_the_end else 0
        feeding = prompt_pieces(reading, self._prompt_room(stretch, to_the_end), whole)
        # A request whose prompt ends in this pass runs its first round in it too (but a
        # warm-up, which has none).
        ending = {
            r.slot
            for r, piece in feeding
            if len(piece) == len(r.prompt) and not r.ticket.job.warm_up
        }
        order = [r for r in everyone if not r.prompt or r.slot in ending]
        try:
            pieces = [(r.slot, piece) for r, piece in feeding]
            results = step(self.session.main, [(r.slot, r.gen) for r in order], pieces)
        except Exception as e:  # the pass itself failed: every request in it fails
            for running in everyone:
                self._end(running, e)
            return
        self.session.after_pass([r for r in results if isinstance(r, Round)])
        for running, piece in feeding:
            del running.prompt[: len(piece)]
            if not running.prompt:
                self._prefilled(running)
        for running, result in zip(order, results, strict=True):
            if isinstance(result, Exception):
                self._end(running, result)
            elif running.slot in ending:  # the pass counts once: as the prompt's
                free = result.seconds - result.llama_seconds
                self._advance(running, replace(result, seconds=free, llama_seconds=0.0))
            else:
                self._advance(running, result)

    def _prompt_room(self, stretch: float, turn: bool = False) -> int:
        main = self.session.main
        admitted = len(self._running)  # the round once every prompt is read
        costs = self.session.costs()
        return prompt_room(costs, main.n_batch, self._decoding(), admitted, stretch, turn)

    def _advance(self, running: Running, r: Round) -> None:
        ending = self._outcomes.advance(running, r)
        if ending is not None:
            self._end(running, ending)

    def _end(self, running: Running, outcome: Ending | Exception | None) -> None:
        """The request leaves its slot: finished (`Finish`), cancelled by its client,
        failed, or shut down (None)."""
        del self._running[running.slot]
        try:
            running.gen.end()
        except Exception:
            log.exception("a draft source failed to end a generation")
        self._outcomes.end(running, outcome)

    def _fail(self, ticket: Ticket, e: Exception) -> None:
        self._outcomes.fail(ticket, e)
