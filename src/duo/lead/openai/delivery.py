"""Delivering a request's choices: whole, once every choice is done, or streamed as SSE.

`respond` runs the jobs of a request's choices on the lead and answers in OpenAI's shapes
(duo.lead.openai.replies). Whole: the choices' texts, usage and timings, or nothing (499) if
the client went away first, which cancels the jobs. Streamed: each choice's pieces as they
come, tagged by index, with the `duo` field saying where each piece came from
(duo.lead.openai.origin), then usage and timings, then [DONE].
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from duo.core.logprobs import TokenLogprob
from duo.core.stats import Stats
from duo.errors import GenerationFailed
from duo.lead.engine.events import Delta, Done, Failed, Job
from duo.lead.engine.lead import Lead
from duo.lead.format import event_stream
from duo.lead.openai.choices import combined, merged_events
from duo.lead.openai.origin import StreamOrigins
from duo.lead.openai.replies import Entry, Reply
from duo.lead.openai.requests import Output
from duo.lead.protocol.openai import timings, usage
from duo.sse import DONE, encode

T = TypeVar("T")


async def disconnected(request: Request) -> None:
    """Returns when the client goes away (call only once the body has been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def respond(
    lead: Lead,
    request: Request,
    jobs: list[Job],
    meta: dict[str, Any],
    replies: Sequence[Reply],
    output: Output,
) -> Response:
    if output.stream:
        return _stream(lead, jobs, meta, replies, output.include_usage)
    results = await collect(lead, jobs, request)
    if results is None:
        return Response(status_code=499)  # nobody is there to read it
    total = combined([c.done.stats for c in results])
    choices = [
        r.whole(c.text, c.done.finish_reason, c.entries)
        for r, c in zip(replies, results, strict=True)
    ]
    body = {**meta, "choices": choices, "usage": usage(total), "timings": timings(total)}
    return JSONResponse(body)


@dataclass
class Collected:
    """One job's whole output: its text, tokens, logprob entries and end."""

    done: Done
    text: str = ""
    ids: list[int] = field(default_factory=list)
    entries: list[TokenLogprob] = field(default_factory=list)


async def collect(lead: Lead, jobs: list[Job], request: Request) -> list[Collected] | None:
    """Each job's whole output, in order; None if the client went away first.

    A client that goes away cancels its jobs, queued or running, as a stream's does:
    cancelling the task that reads Lead.events leaves the queue, or sets job.cancelled
    and waits for the engine to stop at the end of its round.
    """
    return await unless_gone(request, _events(lead, jobs))


async def unless_gone(request: Request, work: Coroutine[Any, Any, T]) -> T | None:
    """What `work` returns; None if the client goes away first, which cancels it."""
    running = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait((running, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (running, watching):
            task.cancel()
        await asyncio.gather(running, watching, return_exceptions=True)
    return None if running.cancelled() else running.result()


async def _events(lead: Lead, jobs: list[Job]) -> list[Collected]:
    parts: list[list[str]] = [[] for _ in jobs]
    ids: list[list[int]] = [[] for _ in jobs]
    entries: list[list[TokenLogprob]] = [[] for _ in jobs]
    done: dict[int, Done] = {}
    async with aclosing(merged_events(lead, jobs)) as events:
        async for index, event in events:
            if isinstance(event, Delta):
                parts[index].append(event.text)
                ids[index].extend(event.ids)
                entries[index].extend(event.logprobs)
            elif isinstance(event, Done):
                done[index] = event
            elif isinstance(event, Failed):
                raise GenerationFailed(event.message)
    if len(done) != len(jobs):
        raise GenerationFailed("generation ended without a result")
    return [Collected(done[i], "".join(parts[i]), ids[i], entries[i]) for i in range(len(jobs))]


def _stream(
    lead: Lead,
    jobs: list[Job],
    meta: dict[str, Any],
    replies: Sequence[Reply],
    include_usage: bool,
) -> StreamingResponse:
    """SSE: chunks of each choice's text as it comes (tagged by index), each choice's
    last chunk with its finish_reason, then [DONE]. The request's usage and timings
    ride on the last chunk, or with stream_options.include_usage on a chunk of their
    own with no choices (as OpenAI sends it)."""

    def chunk(entry: Entry | None) -> dict[str, Any]:
        return {**meta, "choices": [] if entry is None else [entry]}

    async def events() -> AsyncIterator[bytes]:
        for reply in replies:
            for entry in reply.start():
                yield encode(chunk(entry))
        stats: dict[int, Stats] = {}
        origins = [StreamOrigins() for _ in jobs]  # the duo field: where each chunk came from
        async with aclosing(merged_events(lead, jobs)) as merged:
            async for index, event in merged:
                if isinstance(event, Delta):
                    extension = origins[index].of(event)
                    if extension is None and not event.logprobs:
                        continue
                    duo = {} if extension is None else {"duo": extension}
                    for entry in replies[index].text(event.text, event.logprobs):
                        yield encode({**chunk(entry), **duo})
                elif isinstance(event, Done):
                    stats[index] = event.stats
                    *entries, last = replies[index].end(event.finish_reason)
                    for entry in entries:
                        yield encode(chunk(entry))
                    if len(stats) < len(jobs) or include_usage:
                        yield encode(chunk(last))
                        continue
                    total = combined([stats[i] for i in range(len(jobs))])
                    yield encode({**chunk(last), "usage": usage(total), "timings": timings(total)})
                else:
                    error = {"message": event.message, "type": "server_error"}
                    yield encode({"error": {**error, "param": None, "code": None}})
                    break
        if include_usage and len(stats) == len(jobs):
            total = combined([stats[i] for i in range(len(jobs))])
            yield encode({**chunk(None), "usage": usage(total), "timings": timings(total)})
        yield encode(DONE)

    return event_stream(events())
