"""The lead's HTTP API, in the conventions the `openai` SDK and llama.cpp's server use.

    POST /v1/chat/completions   chat, with the model's own chat template (SSE with stream)
    POST /v1/completions        plain text completion (SSE with stream)
    GET  /v1/models             the served model
    GET  /health                liveness, connected drafters, queue
    GET  /metrics               Prometheus text format
    WS   /v1/drafter            the drafter channel (duo.channel.protocol)
    POST /tokenize, /detokenize, /apply-template; GET /props, /slots
                                llama-server's extension endpoints (duo.lead.openai.extensions)
    POST /prefill, /verify; GET /stats
                                seed 003's verifier, for drafter-driven clients
                                (duo.lead.verifier.service)
    GET  /openapi.json          the OpenAPI document of all of these (duo.lead.openapi)

plus the web page's (duo.lead.web.page), which the composition root hands in. Each is an
entry of one route table (duo.lead.routes), which both the app's routes and the document
are made from.

A request's path: its body is read under the size limit and decoded into its typed request
(duo.lead.openai.body, the models in duo.lead.openai.requests and .chat), once; the handler
turns it into prompt tokens and the reply's grammar (duo.lead.openai.prompts), then jobs,
one per choice (duo.lead.openai.choices), and answers whole or streamed
(duo.lead.openai.delivery, in the shapes of duo.lead.openai.replies and .format).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.websockets import WebSocket

from duo.channel import protocol
from duo.channel.endpoint import DrafterEndpoint
from duo.errors import DuoError
from duo.lead.engine.events import Job
from duo.lead.engine.lead import Lead, Status
from duo.lead.engine.metrics import Metrics
from duo.lead.openai.chat import ChatRequest
from duo.lead.openai.choices import choice_jobs
from duo.lead.openai.delivery import respond
from duo.lead.openai.extensions import Extensions
from duo.lead.openai.format import duo_error_response, error_response
from duo.lead.openai.logprobs import CompletionLogprobs, chat_logprobs
from duo.lead.openai.prompts import Prompts
from duo.lead.openai.reasoning import Format, opened_by
from duo.lead.openai.replies import ChatReply, CompletionReply, Reply
from duo.lead.openai.requests import CompletionRequest, Output
from duo.lead.openapi import openapi_schema
from duo.lead.protocol.llama import Health, SlotState
from duo.lead.protocol.openai import ChatCompletion, ChatCompletionChunk, Completion, Model, Models
from duo.lead.routes import Answer, Operation, starlette_routes
from duo.lead.tools.calls import Tools
from duo.lead.verifier.service import Verifier

log = logging.getLogger(__name__)

STREAMED = "the whole answer, or with `stream` server-sent events"


@dataclass(frozen=True)
class Prepared:
    """A completion or chat request made ready to run (Api.prepare)."""

    jobs: list[Job]  # one per choice
    output: Output
    logprobs: bool  # whether the replies carry logprobs
    text: str = ""  # a chat's prompt, as its template rendered it
    tools: Tools | None = None  # the tools a chat's reply may call


class Api:
    def __init__(
        self,
        lead: Lead,
        metrics: Metrics,
        drafters: DrafterEndpoint,
        authorize: Callable[[str | None], bool],
        max_body: int,
        reasoning_format: Format = "auto",
    ) -> None:
        self.lead = lead
        self.info = lead.info
        self._metrics = metrics
        self.drafters = drafters
        self.authorize = authorize
        self.max_body = max_body
        self.reasoning_format = reasoning_format
        self.prompts = Prompts(lead)
        self.extensions = Extensions(lead, self.prompts)
        self.verifier = Verifier(lead, self.prompts)
        self._operations: list[Operation] = []  # what the app serves, for its document
        self._document: dict[str, Any] | None = None

    def app(self, more: Sequence[Operation] = (), cors_origins: Sequence[str] = ()) -> Starlette:
        """The app: the API's operations, and `more` (the web page's); browsers on pages of
        `cors_origins` ("*": any) may call it (CORS: preflights answered, the headers
        set). Credentials mode is never allowed: keys go in the Authorization header."""
        self._operations = [*self.operations(), *more]
        self._document = None
        routes = starlette_routes(self._operations, self.authorize, self.max_body)
        handlers = {
            DuoError: self._duo_error,
            HTTPException: self._http_error,
            Exception: self._internal_error,
        }
        cors = Middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            allow_credentials=False,
            max_age=600,
        )
        middleware = [cors] if cors_origins else []
        return Starlette(routes=routes, exception_handlers=handlers, middleware=middleware)

    def operations(self) -> list[Operation]:
        """The API's route table (duo.lead.routes), in the order the routes are tried."""
        health = Answer(Health)
        return [
            Operation(
                "GET",
                "/health",
                "Liveness, drafters and queue",
                self.health,
                health,
                auth=False,
                errors=(),
                more=(Answer(Health, "not ready (--rpc)", status="503"),),
            ),
            Operation(
                "GET",
                "/metrics",
                "Prometheus metrics",
                self.metrics,
                Answer(description="text format 0.0.4", media="text/plain"),
            ),
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
            *self.extensions.operations(),
            Operation(
                "GET",
                "/slots",
                "Each slot: busy or not, its cached tokens (llama-server)",
                self.slots,
                Answer(list[SlotState]),
            ),
            *self.verifier.operations(),
            Operation(
                "GET",
                "/openapi.json",
                "This document",
                self.openapi,
                Answer(description="OpenAPI 3.1", media="application/json"),
            ),
            Operation(
                "WEBSOCKET",
                protocol.PATH,
                "The drafter channel: a WebSocket (duo.channel.protocol), for `duo back`",
                self.drafter,
                Answer(description="switching to the WebSocket protocol", status="101"),
            ),
        ]

    # -- errors -----------------------------------------------------------------------

    async def _duo_error(self, request: Request, e: Exception) -> Response:
        assert isinstance(e, DuoError)
        return duo_error_response(e)

    async def _http_error(self, request: Request, e: Exception) -> Response:
        assert isinstance(e, HTTPException)
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        response = error_response(e.status_code, str(e.detail), kind=kind)
        response.headers.update(e.headers or {})  # a 405's Allow
        return response

    async def _internal_error(self, request: Request, e: Exception) -> Response:
        return error_response(500, "internal server error", kind="server_error")

    # -- endpoints ----------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse(health_body(self.lead.health()))

    async def slots(self, request: Request) -> Response:
        slots = [
            SlotState(
                id=s.id,
                n_ctx=s.n_ctx,
                speculative=s.speculative,
                is_processing=s.is_processing,
                n_cached=s.n_cached,
                n_prompt_tokens=s.n_prompt_tokens,
                n_decoded=s.n_decoded,
            )
            for s in self.lead.slots()
        ]
        return JSONResponse(slots)

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(self._metrics.render(), media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        model: Model = {
            "id": self.info.name,
            "object": "model",
            "created": 0,
            "owned_by": "duo",
            "meta": {"n_ctx": self.info.n_ctx, "n_vocab": self.info.n_vocab},
        }
        models: Models = {"object": "list", "data": [model]}
        return JSONResponse(models)

    async def openapi(self, request: Request) -> Response:
        if self._document is None:
            self._document = openapi_schema(self._operations)
        return JSONResponse(self._document)

    async def drafter(self, ws: WebSocket) -> None:
        await self.drafters.serve(ws)

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
        reasoning = body.reasoning_format or self.reasoning_format
        reasoning = "deepseek" if reasoning == "auto" else reasoning
        opened = opened_by(ready.text)
        replies = [
            ChatReply(i, ready.tools, shape, reasoning, opened) for i in range(ready.output.n)
        ]
        kind = "chat.completion.chunk" if ready.output.stream else "chat.completion"
        return await self._respond(request, ready, replies, "chatcmpl", kind)

    async def prepare(self, body: CompletionRequest | ChatRequest) -> Prepared:
        """What a completion and a chat request both go through, in this order (the first
        fault is the one reported): the sampling and the grammar its response_format asks
        for; the prompt's tokens (a chat's messages and tools through the chat template, and
        the grammar of a forced tool call); then one job per choice."""
        n_ctx, n_vocab = self.info.n_ctx, self.info.n_vocab
        sampling = body.sampling(n_ctx, n_vocab)
        sampling = await self.prompts.format_grammar(sampling, body.response_format)
        text, tools = "", None
        if isinstance(body, ChatRequest):
            text, tools = await self.prompts.chat(body)
            # Rendered, then tokenized: the size check comes between them.
            tokens = await self.prompts.tokenize(text, add_special=False, param="messages")
            self.prompts.check_fits(tokens, "messages")
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


def health_body(s: Status) -> Health:
    """GET /health's answer (also what the web page's feed reads)."""
    return {
        "status": "ok",
        "model": s.model,
        "drafters": s.drafters,
        "local_drafter": s.local_drafter,
        "busy": s.slots_busy > 0,
        "slots": s.slots,
        "slots_busy": s.slots_busy,
        "queued": s.queued,
        "time": s.time,
    }
