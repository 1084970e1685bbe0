"""The OpenAI endpoints that generate: text and chat completions, and the served model.

    POST /v1/chat/completions   chat, with the model's own chat template (SSE with stream)
    POST /v1/completions        plain text completion (SSE with stream)
    GET  /v1/models             the served model

A request's path: its body comes decoded into its typed request (duo.lead.routes,
duo.lead.body; the models in duo.lead.openai.requests and .chat); `prepare`, which both
share, turns it into prompt tokens and the reply's grammar (duo.lead.openai.prompts), then
jobs, one per choice (duo.lead.openai.choices); the handler answers whole or streamed
(duo.lead.openai.delivery, in the shapes of duo.lead.openai.replies and duo.lead.protocol).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from duo.lead.engine.events import Job
from duo.lead.engine.lead import Lead
from duo.lead.openai.chat import ChatRequest
from duo.lead.openai.choices import choice_jobs
from duo.lead.openai.delivery import respond
from duo.lead.openai.logprobs import CompletionLogprobs, chat_logprobs
from duo.lead.openai.prompts import Prompts
from duo.lead.openai.reasoning import Format, opened_by
from duo.lead.openai.replies import ChatReply, CompletionReply, Reply, Shape
from duo.lead.openai.requests import CompletionRequest, Output
from duo.lead.protocol.openai import (
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    ModelEntry,
    Models,
)
from duo.lead.routes import Answer, Operation
from duo.lead.tools.calls import Tools

STREAMED = "the whole answer, or with `stream` server-sent events"


@dataclass(frozen=True)
class Prepared:
    """A completion or chat request made ready to run (Completions.prepare)."""

    jobs: list[Job]  # one per choice
    output: Output
    logprobs: bool  # whether the replies carry logprobs
    text: str = ""  # a chat's prompt, as its template rendered it
    tools: Tools | None = None  # the tools a chat's reply may call


class Completions:
    def __init__(self, lead: Lead, prompts: Prompts, reasoning_format: Format = "auto") -> None:
        self.lead = lead
        self.info = lead.info
        self.prompts = prompts
        self.reasoning_format = reasoning_format

    def operations(self) -> list[Operation]:
        """Their part of the route table (duo.lead.routes)."""
        return [
            Operation("GET", "/v1/models", "The served model", self.models, Answer(Models)),
            Operation(
                "POST",
                "/v1/completions",
                "A text completion",
                self.completions,
                Answer(Completion, STREAMED, chunk=Completion),
                body=CompletionRequest,
            ),
            Operation(
                "POST",
                "/v1/chat/completions",
                "A chat completion, through the model's own chat template",
                self.chat,
                Answer(ChatCompletion, STREAMED, chunk=ChatCompletionChunk),
                body=ChatRequest,
            ),
        ]

    async def models(self, request: Request) -> Response:
        model: ModelEntry = {
            "id": self.info.name,
            "object": "model",
            "created": 0,
            "owned_by": "duo",
            "meta": {"n_ctx": self.info.n_ctx, "n_vocab": self.info.n_vocab},
        }
        models: Models = {"object": "list", "data": [model]}
        return JSONResponse(models)

    async def completions(self, request: Request, body: CompletionRequest) -> Response:
        ready = await self.prepare(body)
        replies = [
            CompletionReply(
                i, CompletionLogprobs(self.lead.piece).shape if ready.logprobs else None
            )
            for i in range(ready.output.n)
        ]
        return await self._respond(request, ready, replies, "cmpl", "text_completion")

    async def chat(self, request: Request, body: ChatRequest) -> Response:
        ready = await self.prepare(body)
        shape = (lambda e: chat_logprobs(e, self.lead.piece)) if ready.logprobs else None
        replies = [self.chat_reply(body, ready, i, shape) for i in range(ready.output.n)]
        kind = "chat.completion.chunk" if ready.output.stream else "chat.completion"
        return await self._respond(request, ready, replies, "chatcmpl", kind)

    def chat_reply(
        self, body: ChatRequest, ready: Prepared, index: int = 0, shape: Shape | None = None
    ) -> ChatReply:
        """Choice `index` of a prepared chat: its thoughts apart from its answer as the request
        or the lead's --reasoning-format says, its tool calls parsed out."""
        reasoning = body.reasoning_format or self.reasoning_format
        reasoning = "deepseek" if reasoning == "auto" else reasoning
        return ChatReply(index, ready.tools, shape, reasoning, opened_by(ready.text))

    async def prepare_turn(
        self, chat: ChatRequest, texts: list[tuple[str, list[str]]], param: str
    ) -> tuple[Prepared, ChatReply]:
        """Another API's request, translated into `chat`, made ready as a chat is: `texts`
        (its fields that go into the prompt, by name) checked for size first, so that a
        fault names the field; then the one reply to read."""
        for field, field_texts in texts:
            self.prompts.check_size(field_texts, field)
        ready = await self.prepare(chat, param)
        return ready, self.chat_reply(chat, ready)

    async def prepare(
        self, body: CompletionRequest | ChatRequest, param: str = "messages"
    ) -> Prepared:
        """What a completion and a chat request both go through, in this order (the first
        fault is the one reported): the sampling and the grammar its response_format asks
        for; the prompt's tokens (a chat's messages and tools through the chat template, and
        the grammar of a forced tool call); then one job per choice. A chat prompt's faults
        are the `param` field's (another API's doors name their own)."""
        n_ctx, n_vocab = self.info.n_ctx, self.info.n_vocab
        sampling = body.sampling(n_ctx, n_vocab)
        sampling = await self.prompts.format_grammar(sampling, body.response_format)
        text, tools = "", None
        if isinstance(body, ChatRequest):
            text, tools = await self.prompts.chat(body)
            # Rendered, then tokenized: the size check comes between them.
            tokens = await self.prompts.tokenize(text, add_special=False, param=param)
            self.prompts.check_fits(tokens, param)
            if tools is not None and tools.forced:
                sampling = await self.prompts.tool_grammar(sampling, tools)
        else:
            prompt = body.text_or_tokens()
            if isinstance(prompt, str):
                tokens = await self.prompts.tokenize(prompt, add_special=True, param="prompt")
                self.prompts.check_fits(tokens, "prompt")
            else:  # the length first: a list longer than the context is not read through
                self.prompts.check_fits(prompt, "prompt")
                tokens = self.prompts.token_ids(prompt, "prompt")
        output = body.output()
        jobs = choice_jobs(tokens, body.max_new_tokens(n_ctx), body.stops(), sampling, output.n)
        return Prepared(jobs, output, sampling.logprobs is not None, text, tools)

    async def _respond(
        self, request: Request, ready: Prepared, replies: Sequence[Reply], prefix: str, kind: str
    ) -> Response:
        """Run the jobs and answer, whole or streamed, in an envelope of `kind` whose id
        starts with `prefix`."""
        meta = {
            "id": f"{prefix}-{uuid.uuid4().hex[:24]}",
            "object": kind,
            "created": int(time.time()),
            "model": self.info.name,
        }
        return await respond(self.lead, request, ready.jobs, meta, replies, ready.output)
