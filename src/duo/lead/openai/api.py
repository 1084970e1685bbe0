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
    GET  /openapi.json          the OpenAPI document of all of these (duo.lead.openai.openapi)

plus the routes of the web page (duo.lead.web.page), which the composition root hands in.

A request's path: its body is read under the size limit and decoded into its typed request
(duo.lead.openai.body, the models in duo.lead.openai.requests and .chat), once; the handler
turns it into prompt tokens and the reply's grammar (duo.lead.openai.prompts), then jobs,
one per choice (duo.lead.openai.choices), and answers whole or streamed
(duo.lead.openai.delivery, in the shapes of duo.lead.openai.replies and .format).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from duo.channel import protocol
from duo.channel.endpoint import DrafterEndpoint
from duo.errors import AuthError, DuoError
from duo.lead.engine.lead import Lead
from duo.lead.engine.metrics import Metrics
from duo.lead.openai.body import decode, read_body
from duo.lead.openai.chat import ChatRequest
from duo.lead.openai.choices import choice_jobs
from duo.lead.openai.delivery import respond
from duo.lead.openai.extensions import Extensions
from duo.lead.openai.format import duo_error_response, error_response
from duo.lead.openai.logprobs import CompletionLogprobs, chat_logprobs
from duo.lead.openai.openapi import openapi_schema
from duo.lead.openai.prompts import Prompts
from duo.lead.openai.reasoning import Format, opened_by
from duo.lead.openai.replies import ChatReply, CompletionReply
from duo.lead.openai.requests import CompletionRequest, DetokenizeRequest, TokenizeRequest
from duo.lead.openai.responses import Model, Models
from duo.lead.verifier.requests import PrefillRequest, VerifyRequest
from duo.lead.verifier.service import Verifier

log = logging.getLogger(__name__)

R = TypeVar("R", bound=msgspec.Struct)
Endpoint = Callable[[Request], Awaitable[Response]]
Handler = Callable[[Request, R], Awaitable[Response]]  # a request and its decoded body


def _guarded(endpoint: Endpoint) -> Endpoint:
    """An unexpected exception becomes a 500 JSON answer here, on a connection that stays
    open: past Starlette's ServerErrorMiddleware, uvicorn would drop the connection."""

    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except (DuoError, HTTPException):
            raise
        except ClientDisconnect:  # gone while sending the body
            return Response(status_code=499)  # nobody is there to read it
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(500, "internal server error", kind="server_error")

    return guarded


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
        self.bodies: dict[str, type[msgspec.Struct]] = {}  # path -> its request's type
        self._document: dict[str, Any] | None = None

    def app(self, more: Sequence[BaseRoute] = (), cors_origins: Sequence[str] = ()) -> Starlette:
        """The app: the API's routes, and `more` (the web page's); browsers on pages of
        `cors_origins` ("*": any) may call it (CORS: preflights answered, the headers
        set). Credentials mode is never allowed: keys go in the Authorization header."""
        ext = self.extensions
        routes = [
            Route("/health", self.health),
            self._get("/metrics", self.metrics),
            self._get("/v1/models", self.models),
            self._post("/v1/completions", CompletionRequest, self.completions),
            self._post("/v1/chat/completions", ChatRequest, self.chat),
            self._post("/tokenize", TokenizeRequest, ext.tokenize),
            self._post("/detokenize", DetokenizeRequest, ext.detokenize),
            self._post("/apply-template", ChatRequest, ext.apply_template),
            self._get("/props", ext.props),
            self._get("/slots", self.slots),
            *self._verifier_routes(),
            self._get("/openapi.json", self.openapi),
            WebSocketRoute(protocol.PATH, self.drafter),
            *more,
        ]
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

    def _verifier_routes(self) -> list[BaseRoute]:
        """Seed 003's paths, with and without its trailing slash."""
        v = self.verifier
        return [
            *(self._post(f"/prefill{end}", PrefillRequest, v.prefill) for end in ("", "/")),
            *(self._post(f"/verify{end}", VerifyRequest, v.verify) for end in ("", "/")),
            self._get("/stats", v.stats),
        ]

    def _get(self, path: str, endpoint: Endpoint) -> Route:
        async def authorized(request: Request) -> Response:
            self.authorize_request(request)
            return await endpoint(request)

        return Route(path, _guarded(authorized))

    def _post(self, path: str, kind: type[R], handler: Handler[R]) -> Route:
        """A route whose handler takes the body decoded as a `kind`."""
        self.bodies[path] = kind

        async def decoded(request: Request) -> Response:
            self.authorize_request(request)
            body = decode(await read_body(request, self.max_body), kind)
            return await handler(request, body)

        return Route(path, _guarded(decoded), methods=["POST"])

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

    def authorize_request(self, request: Request) -> None:
        if not self.authorize(request.headers.get("authorization")):
            raise AuthError()

    # -- endpoints ----------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse(self.lead.health())

    async def slots(self, request: Request) -> Response:
        return JSONResponse(self.lead.slots())

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
            self._document = openapi_schema(self.bodies)
        return JSONResponse(self._document)

    async def drafter(self, ws: WebSocket) -> None:
        await self.drafters.serve(ws)

    async def completions(self, request: Request, body: CompletionRequest) -> Response:
        n_ctx, n_vocab = self.info.n_ctx, self.info.n_vocab
        sampling = body.sampling(n_ctx, n_vocab)
        sampling = await self.prompts.format_grammar(sampling, body.response_format)
        prompt = body.text_or_tokens()
        if isinstance(prompt, str):
            tokens = await self.prompts.tokenize(prompt, add_special=True, param="prompt")
            self.prompts.check_fits(tokens, "prompt")
        else:  # the length first: a list longer than the context is not read through
            self.prompts.check_fits(prompt, "prompt")
            tokens = self.prompts.token_ids(prompt, "prompt")
        output = body.output()
        jobs = choice_jobs(tokens, body.max_new_tokens(n_ctx), body.stops(), sampling, output.n)
        meta = {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.info.name,
        }
        wanted = sampling.logprobs is not None
        replies = [
            CompletionReply(i, CompletionLogprobs(self.lead.piece).shape if wanted else None)
            for i in range(output.n)
        ]
        return await respond(self.lead, request, jobs, meta, replies, output)

    async def chat(self, request: Request, body: ChatRequest) -> Response:
        n_ctx, n_vocab = self.info.n_ctx, self.info.n_vocab
        sampling = body.sampling(n_ctx, n_vocab)
        sampling = await self.prompts.format_grammar(sampling, body.response_format)
        text, tools = await self.prompts.chat(body)
        # Rendered, then tokenized: the size check comes between them.
        tokens = await self.prompts.tokenize(text, add_special=False, param="messages")
        self.prompts.check_fits(tokens, "messages")
        if tools is not None and tools.forced:
            sampling = await self.prompts.tool_grammar(sampling, tools)
        output = body.output()
        jobs = choice_jobs(tokens, body.max_new_tokens(n_ctx), body.stops(), sampling, output.n)
        meta = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk" if output.stream else "chat.completion",
            "created": int(time.time()),
            "model": self.info.name,
        }
        wanted = sampling.logprobs is not None
        shape = (lambda e: chat_logprobs(e, self.lead.piece)) if wanted else None
        reasoning = body.reasoning_format or self.reasoning_format
        reasoning = "deepseek" if reasoning == "auto" else reasoning
        opened = opened_by(text)
        replies = [ChatReply(i, tools, shape, reasoning, opened) for i in range(output.n)]
        return await respond(self.lead, request, jobs, meta, replies, output)
