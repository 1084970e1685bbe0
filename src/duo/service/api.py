"""The lead's HTTP API, in the conventions the `openai` SDK and llama.cpp's server use.

    POST /v1/chat/completions   chat, with the model's own chat template (SSE with stream)
    POST /v1/completions        plain text completion (SSE with stream)
    GET  /v1/models             the served model
    GET  /health                liveness, connected drafters, queue
    GET  /metrics               Prometheus text format
    WS   /v1/drafter            the drafter channel (duo.protocol)

Request parsing and response shapes live in duo.openai_format.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from duo.channel import protocol
from duo.channel.endpoint import DrafterEndpoint
from duo.core.sampling import SamplingParams
from duo.errors import DuoError, PromptTooLong
from duo.service.lead import Delta, Done, Failed, Job, Lead
from duo.service.metrics import Metrics
from duo.service.openai_format import (
    ApiError,
    chat_messages,
    error_response,
    field,
    read_body,
    sampling_fields,
    sse,
    timings,
    usage,
)


class Api:
    def __init__(
        self,
        lead: Lead,
        metrics: Metrics,
        drafters: DrafterEndpoint,
        authorize: Callable[[str | None], bool],
    ) -> None:
        self.lead = lead
        self.info = lead.info
        self._metrics = metrics
        self.drafters = drafters
        self.authorize = authorize

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health),
            Route("/metrics", self.metrics),
            Route("/v1/models", self.models),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            WebSocketRoute(protocol.PATH, self.drafter),
        ]
        handlers = {
            ApiError: self._api_error,
            HTTPException: self._http_error,
            Exception: self._internal_error,
        }
        return Starlette(routes=routes, exception_handlers=handlers)

    # -- errors -----------------------------------------------------------------------

    async def _api_error(self, request: Request, e: Exception) -> Response:
        assert isinstance(e, ApiError)
        return error_response(e.status, e.message, kind=e.kind, param=e.param, code=e.code)

    async def _http_error(self, request: Request, e: Exception) -> Response:
        assert isinstance(e, HTTPException)
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return error_response(e.status_code, str(e.detail), kind=kind)

    async def _internal_error(self, request: Request, e: Exception) -> Response:
        return error_response(500, "internal server error", kind="server_error")

    def _authorize(self, request: Request) -> None:
        if not self.authorize(request.headers.get("authorization")):
            raise ApiError(
                401,
                "invalid or missing API key",
                kind="authentication_error",
                code="invalid_api_key",
            )

    # -- endpoints ----------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse(self.lead.health())

    async def metrics(self, request: Request) -> Response:
        self._authorize(request)
        return PlainTextResponse(self._metrics.render(), media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        model = {
            "id": self.info.name,
            "object": "model",
            "created": 0,
            "owned_by": "duo",
            "meta": {"n_ctx": self.info.n_ctx, "n_vocab": self.info.n_vocab},
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def drafter(self, ws: WebSocket) -> None:
        await self.drafters.serve(ws)

    async def completions(self, request: Request) -> Response:
        self._authorize(request)
        body = await read_body(request)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            tokens = self.lead.tokenize(prompt)
        elif (
            isinstance(prompt, list)
            and prompt
            and all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.info.n_vocab
                for t in prompt
            )
        ):
            tokens = list(prompt)
        else:
            raise ApiError(
                400, "'prompt' must be a non-empty string or a list of token IDs", param="prompt"
            )
        max_tokens, stops, sampling = sampling_fields(body, 16, self.info.n_ctx)
        job = self._job(tokens, max_tokens, stops, sampling)
        meta = {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.info.name,
        }

        def choice(text: str, finish: str | None) -> dict[str, Any]:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

        if field(body, "stream", bool, False):
            return self._stream(
                job, lambda text, finish: {**meta, "choices": [choice(text, finish)]}
            )
        text, done = await self._collect(job)
        return JSONResponse(
            {
                **meta,
                "choices": [choice(text, done.finish_reason)],
                "usage": usage(done.stats),
                "timings": timings(done.stats),
            }
        )

    async def chat(self, request: Request) -> Response:
        self._authorize(request)
        body = await read_body(request)
        messages = chat_messages(body)
        tokens = self.lead.tokenize_chat(messages)
        max_tokens, stops, sampling = sampling_fields(body, self.info.n_ctx, self.info.n_ctx)
        job = self._job(tokens, max_tokens, stops, sampling)
        meta = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": self.info.name,
        }

        if field(body, "stream", bool, False):

            def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
                delta = {"role": "assistant", "content": ""} if text is None else {}
                if text:
                    delta["content"] = text
                return {
                    **meta,
                    "object": "chat.completion.chunk",
                    "choices": [
                        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                    ],
                }

            return self._stream(job, chunk, first=chunk(None, None))
        text, done = await self._collect(job)
        message = {"role": "assistant", "content": text}
        return JSONResponse(
            {
                **meta,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": done.finish_reason,
                    }
                ],
                "usage": usage(done.stats),
                "timings": timings(done.stats),
            }
        )

    # -- helpers ------------------------------------------------------------------------

    def _job(
        self, tokens: list[int], max_tokens: int, stops: list[str], sampling: SamplingParams
    ) -> Job:
        try:
            self.lead.check_fits(tokens)
        except PromptTooLong as e:
            raise ApiError(400, str(e), param="messages", code="context_length_exceeded") from None
        except DuoError as e:
            raise ApiError(400, str(e)) from None
        return Job(tokens, max_tokens, stops, sampling)

    async def _collect(self, job: Job) -> tuple[str, Done]:
        parts: list[str] = []
        async for event in self.lead.events(job):
            if isinstance(event, Delta):
                parts.append(event.text)
            elif isinstance(event, Done):
                return "".join(parts), event
            elif isinstance(event, Failed):
                raise ApiError(500, event.message, kind="server_error")
        raise ApiError(500, "generation ended without a result", kind="server_error")

    def _stream(
        self,
        job: Job,
        chunk: Callable[[str, str | None], dict[str, Any]],
        first: dict[str, Any] | None = None,
    ) -> StreamingResponse:
        """SSE: one chunk per piece of text, a last chunk with finish_reason, usage and
        timings, then [DONE]. `chunk(text, finish_reason)` shapes a chunk."""

        async def events() -> AsyncIterator[bytes]:
            if first is not None:
                yield sse(first)
            async for event in self.lead.events(job):
                if isinstance(event, Delta):
                    yield sse(chunk(event.text, None))
                elif isinstance(event, Done):
                    stats = event.stats
                    last = chunk("", event.finish_reason)
                    yield sse({**last, "usage": usage(stats), "timings": timings(stats)})
                else:
                    yield sse({"error": {"message": event.message, "type": "server_error"}})
            yield sse("[DONE]")

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
