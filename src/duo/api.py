"""The lead's HTTP API, in the conventions the `openai` SDK and llama.cpp's server use.

    POST /v1/chat/completions   chat, with the model's own chat template (SSE with stream)
    POST /v1/completions        plain text completion (SSE with stream)
    GET  /v1/models             the served model
    GET  /health                liveness, connected drafters, queue
    GET  /metrics               Prometheus text format
    WS   /v1/drafter            the drafter channel (duo.protocol)

Every error is an OpenAI-style JSON body: {"error": {"message", "type", "param", "code"}}.
"""

from __future__ import annotations

import json
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

from duo import protocol
from duo.errors import DuoError, PromptTooLong
from duo.lead import Delta, Done, Failed, Job, Lead
from duo.sampling import SamplingParams
from duo.stats import Stats


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (
            status,
            message,
            param,
            code,
            kind,
        )


def error_response(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


# -- request parsing ----------------------------------------------------------------------


async def read_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ApiError(400, f"'{name}' must be a number", param=name)
    if not isinstance(value, kind):
        raise ApiError(400, f"'{name}' has the wrong type", param=name)
    return value


def sampling_fields(
    body: dict[str, Any], default_max: int, n_ctx: int
) -> tuple[int, list[str], SamplingParams]:
    """max_tokens, stop strings and sampler settings (llama.cpp server names and defaults)."""
    max_tokens = field(body, "max_completion_tokens", int, None)
    if max_tokens is None:
        max_tokens = field(body, "max_tokens", int, default_max)
    if max_tokens <= 0:
        raise ApiError(400, "'max_tokens' must be at least 1", param="max_tokens")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")
    if len(stops) > 4:
        raise ApiError(400, "'stop' may hold at most 4 sequences", param="stop")
    if field(body, "n", int, 1) != 1:
        raise ApiError(400, "only n=1 is supported", param="n")
    d = SamplingParams()
    number = (int, float)
    params = SamplingParams(
        temperature=float(field(body, "temperature", number, d.temperature)),
        top_k=field(body, "top_k", int, d.top_k),
        top_p=float(field(body, "top_p", number, d.top_p)),
        min_p=float(field(body, "min_p", number, d.min_p)),
        repeat_penalty=float(field(body, "repeat_penalty", number, d.repeat_penalty)),
        repeat_last_n=field(body, "repeat_last_n", int, d.repeat_last_n),
        seed=field(body, "seed", int, None),
    )
    try:
        params.check()
    except DuoError as e:
        raise ApiError(400, str(e)) from None
    return min(max_tokens, n_ctx), stops, params


def chat_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] needs a 'role'", param="messages")
        content = m.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            parts = [
                p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"
            ]
            if len(parts) != len(content) or not all(isinstance(t, str) for t in parts):
                raise ApiError(
                    400, f"messages[{i}]: only text content is supported", param="messages"
                )
            content = "".join(parts)  # type: ignore[arg-type]
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}] needs a string 'content'", param="messages")
        out.append({"role": m["role"], "content": content})
    return out


# -- responses ----------------------------------------------------------------------------


def usage(s: Stats) -> dict[str, int]:
    return {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.tokens,
        "total_tokens": s.prompt_tokens + s.tokens,
    }


def timings(s: Stats) -> dict[str, float]:
    """llama.cpp server's `timings`, plus the speculation figures."""
    return {
        "prompt_n": s.prompt_tokens,
        "prompt_ms": 1000 * s.prefill_seconds,
        "predicted_n": s.tokens,
        "predicted_ms": 1000 * s.decode_seconds,
        "predicted_per_second": s.tokens_per_second,
        "main_decode_ms": 1000 * s.llama_seconds,
        "overhead_ms_per_round": s.overhead_ms_per_round,
        "draft_n": s.drafted,
        "draft_n_accepted": s.accepted,
        "acceptance_rate": s.acceptance_rate,
        "mean_acceptance_length": s.mean_acceptance_length,
        "rounds": s.rounds,
    }


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


class Api:
    def __init__(self, lead: Lead) -> None:
        self.lead = lead

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
        key = self.lead.config.api_key
        if key is not None and request.headers.get("authorization") != f"Bearer {key}":
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
        text = self.lead.metrics.render(
            self.lead.hub.wire, self.lead.hub.connected, self.lead.local is not None
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        model = {
            "id": self.lead.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "duo",
            "meta": {"n_ctx": self.lead.main.n_ctx, "n_vocab": self.lead.main.n_vocab},
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def drafter(self, ws: WebSocket) -> None:
        await self.lead.hub.serve(ws)

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
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.lead.main.n_vocab
                for t in prompt
            )
        ):
            tokens = list(prompt)
        else:
            raise ApiError(
                400, "'prompt' must be a non-empty string or a list of token IDs", param="prompt"
            )
        max_tokens, stops, sampling = sampling_fields(body, 16, self.lead.main.n_ctx)
        job = self._job(tokens, max_tokens, stops, sampling)
        meta = {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.lead.model_name,
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
        max_tokens, stops, sampling = sampling_fields(
            body, self.lead.main.n_ctx, self.lead.main.n_ctx
        )
        job = self._job(tokens, max_tokens, stops, sampling)
        meta = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": self.lead.model_name,
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
