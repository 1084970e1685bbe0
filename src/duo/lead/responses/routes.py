"""OpenAI's Responses API, for Codex CLI and other clients of `responses.create`:

    POST /v1/responses   a response, whole or as the Responses API's stream events

A request is translated into a chat request (duo.lead.responses.requests) and runs as a
chat does; its reply comes as blocks (duo.lead.openai.turns), each an output item: a
`reasoning` item (a reasoning model's thoughts, as reasoning_text), a `message` (its
output_text), a `function_call` (call_id, name, arguments). IDs carry OpenAI's prefixes:
resp_, rs_, msg_, fc_ (and call_ for call IDs).

Streamed, the events come in the order the `openai` SDK accumulates them, each named by
`event:` and numbered by `sequence_number`: response.created and response.in_progress;
per item response.output_item.added, its part's response.content_part.added, its deltas
(response.output_text.delta, response.reasoning_text.delta,
response.function_call_arguments.delta) and their .done events, response.output_item.done;
then response.completed, or response.incomplete when max_output_tokens cut it short. A
generation that fails midway ends in an error event and response.failed. Errors before the
stream starts are OpenAI's error bodies, as on every other OpenAI route.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from duo.core.stats import Stats
from duo.errors import DuoError
from duo.lead.engine.events import Job
from duo.lead.format import event_stream
from duo.lead.openai.completions import Completions
from duo.lead.openai.replies import ChatReply
from duo.lead.openai.turns import Block, Closed, Ended, Grown, Opened, turn, whole
from duo.lead.protocol.responses import (
    OutputItem,
    ResponseBody,
    ResponseEvent,
    ResponseUsage,
)
from duo.lead.responses.requests import ResponsesRequest
from duo.lead.routes import Answer, Operation
from duo.sse import encode

Json = dict[str, Any]
PREFIXES = {"thinking": "rs", "text": "msg", "call": "fc"}


class Responses:
    def __init__(self, completions: Completions) -> None:
        self.completions = completions
        self.lead = completions.lead

    def operations(self) -> list[Operation]:
        """Their part of the route table (duo.lead.routes)."""
        return [
            Operation(
                "POST",
                "/v1/responses",
                "A response, in OpenAI's Responses API (nothing is stored)",
                self.responses,
                Answer(
                    ResponseBody,
                    "the whole response, or with `stream` its events",
                    chunk=ResponseEvent,
                ),
                body=ResponsesRequest,
            )
        ]

    async def responses(self, request: Request, body: ResponsesRequest) -> Response:
        chat = body.chat()
        ready, reply = await self.completions.prepare_turn(chat, body.texts(), "input")
        response = self._response(body)
        if body.stream:
            return event_stream(self._events(response, ready.jobs[0], reply))
        ended = await whole(self.lead, ready.jobs[0], reply, request)
        if ended is None:
            return Response(status_code=499)  # nobody is there to read it
        ids = _Ids()
        response["output"] = [_item(b, ids.of(b), "completed") for b in ended.blocks]
        _finish(response, ended)
        return JSONResponse(response)

    def _response(self, body: ResponsesRequest) -> ResponseBody:
        """The response's envelope, as it stands before any output."""
        return {
            "id": f"resp_{uuid.uuid4().hex[:24]}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "error": None,
            "incomplete_details": None,
            "model": self.lead.info.name,
            "instructions": body.instructions,
            "output": [],
            "parallel_tool_calls": bool(body.parallel_tool_calls),
            "tool_choice": _encoded(body.tool_choice) or "auto",
            "tools": [_encoded(t) for t in body.tools or ()],
            "temperature": body.temperature,
            "top_p": body.top_p,
            "max_output_tokens": body.max_output_tokens,
            "previous_response_id": None,
            "store": False,
            "text": _encoded(body.text) or {"format": {"type": "text"}},
            "metadata": body.metadata or {},
            "usage": None,
        }

    async def _events(
        self, response: ResponseBody, job: Job, reply: ChatReply
    ) -> AsyncIterator[bytes]:
        numbered = _Numbered()
        yield numbered("response.created", response=dict(response))
        yield numbered("response.in_progress", response=dict(response))
        ids = _Ids()
        try:
            async with aclosing(turn(self.lead, job, reply)) as steps:
                async for step in steps:
                    if isinstance(step, Ended):
                        _finish(response, step)
                        output = [_item(b, ids.of(b), "completed") for b in step.blocks]
                        response["output"] = output
                        kind = "completed" if response["status"] == "completed" else "incomplete"
                        yield numbered(f"response.{kind}", response=response)
                        return
                    block = step.block
                    for event, fields in _block_events(step, ids.of(block)):
                        yield numbered(event, output_index=block.index, **fields)
        except DuoError as e:
            yield numbered("error", code="server_error", message=e.message, param=None)
            response["status"] = "failed"
            response["error"] = {"code": "server_error", "message": e.message}
            yield numbered("response.failed", response=response)


class _Numbered:
    """Events written with their sequence numbers, from 0."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        event: ResponseEvent = {"type": kind, "sequence_number": self.next, **fields}  # type: ignore[typeddict-item]
        self.next += 1
        return encode(event, kind)


class _Ids:
    """Each block's item ID, made once."""

    def __init__(self) -> None:
        self.ids: dict[int, str] = {}

    def of(self, block: Block) -> str:
        if block.index not in self.ids:
            self.ids[block.index] = f"{PREFIXES[block.kind]}_{uuid.uuid4().hex[:24]}"
        return self.ids[block.index]


def _block_events(step: Opened | Grown | Closed, item_id: str) -> list[tuple[str, Json]]:
    """The events of one step of one block (output_index aside)."""
    block = step.block
    at: Json = {"item_id": item_id}
    part: Json = {**at, "content_index": 0}  # a reasoning item's or message's one part
    kind = {"thinking": "reasoning_text", "text": "output_text", "call": ""}[block.kind]
    logprobs: Json = {"logprobs": []} if block.kind == "text" else {}
    if isinstance(step, Opened):
        added = [("response.output_item.added", {"item": _item(block, item_id, "in_progress")})]
        if block.kind == "call":
            return added
        return [*added, ("response.content_part.added", {**part, "part": _part(block, "")})]
    if isinstance(step, Grown):
        if block.kind == "call":
            return [("response.function_call_arguments.delta", {**at, "delta": step.delta})]
        return [(f"response.{kind}.delta", {**part, "delta": step.delta, **logprobs})]
    done = ("response.output_item.done", {"item": _item(block, item_id, "completed")})
    if block.kind == "call":
        arguments = {**at, "name": block.name, "arguments": block.text}
        return [("response.function_call_arguments.done", arguments), done]
    return [
        (f"response.{kind}.done", {**part, "text": block.text, **logprobs}),
        ("response.content_part.done", {**part, "part": _part(block, block.text)}),
        done,
    ]


def _part(block: Block, text: str) -> Any:
    if block.kind == "thinking":
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": []}


def _item(block: Block, item_id: str, status: Any) -> OutputItem:
    """A block as its output item: whole, or (in_progress) as the stream adds it."""
    whole_text = status == "completed"
    if block.kind == "call":
        return {
            "type": "function_call",
            "id": item_id,
            "status": status,
            "call_id": block.call_id,
            "name": block.name,
            "arguments": block.text if whole_text else "",
        }
    content = [_part(block, block.text)] if whole_text else []
    if block.kind == "thinking":
        return {
            "type": "reasoning",
            "id": item_id,
            "status": status,
            "summary": [],
            "content": content,
        }
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _finish(response: ResponseBody, ended: Ended) -> None:
    """The response as the turn's end leaves it: its status and usage."""
    cut = ended.finish == "length"
    response["status"] = "incomplete" if cut else "completed"
    response["incomplete_details"] = {"reason": "max_output_tokens"} if cut else None
    response["usage"] = _usage(ended.stats)


def _usage(s: Stats) -> ResponseUsage:
    return {
        "input_tokens": s.prompt_tokens,
        "input_tokens_details": {"cached_tokens": s.cached_tokens},
        "output_tokens": s.tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": s.prompt_tokens + s.tokens,
    }


def _encoded(value: Any) -> Any:
    """A request's field as plain JSON (None stays None)."""
    return None if value is None else msgspec.to_builtins(value)
