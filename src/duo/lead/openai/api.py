"""The lead's HTTP API, in the conventions the `openai` SDK and llama.cpp's server use.

    POST /v1/chat/completions   chat, with the model's own chat template (SSE with stream)
    POST /v1/completions        plain text completion (SSE with stream)
    GET  /v1/models             the served model
    GET  /health                liveness, connected drafters, queue
    GET  /metrics               Prometheus text format
    WS   /v1/drafter            the drafter channel (duo.channel.protocol)
    POST /tokenize, /detokenize, /apply-template; GET /props
                                llama-server's extension endpoints (duo.lead.openai.extensions)
    GET  /openapi.json          the OpenAPI 3 description of all of these (duo.lead.openai.openapi)

Request parsing and response shapes live in duo.lead.openai.format and
duo.lead.openai.replies; `n` choices in duo.lead.openai.choices; tools in duo.lead.tools.calls;
answering, whole or streamed, in duo.lead.openai.delivery.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from duo.channel import protocol
from duo.channel.endpoint import DrafterEndpoint
from duo.core.sampling import SamplingParams
from duo.errors import AuthError, DuoError, PromptTooLong, UsageError
from duo.lead.engine.lead import Lead
from duo.lead.engine.metrics import Metrics
from duo.lead.openai.choices import MAX_CHOICES, choice_jobs
from duo.lead.openai.delivery import respond
from duo.lead.openai.extensions import Extensions
from duo.lead.openai.format import (
    chat_messages,
    checked_text,
    duo_error_response,
    error_response,
    output_fields,
    read_body,
    sampling_fields,
)
from duo.lead.openai.openapi import openapi_schema
from duo.lead.openai.replies import ChatReply, CompletionReply
from duo.lead.openai.sampling import (
    CompletionLogprobs,
    chat_logprobs,
    grammar_text,
    sampling_extras,
)
from duo.lead.tools.calls import TemplateCaps, Tools, template_caps, template_messages, tool_fields
from duo.lead.tools.grammar import tool_call_gbnf

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


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
    ) -> None:
        self.lead = lead
        self.info = lead.info
        self._metrics = metrics
        self.drafters = drafters
        self.authorize = authorize
        self.max_body = max_body
        n_ctx = lead.info.n_ctx
        longest = lead.longest_token_bytes()
        # A prompt of more bytes than this cannot fit, whatever its tokens (see above).
        self.max_prompt_bytes = None if longest is None else (n_ctx - 1) * longest
        self._caps: TemplateCaps | None = None

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health),
            Route("/metrics", _guarded(self.metrics)),
            Route("/v1/models", _guarded(self.models)),
            Route("/v1/completions", _guarded(self.completions), methods=["POST"]),
            Route("/v1/chat/completions", _guarded(self.chat), methods=["POST"]),
            *[
                Route(path, _guarded(endpoint), methods=[method])
                for method, path, endpoint in Extensions(self).endpoints()
            ],
            Route("/openapi.json", _guarded(self.openapi)),
            WebSocketRoute(protocol.PATH, self.drafter),
        ]
        handlers = {
            DuoError: self._duo_error,
            HTTPException: self._http_error,
            Exception: self._internal_error,
        }
        return Starlette(routes=routes, exception_handlers=handlers)

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

    async def metrics(self, request: Request) -> Response:
        self.authorize_request(request)
        return PlainTextResponse(self._metrics.render(), media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        self.authorize_request(request)
        model = {
            "id": self.info.name,
            "object": "model",
            "created": 0,
            "owned_by": "duo",
            "meta": {"n_ctx": self.info.n_ctx, "n_vocab": self.info.n_vocab},
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def openapi(self, request: Request) -> Response:
        self.authorize_request(request)
        return JSONResponse(openapi_schema())

    async def drafter(self, ws: WebSocket) -> None:
        await self.drafters.serve(ws)

    async def completions(self, request: Request) -> Response:
        self.authorize_request(request)
        body = await read_body(request, self.max_body)
        max_tokens, stops, sampling = sampling_fields(body, 16, self.info.n_ctx)
        output = output_fields(body, MAX_CHOICES)
        sampling = await self._extras(body, sampling, chat=False)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            text = checked_text(prompt, "prompt")
            tokens = await self.tokenize(text, add_special=True, param="prompt")
        elif isinstance(prompt, list) and prompt:
            tokens = self.token_ids(prompt, "prompt")
        else:
            raise UsageError(
                "'prompt' must be a non-empty string or a list of token IDs", param="prompt"
            )
        self._check_fits(tokens, "prompt")
        jobs = choice_jobs(tokens, max_tokens, stops, sampling, output.n)
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

    async def chat(self, request: Request) -> Response:
        self.authorize_request(request)
        body = await read_body(request, self.max_body)
        max_tokens, stops, sampling = sampling_fields(body, self.info.n_ctx, self.info.n_ctx)
        output = output_fields(body, MAX_CHOICES)
        sampling = await self._extras(body, sampling, chat=True)
        text, tools = await self.chat_prompt(body)
        # Rendered, then tokenized: the size check comes between them.
        tokens = await self.tokenize(text, add_special=False, param="messages")
        self._check_fits(tokens, "messages")
        if tools is not None and tools.forced:
            sampling = await self._tool_grammar(sampling, tools)
        jobs = choice_jobs(tokens, max_tokens, stops, sampling, output.n)
        meta = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk" if output.stream else "chat.completion",
            "created": int(time.time()),
            "model": self.info.name,
        }
        wanted = sampling.logprobs is not None
        shape = (lambda e: chat_logprobs(e, self.lead.piece)) if wanted else None
        replies = [ChatReply(i, tools, shape) for i in range(output.n)]
        return await respond(self.lead, request, jobs, meta, replies, output)

    # -- chat prompts -------------------------------------------------------------------

    async def chat_prompt(self, body: dict[str, Any]) -> tuple[str, Tools | None]:
        """The prompt text of a chat request (its messages and tools through the model's
        own chat template), and the tools the reply may call."""
        messages = chat_messages(body)
        tools = tool_fields(body)
        caps = await self.template_caps()
        if tools is not None and not caps.supports_tools:
            raise UsageError(
                f"the chat template of {self.info.name} cannot show tools to the model, so it "
                "could not call them; give the lead a template that does "
                "(--chat-template-file)",
                param="tools",
            )
        if any("tool_calls" in m for m in messages) and not caps.supports_tool_calls:
            raise UsageError(
                f"the chat template of {self.info.name} cannot show earlier tool calls",
                param="messages",
            )
        messages = template_messages(messages, caps.object_arguments)
        shown = tools.shown() if tools is not None else None
        try:  # Jinja, pure Python: off the event loop too (it yields the GIL as it goes)
            text = await asyncio.to_thread(self.lead.render_chat, messages, shown)
        except Exception as e:  # templates raise on what they refuse (roles out of order, ...)
            raise UsageError(
                f"the model's chat template refused the messages: {str(e)[:300]}",
                param="messages",
            ) from None
        return text, tools

    async def template_caps(self) -> TemplateCaps:
        """What the main model's chat template can express, probed on first use."""
        if self._caps is None:
            self._caps = await asyncio.to_thread(template_caps, self.lead.render_chat)
        return self._caps

    # -- helpers ------------------------------------------------------------------------

    async def tokenize(
        self, text: str, *, add_special: bool, param: str, parse_special: bool = True
    ) -> list[int]:
        """Tokenize on a worker thread, after a size check that needs no tokens.

        Off the event loop, a long prompt does not hold up /health, the streams and the
        drafter channel; ctypes lets go of the GIL inside llama_tokenize. That may run
        while the engine thread decodes on the same model: llama_tokenize only reads the
        vocabulary (llama_vocab::impl::tokenize is const, its working state lives in a
        per-call session), which llama.cpp never changes after loading, and the context it
        decodes in is not touched.
        """
        data = text.encode("utf-8", "surrogatepass")
        if self.max_prompt_bytes is not None and len(data) > self.max_prompt_bytes:
            raise PromptTooLong(
                f"the prompt is {len(data)} bytes, more than any {self.info.n_ctx}-token "
                f"context can hold ({self.max_prompt_bytes} bytes)",
                param=param,
            )
        try:
            return await asyncio.to_thread(
                self.lead.tokenize, text, add_special=add_special, parse_special=parse_special
            )
        except UnicodeEncodeError:  # a lone surrogate the checks did not see
            raise UsageError("the prompt is not valid text", param=param) from None

    async def _extras(
        self, body: dict[str, Any], sampling: SamplingParams, *, chat: bool
    ) -> SamplingParams:
        """Logprobs, logit bias, penalties and the response_format's grammar, checked.

        A JSON schema is converted to a grammar and the grammar parsed off the event loop,
        as prompts are tokenized: a large schema does not hold up the other requests."""
        sampling = sampling_extras(body, sampling, self.info.n_vocab, chat=chat)
        if body.get("response_format") is None:
            return sampling
        try:
            gbnf = await asyncio.to_thread(grammar_text, body)
            if gbnf is not None:
                await asyncio.to_thread(self.lead.check_grammar, gbnf)
        except UsageError as e:
            raise UsageError(str(e), param="response_format") from None
        return sampling if gbnf is None else replace(sampling, grammar=gbnf)

    async def _tool_grammar(self, sampling: SamplingParams, tools: Tools) -> SamplingParams:
        """`sampling` with the grammar that holds the reply to a call to one of the tools
        (tool_choice "required" or a named function), built and parsed off the event loop."""
        if sampling.grammar is not None:
            raise UsageError(
                "'response_format' cannot be combined with tool_choice 'required' or a "
                "named function: the reply is a tool call",
                param="response_format",
            )
        tags = (await self.template_caps()).tool_call_tags
        try:
            gbnf = await asyncio.to_thread(tool_call_gbnf, tools.shown(), tags)
            await asyncio.to_thread(self.lead.check_grammar, gbnf)
        except UsageError as e:
            raise UsageError(str(e), param="tools") from None
        return replace(sampling, grammar=gbnf)

    def _check_fits(self, tokens: list[int], param: str) -> None:
        try:
            self.lead.check_fits(tokens)
        except PromptTooLong as e:
            raise PromptTooLong(str(e), param=param) from None
        except DuoError as e:
            raise UsageError(str(e), param=param) from None

    def token_ids(self, tokens: list[Any], param: str) -> list[int]:
        """A list of token IDs from a request, each checked against the vocabulary."""
        if len(tokens) >= self.info.n_ctx:  # before looking at every element
            self._check_fits(tokens, param)
        n_vocab = self.info.n_vocab
        if not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab for t in tokens
        ):
            raise UsageError(f"'{param}' token IDs must be integers in [0, {n_vocab})", param=param)
        return list(tokens)
