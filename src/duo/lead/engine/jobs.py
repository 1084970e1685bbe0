"""The lead's engine: one thread that owns the main model and runs every request on it.

The main model holds one sequence per slot (`duo lead --parallel N`, llama.cpp's -np).
A request waits in the queue until a slot is free, then takes the free slot whose KV
cache shares the longest prefix with its prompt, of equals the one taken longest ago (as
llama-server picks); if another slot, busy or not, holds a longer prefix of it, the
request's slot shares those KV cells. Its prompt is evaluated in pieces that ride along
with the running requests' rounds (whole batches when nothing else runs), and from then
on every running request advances together: one pass of the main model per round holds
each one's last token and chosen draft (duo.core.engine.step).
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
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from duo.core.draft import common_prefix
from duo.core.engine import Generation, MainModel, Round, step
from duo.core.logprobs import LogprobQueue, TokenLogprob
from duo.core.prompt import Prefill
from duo.core.stats import Stats
from duo.core.text import Chunk, TextStream
from duo.errors import DuoError
from duo.lead.engine.events import Delta, Done, Ending, Failed, Ticket, deltas
from duo.llama.backend import CACHE_BYTES
from duo.session.session import Session, pinned

log = logging.getLogger(__name__)

# While other requests run, a new prompt is evaluated in pieces alongside their rounds.
# By default (PIECE_STRETCH, no bound) a prompt longer than what one pass holds is read in
# turns of equal time with the running requests (see Engine._turn): a pass of up to n_batch
# prompt tokens beside their tokens, then as long in rounds that carry at most TURN_STRETCH
# times a round's cost of prompt tokens, shortest prompt first. A running stream then waits
# for one pass at most, a short request that comes meanwhile is read and answered in the
# running requests' turn, not after the long prompt, and the long prompt is read at half
# speed or more. A prompt that fits one pass is read in it, as llama-server reads it (with
# four clients on agent sessions that halved the time to first token against a stretch of
# 2.5 at the same throughput, docs/bench/prompt-pieces.md). `duo lead --prompt-stretch X`
# bounds every round instead: one with a piece costs at most X times a round of every
# admitted request (the running ones and those reading their prompts), by the measured
# cost of a pass; a piece has at least PIECE_LEAST tokens, so every prompt moves on.
PIECE_STRETCH = math.inf
TURN_STRETCH = 1.5
PIECE_LEAST = 4


@dataclass(eq=False)
class Running:
    """A job in a slot: its generation, text, logprobs (if asked for) and statistics."""

    ticket: Ticket
    slot: int
    gen: Generation
    text: TextStream
    record: list[TokenLogprob] | None  # the sampler's entries of the round (logprobs)
    entries: LogprobQueue  # entries waiting for the text that shows their tokens
    stats: Stats = field(default_factory=Stats)
    prompt: list[int] = field(default_factory=list)  # prompt tokens still to evaluate
    reused: int = 0  # prompt tokens whose KV was kept from the slot's last request
    since: float = 0.0  # when the request took its slot


@dataclass(eq=False)
class Call:
    """Work for the engine thread on one sequence of the main model, between rounds. A
    call whose fn returns a generator runs a step of it between two rounds, holding its
    slot until it returns: a long prompt read in pieces, never one pass that holds up
    everyone else's rounds."""

    fn: Callable[[MainModel], Any]
    tokens: list[int]  # what it will evaluate: the free slot that shares most is chosen
    future: Future[Any] = field(default_factory=Future)


class Engine:
    """The engine thread and its slots. `show(slot, chunk)` sees each request's text as it
    is generated (Chunks), then its end: its last text and a newline, as a str (the
    console). `done(stats, ending)` / `failed()` see each request that ended, finished or
    cancelled / failed."""

    def __init__(
        self,
        session: Session,
        *,
        show: Callable[[int, Chunk | str], None] | None = None,
        done: Callable[[Stats, Ending], None] | None = None,
        failed: Callable[[], None] | None = None,
        flush: Callable[[], None] | None = None,
        stretch: float = PIECE_STRETCH,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        """`flush` hands over the events emitted so far: the engine calls it before each
        pass of the main model and before it waits for work (duo.mailbox). A round that
        reads a piece of a new prompt costs at most `stretch` times a round without it.
        Idle slots are parked in up to `cache_bytes` of host memory (see _take_slot)."""
        self.session = session
        self.stretch = stretch
        self.cache_bytes = cache_bytes
        # Long prompts take turns with the running requests (see _turn), unless a stretch
        # bounds every round; the running requests' turn reads prompts within this one.
        self._turns = stretch == math.inf
        self._turn_stretch = TURN_STRETCH if self._turns else stretch
        self.slots = session.slots
        self._show = show
        self._done = done
        self._failed = failed
        self._flush = flush or (lambda: None)
        self._queue: deque[Ticket] = deque()
        self._calls: deque[Call] = deque()
        self._running: dict[int, Running] = {}  # by slot; the engine thread's alone
        self._stepping: dict[int, tuple[Call, Generator[Any, None, Any]]] = {}  # by slot
        self._taken = [0] * self.slots  # when each slot was last taken (_takes then; 0: never)
        self._takes = 0
        self._owed = 0.0  # seconds of rounds the running requests are owed (see _turn)
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
        for call in [*self._calls, *(c for c, _ in self._stepping.values())]:
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
        try:
            result = call.fn(self.session.main.sequence(slot))
        except Exception as e:
            call.future.set_exception(e)
            return
        if isinstance(result, Generator):
            self._stepping[slot] = (call, result)
            self._step(slot)  # its first piece now
        else:
            call.future.set_result(result)

    def _turn(self) -> None:
        """The running requests' turn, or a turn of the pieces: the steps of every stepping
        call and a round that reads prompts in whole passes. The two take the engine in
        turns of equal time: after the pieces took T seconds, the requests' rounds run for
        T seconds, reading prompts that end in the pass whole and the others only as much
        as keeps a round within TURN_STRETCH of its cost. So a running stream waits for one
        turn of pieces at most, a short request is answered in the requests' turn, and a
        long prompt is read at half speed or more meanwhile. With nobody to serve, every
        turn is one of pieces. With --prompt-stretch X every round reads prompts within
        X, and only the calls' steps take turns."""
        t0 = time.perf_counter()
        if self._owed > 0 and self._served():
            self._round(self._turn_stretch, to_the_end=self._turns)
            self._owed -= time.perf_counter() - t0
            return
        stepped = bool(self._stepping)
        for slot in list(self._stepping):
            self._step(slot)
        if self._running:
            self._round(self.stretch)
        # The pieces' time is owed to the running requests if a prompt is longer than what
        # the pass could hold (a prompt that fits is read in one pass, owing nothing).
        longer = self._turns and any(r.prompt for r in self._running.values())
        self._owed = time.perf_counter() - t0 if stepped or longer else 0.0

    def _served(self) -> bool:
        """Whether the running requests' turn has someone to serve: a request past its
        prompt, or one whose prompt a pass can read to its end (a short request that came
        while a long prompt is read: it is read and answered in that turn)."""
        most = self.session.main.n_batch - self._decoding()
        return any(len(r.prompt) < most for r in self._running.values())

    def _decoding(self) -> int:
        """Running requests past their prompt: each has a token in every pass."""
        return sum(not r.prompt for r in self._running.values())

    def _step(self, slot: int) -> None:
        call, steps = self._stepping[slot]
        try:
            next(steps)
        except StopIteration as done:
            del self._stepping[slot]
            call.future.set_result(done.value)
        except Exception as e:
            del self._stepping[slot]
            call.future.set_exception(e)

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
        running.since = time.perf_counter()
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
        seconds = time.perf_counter() - running.since
        running.stats.add_prefill(Prefill(len(prompt), running.reused, seconds))
        if running.ticket.job.warm_up:
            self._end(running, "length")

    def _take_slot(self, prompt: list[int], asked: int | None = None, share: bool = True) -> int:
        """The slot `asked` for, if it is free; else the free slot whose cached tokens
        share the longest prefix with the prompt (as llama-server picks); of slots that
        share as much, the one taken longest ago (one never taken first, as llama-server's
        LRU), so that a prompt sharing nothing with the cached ones (a raw prompt among
        chats) does not take the slot that holds what the chats share. Unless `share` is
        False (cache_prompt off), if another slot, running or not, holds a longer prefix, the
        free slot takes it over: the KV cells are shared or copied, not computed again (a
        system prompt every session sends is read once, not once per slot). A
        deterministic model shares nothing: a slot's results would then depend on how
        another slot read its prompt. The other free slots are parked in host memory, up
        to cache_bytes of them (as llama-server's --cache-idle-slots and --cache-ram)."""
        main = self.session.main
        shared = [common_prefix(main.seqs[s], prompt) for s in range(self.slots)]
        free = [s for s in range(self.slots) if s not in self._running and s not in self._stepping]
        slot = max(free, key=lambda s: (shared[s], -self._taken[s]))
        if asked in free:
            slot = asked
        self._takes += 1
        self._taken[slot] = self._takes
        best = max(range(self.slots), key=shared.__getitem__)
        n = min(shared[best], len(prompt) - 1)  # the last token is always fed again
        if share and not main.deterministic and n > shared[slot]:
            main.fork(best, slot, n)
        for idle in free:  # their cells would slow every pass (duo.llama.backend.Model.park)
            if idle != slot:
                main.park(idle, self.cache_bytes)
        return slot

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
        """Prompt tokens a round may evaluate beside the running requests' tokens (each at
        least one) while it costs at most `stretch` times a round of every admitted request:
        whole batches when nothing else runs, but in the running requests' `turn`."""
        n_batch = self.session.main.n_batch
        decoding = self._decoding()
        if not decoding and not turn:
            return n_batch
        admitted = len(self._running)  # the round once every prompt is read
        room = self.session.costs().room(decoding, stretch, n_batch - decoding, admitted)
        return max(room, PIECE_LEAST)

    def _advance(self, running: Running, r: Round) -> None:
        running.stats.add(r)
        chunk = running.text.feed(r)
        if self._show:
            self._show(running.slot, chunk)
        record = running.record
        if record is not None:
            running.entries.add(record[: len(r.tokens)])  # none past an end-of-generation
            record.clear()
        for delta in deltas(chunk, r):
            if record is not None:
                delta = replace(delta, logprobs=running.entries.emitted(delta.text))
            running.ticket.emit(delta)
        if running.text.stopped:  # a limit cut the text: told as a budget would be
            self._end(running, "length" if running.text.limited else "stop")
        elif r.finish:
            self._end(running, r.finish)

    def _show_end(self, running: Running, tail: str) -> None:
        """The end of a request's text: its last text and the end of its line."""
        if self._show:
            self._show(running.slot, tail + "\n")

    def _end(self, running: Running, outcome: Ending | Exception | None) -> None:
        """The request leaves its slot: finished (`Finish`), cancelled by its client,
        failed, or shut down (None)."""
        del self._running[running.slot]
        try:
            running.gen.end()
        except Exception:
            log.exception("a draft source failed to end a generation")
        if isinstance(outcome, Exception) or outcome is None:
            self._show_end(running, "")
            self._fail(running.ticket, outcome or DuoError("the lead is shutting down"))
            return
        tail = running.text.finish()
        self._show_end(running, tail)
        logprobs = (
            () if running.record is None else running.entries.finish(tail, running.text.stopped)
        )
        if tail or logprobs:
            running.ticket.emit(Delta(tail, logprobs=logprobs))
        stats = running.stats
        stats.add_received(running.gen.received())
        if self._done:
            self._done(stats, outcome)
        log.info(
            "request%s: prompt %d tokens (%d ms), generated %d tokens at %.1f tok/s, "
            "drafted %d, accepted %d, mean acceptance length %.2f, finish %s%s",
            f" (slot {running.slot})" if self.slots > 1 else "",
            stats.prompt_tokens,
            1000 * stats.prefill_seconds,
            stats.tokens,
            stats.tokens_per_second,
            stats.drafted,
            stats.accepted,
            stats.mean_acceptance_length,
            outcome,
            f" (by source: {stats.sources_text()})" if stats.by_source else "",
        )
        if outcome != "cancelled":  # else nobody waits for it any more
            cached = len(self.session.main.seqs[running.slot])
            running.ticket.emit(Done(outcome, stats, running.text.word, running.slot, cached))

    def _fail(self, ticket: Ticket, e: Exception) -> None:
        if self._failed:
            self._failed()
        if isinstance(e, DuoError):
            ticket.emit(Failed(str(e)))
        else:  # never let one request take the lead down
            log.error("generation failed", exc_info=e)
            ticket.emit(Failed(f"internal error: {e}"))


def prompt_pieces(
    feeding: list[Running], room: int, whole: int = 0
) -> list[tuple[Running, list[int]]]:
    """The prompt tokens a round evaluates: up to `room` in all, or up to `whole` for the
    prompts it reads to their end, each with its first round's token; the shortest rest of
    a prompt first (a short request is not held behind a long prompt; a long one still
    gets what the short ones leave of every pass). A prompt evaluated in pieces alongside
    the running requests' rounds delays each of their rounds a little, where a pass of its
    own would stall them all for the whole prompt."""
    pieces = []
    for running in sorted(feeding, key=lambda r: (len(r.prompt), r.since)):
        prompt = running.prompt
        if len(prompt) < max(room, whole):  # it ends here: its first round rides too
            piece, used = prompt, len(prompt) + 1
        else:
            piece = prompt[: min(max(room, 0), len(prompt) - 1)]
            used = len(piece)
        if not piece:
            break
        pieces.append((running, piece))
        room, whole = room - used, whole - used
    return pieces
