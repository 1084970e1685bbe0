"""`n` choices: seeds per choice, and their events merged by index (a scripted lead)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from duo.core.sampling import SamplingParams
from duo.core.stats import Stats
from duo.lead.engine.events import Delta, Done, Failed, Job
from duo.lead.openai.choices import choice_jobs, choice_seed, combined, merged_events


def test_choice_seeds() -> None:
    assert [choice_seed(41, i) for i in range(3)] == [41, 42, 43]
    assert choice_seed(2**64 - 1, 1) == 0
    assert choice_seed(None, 5) is None
    jobs = choice_jobs([1, 2], 8, ["\n"], SamplingParams(seed=10, top_k=5), 3)
    assert [j.sampling.seed for j in jobs] == [10, 11, 12]
    assert all(j.sampling.top_k == 5 and j.prompt == [1, 2] for j in jobs)
    assert jobs[0].prompt is not jobs[1].prompt  # each job owns its prompt


def test_combined_counts_the_prompt_once() -> None:
    a = Stats(prompt_tokens=7, tokens=3, drafted=4, accepted=2, rounds=2)
    b = Stats(prompt_tokens=7, tokens=5, drafted=1, accepted=1, rounds=4)
    total = combined([a, b])
    assert (total.prompt_tokens, total.tokens, total.drafted, total.accepted) == (7, 8, 5, 3)
    assert total.rounds == 6


class TurnTakingLead:
    """One job at a time, like the lead; records which jobs ended and how."""

    def __init__(self, fail: int | None = None) -> None:
        self.turn = asyncio.Lock()
        self.closed: list[int] = []
        self.fail = fail

    async def events(self, job: Job) -> AsyncIterator[Any]:
        index = job.max_tokens  # the tests number their jobs by max_tokens
        async with self.turn:
            try:
                for k in range(3):
                    await asyncio.sleep(0)
                    yield Delta(f"{index}.{k} ")
                if index == self.fail:
                    yield Failed("engine fell over")
                    return
                yield Done("length", Stats(prompt_tokens=1, tokens=3))
            finally:
                self.closed.append(index)


def jobs(n: int) -> list[Job]:
    return [Job([1], i) for i in range(n)]


def test_events_arrive_tagged_in_turn_order() -> None:
    lead = TurnTakingLead()

    async def go() -> list[tuple[int, Any]]:
        return [e async for e in merged_events(lead, jobs(3))]  # type: ignore[arg-type]

    events = asyncio.run(go())
    assert [(i, type(e).__name__) for i, e in events] == [
        (i, kind) for i in range(3) for kind in ("Delta", "Delta", "Delta", "Done")
    ]
    assert lead.closed == [0, 1, 2]


def test_a_failed_choice_ends_its_stream_and_leaving_cancels_the_rest() -> None:
    lead = TurnTakingLead(fail=1)

    async def go() -> list[tuple[int, Any]]:
        seen = []
        async with aclosing(merged_events(lead, jobs(4))) as events:  # type: ignore[arg-type]
            async for index, event in events:
                seen.append((index, event))
                if isinstance(event, Failed):
                    break
        return seen

    seen = asyncio.run(go())
    assert seen[-1] == (1, Failed("engine fell over"))
    assert sorted(lead.closed) == [0, 1]  # 2 and 3 never started: they left the queue
