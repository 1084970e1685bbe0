"""From a running request to what its client and the console see: each round's text as
deltas (with logprobs, if asked for), its end (the last text, Done or Failed) and its log
line."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from duo.core.logprobs import LogprobQueue, TokenLogprob
from duo.core.rounds import Generation, Round
from duo.core.stats import Stats
from duo.core.text import Chunk, TextStream
from duo.errors import DuoError
from duo.lead.engine.events import Delta, Done, Ending, Failed, Ticket, deltas

log = logging.getLogger(__name__)


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


class Outcomes:
    """`show(slot, chunk)` sees each request's text as it is generated (Chunks), then its
    end: its last text and a newline, as a str (the console). `done(stats, ending)` /
    `failed()` see each request that ended, finished or cancelled / failed. `cached(slot)`:
    the tokens a slot's KV holds (told in Done)."""

    def __init__(
        self,
        *,
        slots: int,
        cached: Callable[[int], int],
        show: Callable[[int, Chunk | str], None] | None = None,
        done: Callable[[Stats, Ending], None] | None = None,
        failed: Callable[[], None] | None = None,
    ) -> None:
        self.slots = slots
        self.cached = cached
        self._show = show
        self._done = done
        self._failed = failed

    def advance(self, running: Running, r: Round) -> Ending | None:
        """A round of the request: its text out as deltas; how it ended, if it did."""
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
            return "length" if running.text.limited else "stop"
        return r.finish

    def end(self, running: Running, outcome: Ending | Exception | None) -> None:
        """The request has left its slot: finished (`Finish`), cancelled by its client,
        failed, or shut down (None)."""
        if isinstance(outcome, Exception) or outcome is None:
            self._show_end(running, "")
            self.fail(running.ticket, outcome or DuoError("the lead is shutting down"))
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
        self._log(running, outcome)
        if outcome != "cancelled":  # else nobody waits for it any more
            cached = self.cached(running.slot)
            running.ticket.emit(Done(outcome, stats, running.text.word, running.slot, cached))

    def fail(self, ticket: Ticket, e: Exception) -> None:
        if self._failed:
            self._failed()
        if isinstance(e, DuoError):
            ticket.emit(Failed(str(e)))
        else:  # never let one request take the lead down
            log.error("generation failed", exc_info=e)
            ticket.emit(Failed(f"internal error: {e}"))

    def _show_end(self, running: Running, tail: str) -> None:
        """The end of a request's text: its last text and the end of its line."""
        if self._show:
            self._show(running.slot, tail + "\n")

    def _log(self, running: Running, outcome: Ending) -> None:
        stats = running.stats
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
