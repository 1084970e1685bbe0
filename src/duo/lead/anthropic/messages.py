"""Anthropic's Messages API, for agents built on the `anthropic` SDK:

    POST /v1/messages                a reply, whole or as Anthropic's stream events
    POST /v1/messages/count_tokens   the prompt's length in tokens

A request is translated into a chat request (duo.lead.anthropic.requests) and runs as a chat
does; its reply comes as blocks (duo.lead.openai.turns), each written as Anthropic writes
it: `thinking` (a reasoning model's thoughts), `text`, `tool_use` (its input the call's
arguments). Streamed, the events come in Anthropic's order: message_start; per block
content_block_start, its deltas (thinking_delta, text_delta, input_json_delta) and
content_block_stop; message_delta with the stop_reason and usage (and llama.cpp's
`timings`, which duo's other streams carry too); message_stop. Errors, on
these routes only, are Anthropic's: {"type": "error", "error": {"type", "message"}}.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from duo.core.stats import Stats
from duo.errors import DuoError
from duo.lead.anthropic.requests import CountTokensRequest, MessagesRequest
from duo.lead.format import event_stream
from duo.lead.openai.completions import Completions, Prepared
from duo.lead.openai.replies import ChatReply
from duo.lead.openai.turns import Block, Closed, Ended, Grown, Opened, turn, whole
from duo.lead.protocol.anthropic import (
    AnthropicError,
    AnthropicUsage,
    ContentOut,
    MessageBody,
    StreamEvent,
    TokenCount,
)
from duo.lead.protocol.openai import timings
from duo.lead.routes import Answer, Dialect, Operation
from duo.sse import encode

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    503: "overloaded_error",
}
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


def error_response(status: int, message: str) -> JSONResponse:
    """An error in Anthropic's shape."""
    detail = {"type": ERROR_TYPES.get(status, "api_error"), "message": message}
    body: AnthropicError = {"type": "error", "error": detail}  # type: ignore[typeddict-item]
    return JSONResponse(body, status_code=status)


ANTHROPIC = Dialect(AnthropicError, error_response)


class Messages:
    def __init__(self, completions: Completions) -> None:
        self.completions = completions
        self.lead = completions.lead
        self.prompts = completions.prompts

    def operations(self) -> list[Operation]:
        """Their part of the route table (duo.lead.routes)."""
        return [
            Operation(
                "POST",
                "/v1/messages",
                "A reply, in Anthropic's Messages API (the key in X-Api-Key or Authorization)",
                self.messages,
                Answer(
                    MessageBody, "the whole reply, or with `stream` its events", chunk=StreamEvent
                ),
                body=MessagesRequest,
                dialect=ANTHROPIC,
            ),
            Operation(
                "POST",
                "/v1/messages/count_tokens",
                "The prompt's length in tokens, in Anthropic's Messages API",
                self.count_tokens,
                Answer(TokenCount),
                body=CountTokensRequest,
                dialect=ANTHROPIC,
            ),
        ]

    async def count_tokens(self, request: Request, body: CountTokensRequest) -> Response:
        for param, texts in body.texts():
            self.prompts.check_size(texts, param)
        text, _ = await self.prompts.chat(body.chat())
        tokens = await self.prompts.tokenize(text, add_special=False, param="messages")
        count: TokenCount = {"input_tokens": len(tokens)}
        return JSONResponse(count)

    async def messages(self, request: Request, body: MessagesRequest) -> Response:
        chat = body.chat()
        ready, reply = await self.completions.prepare_turn(chat, body.texts(), "messages")
        message = self._message(ready)
        if body.stream:
            return event_stream(self._events(ready, message, reply))
        ended = await whole(self.lead, ready.jobs[0], reply, request)
        if ended is None:
            return Response(status_code=499)  # nobody is there to read it
        message["content"] = [_content(b) for b in ended.blocks]
        message["stop_reason"], message["stop_sequence"] = _stop(ended)
        message["usage"] = _usage(ended.stats)
        return JSONResponse(message)

    def _message(self, ready: Prepared) -> MessageBody:
        prompt = len(ready.jobs[0].prompt)
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": self.lead.info.name,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": prompt,
                "output_tokens": 0,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            },
        }

    async def _events(
        self, ready: Prepared, message: MessageBody, reply: ChatReply
    ) -> AsyncIterator[bytes]:
        def event(data: StreamEvent) -> bytes:
            return encode(data, data["type"])

        yield event({"type": "message_start", "message": message})
        try:
            async with aclosing(turn(self.lead, ready.jobs[0], reply)) as steps:
                async for step in steps:
                    if isinstance(step, Opened):
                        start = _content(step.block, opening=True)
                        yield event(
                            {
                                "type": "content_block_start",
                                "index": step.block.index,
                                "content_block": start,
                            }
                        )
                    elif isinstance(step, Grown):
                        yield event(
                            {
                                "type": "content_block_delta",
                                "index": step.block.index,
                                "delta": _delta(step.block, step.delta),
                            }
                        )
                    elif isinstance(step, Closed):
                        yield event({"type": "content_block_stop", "index": step.block.index})
                    elif isinstance(step, Ended):
                        reason, word = _stop(step)
                        yield event(
                            {
                                "type": "message_delta",
                                "delta": {"stop_reason": reason, "stop_sequence": word},
                                "usage": _usage(step.stats),
                                "timings": timings(step.stats),
                            }
                        )
        except DuoError as e:
            detail = {"type": "api_error", "message": e.message}
            yield encode({"type": "error", "error": detail}, "error")
            return
        yield event({"type": "message_stop"})


def _content(block: Block, opening: bool = False) -> ContentOut:
    """A block as Anthropic writes it: whole, or (`opening`) as its stream starts it."""
    if block.kind == "thinking":
        return {"type": "thinking", "thinking": "" if opening else block.text, "signature": ""}
    if block.kind == "text":
        return {"type": "text", "text": "" if opening else block.text}
    arguments: Any = {} if opening else _input(block.text)
    return {"type": "tool_use", "id": _tool_use_id(block), "name": block.name, "input": arguments}


def _delta(block: Block, text: str) -> dict[str, str]:
    if block.kind == "thinking":
        return {"type": "thinking_delta", "thinking": text}
    if block.kind == "text":
        return {"type": "text_delta", "text": text}
    return {"type": "input_json_delta", "partial_json": text}


def _tool_use_id(block: Block) -> str:
    """Anthropic's form of a call's ID (toolu_...), the same every time it is asked for."""
    return "toolu_" + block.call_id.removeprefix("call_")


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _stop(ended: Ended) -> tuple[str, str | None]:
    """The stop_reason and stop_sequence of a turn that ended so."""
    if ended.word:
        return "stop_sequence", ended.word
    return STOP_REASONS.get(ended.finish, "end_turn"), None


def _usage(s: Stats) -> AnthropicUsage:
    return {
        "input_tokens": s.prompt_tokens - s.cached_tokens,
        "output_tokens": s.tokens,
        "cache_read_input_tokens": s.cached_tokens,
        "cache_creation_input_tokens": 0,
    }
