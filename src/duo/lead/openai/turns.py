"""One assistant turn as a sequence of blocks, for the APIs that answer in blocks rather than
in chat completions' choices: Anthropic's Messages (duo.lead.anthropic) and OpenAI's
Responses (duo.lead.responses).

A request to either is translated into a ChatRequest and prepared as a chat is
(duo.lead.openai.completions), so its reply goes through the same ChatReply: thoughts apart
from the answer, tool calls parsed out of it. `turn` reads that reply's deltas and says
what each door needs to write its own events:

    Opened(block)         a block begins: thinking, text, or a tool call
    Grown(block, delta)   more of its text (a call's arguments as the model writes them)
    Closed(block)         it is complete
    Ended(...)            the turn is over: why, the stop string, the figures, every block

A door that answers whole reads the same events to the end (`whole`), so that a streamed
and a whole answer are made the same way.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Literal

from starlette.requests import Request

from duo.core.stats import Stats
from duo.errors import GenerationFailed
from duo.lead.engine.events import Delta, Done, Job
from duo.lead.engine.lead import Lead
from duo.lead.openai.choices import merged_events
from duo.lead.openai.delivery import unless_gone
from duo.lead.openai.replies import ChatReply
from duo.lead.protocol.openai import ChunkChoice

Kind = Literal["thinking", "text", "call"]


@dataclass
class Block:
    kind: Kind
    index: int  # its position among the turn's blocks
    text: str = ""  # the thoughts or text so far; a call's arguments (JSON text)
    name: str = ""  # a call's function
    call_id: str = ""  # a call's ID


@dataclass(frozen=True)
class Opened:
    block: Block


@dataclass(frozen=True)
class Grown:
    block: Block
    delta: str


@dataclass(frozen=True)
class Closed:
    block: Block


@dataclass(frozen=True)
class Ended:
    finish: str  # stop, length, or tool_calls (chat completions' finish reasons)
    word: str  # the stop string that ended the text, if one did
    stats: Stats
    blocks: list[Block] = field(default_factory=list)


Step = Opened | Grown | Closed | Ended


class _Blocks:
    """The blocks of a turn, built from a ChatReply's stream entries."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.open: Block | None = None

    def entries(self, entries: Sequence[ChunkChoice]) -> list[Step]:
        steps: list[Step] = []
        for entry in entries:
            delta = entry["delta"]
            if delta.get("reasoning_content"):
                steps += self._text("thinking", delta["reasoning_content"])
            if delta.get("content"):
                steps += self._text("text", delta["content"])
            for call in delta.get("tool_calls") or ():
                function = call["function"]
                if "id" in call:  # a call begins (whole, or its arguments to stream)
                    steps += self._close()
                    name = function.get("name", "")
                    steps.append(Opened(self._new("call", name=name, call_id=call["id"])))
                block = self.open
                assert block is not None and block.kind == "call"
                if function["arguments"]:
                    block.text += function["arguments"]
                    steps.append(Grown(block, function["arguments"]))
        return steps

    def _new(self, kind: Kind, **fields: str) -> Block:
        block = Block(kind, len(self.blocks), **fields)
        self.blocks.append(block)
        self.open = block
        return block

    def _text(self, kind: Kind, text: str) -> list[Step]:
        steps: list[Step] = []
        if self.open is None or self.open.kind != kind:
            steps += self._close()
            steps.append(Opened(self._new(kind)))
        assert self.open is not None
        self.open.text += text
        steps.append(Grown(self.open, text))
        return steps

    def _close(self) -> list[Step]:
        if self.open is None:
            return []
        block, self.open = self.open, None
        return [Closed(block)]

    def end(self, entries: Sequence[ChunkChoice], done: Done) -> list[Step]:
        steps = self.entries(entries)
        finish = entries[-1]["finish_reason"] or done.finish_reason
        return [*steps, *self._close(), Ended(finish, done.word, done.stats, self.blocks)]


async def turn(lead: Lead, job: Job, reply: ChatReply) -> AsyncGenerator[Step, None]:
    """The steps of one job's reply, as its tokens come; a failed generation raises
    GenerationFailed. Leaving early cancels the job."""
    blocks = _Blocks()
    async with aclosing(merged_events(lead, [job])) as events:
        async for _, event in events:
            if isinstance(event, Delta):
                for step in blocks.entries(reply.text(event.text, event.logprobs)):
                    yield step
            elif isinstance(event, Done):
                for step in blocks.end(reply.end(event.finish_reason), event):
                    yield step
                return
            else:
                raise GenerationFailed(event.message)
    raise GenerationFailed("generation ended without a result")


async def whole(lead: Lead, job: Job, reply: ChatReply, request: Request) -> Ended | None:
    """The turn's end, with every block; None if the client went away first (which
    cancels the job)."""

    async def last() -> Ended:
        async with aclosing(turn(lead, job, reply)) as steps:
            async for step in steps:
                if isinstance(step, Ended):
                    return step
        raise GenerationFailed("generation ended without a result")

    return await unless_gone(request, last())
