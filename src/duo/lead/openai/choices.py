"""`n` choices of one request: one job each, their events merged by choice index.

Choice i runs as its own job through `Lead.events`, with the request's sampler settings and
a seed of its own: with a seed s, choice i samples with seed s + i (modulo 2**64), as
llama-server (`n_cmpl`) and vLLM derive their children's seeds. Choice i of a request
seeded s is therefore the text a request with n = 1 and seed s + i gets: reproducible and
checkable. Without a seed every choice draws its own random seed. Greedy choices are all
the same text, as they are everywhere else.

The jobs are handed to the lead at once, in index order; the lead runs them as its slots
allow (--parallel of them at once), and their events arrive tagged with the index, interleaved
as they come.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Sequence

from duo.core.sampling import SamplingParams
from duo.core.stats import Stats
from duo.lead.engine.events import Delta, Event, Failed, Job
from duo.lead.engine.lead import Lead

SEED_SPACE = 2**64  # seeds are 64-bit: choice seeds wrap around


def choice_seed(seed: int | None, index: int) -> int | None:
    """The seed of choice `index` for a request seeded `seed` (None: random)."""
    return None if seed is None else (seed + index) % SEED_SPACE


def choice_jobs(
    prompt: list[int], max_tokens: int, stops: Sequence[str], sampling: SamplingParams, n: int
) -> list[Job]:
    """One job per choice, each with its own seed (see the module's docstring)."""
    return [
        Job(
            list(prompt),
            max_tokens,
            stops,
            dataclasses.replace(sampling, seed=choice_seed(sampling.seed, i)),
        )
        for i in range(n)
    ]


def combined(stats: Sequence[Stats]) -> Stats:
    """The figures of every choice added up, the prompt counted once (as OpenAI's usage
    counts it: the choices share it)."""
    total = Stats()
    for s in stats:
        total.merge(s)
    total.prompt_tokens = stats[0].prompt_tokens if stats else 0
    return total


async def merged_events(lead: Lead, jobs: Sequence[Job]) -> AsyncGenerator[tuple[int, Event], None]:
    """Every job's events tagged with its index, as they come, until each job has ended.

    Leaving early (the consumer is cancelled or stops iterating) cancels every job, queued
    or running, as leaving `Lead.events` does for one.
    """
    queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()

    async def pump(index: int, job: Job) -> None:
        try:
            async for event in lead.events(job):
                queue.put_nowait((index, event))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # Lead.events reports failures as events; just in case
            queue.put_nowait((index, Failed(f"internal error: {e}")))

    # Created in index order, the tasks queue for the lead's turn in index order.
    tasks = [asyncio.ensure_future(pump(i, job)) for i, job in enumerate(jobs)]
    try:
        running = len(jobs)
        while running:
            index, event = await queue.get()
            if not isinstance(event, Delta):
                running -= 1
            yield index, event
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
