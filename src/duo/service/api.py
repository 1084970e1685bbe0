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

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from duo.channel import protocol
from duo.channel.endpoint import DrafterEndpoint
from duo.core.logprobs import TokenLogprob
from duo.core.sampling import SamplingParams
from duo.errors import AuthError, DuoError, GenerationFailed, PromptTooLong, UsageError
from duo.service.lead import Delta, Done, Failed, Job, Lead
from duo.service.metrics import Metrics
from duo.service.openai_format import (
    chat_messages,
    checked_text,
    duo_error_response,
    error_response,
    field,
    read_body,
    sampling_fields,
    sse,
    timings,
    usage,
)
from duo.service.openai_sampling import (
    CompletionLogprobs,
    chat_logprobs,
    grammar_text,
    sampling_extras,
)

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


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (call only once the body has been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


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

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health),
            Route("/metrics", _guarded(self.metrics)),
            Route("/v1/models", _guarded(self.models)),
            Route("/v1/completions", _guarded(self.completions), methods=["POST"]),
            Route("/v1/chat/completions", _guarded(self.chat), methods=["POST"]),
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
        return error_response(e.status_code, str(e.detail), kind=kind)

    async def _internal_error(self, request: Request, e: Exception) -> Response:
        return error_response(500, "internal server error", kind="server_error")

    def _authorize(self, request: Request) -> None:
        if not self.authorize(request.headers.get("authorization")):
            raise AuthError()

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
        body = await read_body(request, self.max_body)
        max_tokens, stops, sampling = sampling_fields(body, 16, self.info.n_ctx)
        sampling = await self._extras(body, sampling, chat=False)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            text = checked_text(prompt, "prompt")
            tokens = await self._tokenize(text, add_special=True, param="prompt")
        elif isinstance(prompt, list) and prompt:
            if len(prompt) >= self.info.n_ctx:  # before looking at every element
                self._check_fits(prompt, "prompt")
            n_vocab = self.info.n_vocab
            if not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab for t in prompt
            ):
                raise UsageError(
                    f"'prompt' token IDs must be integers in [0, {n_vocab})", param="prompt"
                )
            tokens = list(prompt)
        else:
            raise UsageError(
                "'prompt' must be a non-empty string or a list of token IDs", param="prompt"
            )
        job = self._job(tokens, max_tokens, stops, sampling, "prompt")
        meta = {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.info.name,
        }

        legacy = CompletionLogprobs(self.lead.piece) if sampling.logprobs is not None else None

        def choice(
            text: str, finish: str | None, entries: Sequence[TokenLogprob] = ()
        ) -> dict[str, Any]:
            logprobs = legacy.shape(entries) if legacy else None
            return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}

        if field(body, "stream", bool, False):
            return self._stream(
                job,
                lambda text, finish, entries=(): {
                    **meta,
                    "choices": [choice(text, finish, entries)],
                },
            )
        result = await self._collect(job, request)
        if result is None:
            return Response(status_code=499)  # nobody is there to read it
        text, done, entries = result
        return JSONResponse(
            {
                **meta,
                "choices": [choice(text, done.finish_reason, entries)],
                "usage": usage(done.stats),
                "timings": timings(done.stats),
            }
        )

    async def chat(self, request: Request) -> Response:
        self._authorize(request)
        body = await read_body(request, self.max_body)
        messages = chat_messages(body)
        max_tokens, stops, sampling = sampling_fields(body, self.info.n_ctx, self.info.n_ctx)
        sampling = await self._extras(body, sampling, chat=True)
        try:  # Jinja, pure Python: off the event loop too (it yields the GIL as it goes)
            text = await asyncio.to_thread(self.lead.render_chat, messages)
        except Exception as e:  # templates raise on what they refuse (roles out of order, ...)
            raise UsageError(
                f"the model's chat template refused the messages: {str(e)[:300]}",
                param="messages",
            ) from None
        # Rendered, then tokenized: the size check comes between them.
        tokens = await self._tokenize(text, add_special=False, param="messages")
        job = self._job(tokens, max_tokens, stops, sampling, "messages")
        meta = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": self.info.name,
        }

        def logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any] | None:
            return None if sampling.logprobs is None else chat_logprobs(entries, self.lead.piece)

        if field(body, "stream", bool, False):

            def chunk(
                text: str | None, finish: str | None, entries: Sequence[TokenLogprob] = ()
            ) -> dict[str, Any]:
                delta = {"role": "assistant", "content": ""} if text is None else {}
                if text:
                    delta["content"] = text
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                if entries:
                    choice["logprobs"] = logprobs(entries)
                return {**meta, "object": "chat.completion.chunk", "choices": [choice]}

            return self._stream(job, chunk, first=chunk(None, None))
        result = await self._collect(job, request)
        if result is None:
            return Response(status_code=499)  # nobody is there to read it
        text, done, entries = result
        message = {"role": "assistant", "content": text}
        return JSONResponse(
            {
                **meta,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": logprobs(entries),
                        "finish_reason": done.finish_reason,
                    }
                ],
                "usage": usage(done.stats),
                "timings": timings(done.stats),
            }
        )

    # -- helpers ------------------------------------------------------------------------

    async def _tokenize(self, text: str, *, add_special: bool, param: str) -> list[int]:
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
            return await asyncio.to_thread(self.lead.tokenize, text, add_special=add_special)
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

    def _check_fits(self, tokens: list[int], param: str) -> None:
        try:
            self.lead.check_fits(tokens)
        except PromptTooLong as e:
            raise PromptTooLong(str(e), param=param) from None
        except DuoError as e:
            raise UsageError(str(e), param=param) from None

    def _job(
        self,
        tokens: list[int],
        max_tokens: int,
        stops: list[str],
        sampling: SamplingParams,
        param: str,
    ) -> Job:
        self._check_fits(tokens, param)
        return Job(tokens, max_tokens, stops, sampling)

    async def _collect(
        self, job: Job, request: Request
    ) -> tuple[str, Done, list[TokenLogprob]] | None:
        """The whole text and the Done event; None if the client went away first.

        A client that goes away cancels its job, queued or running, as a stream's does:
        cancelling the task that reads Lead.events leaves the queue, or sets job.cancelled
        and waits for the engine to stop at the end of its round.
        """
        collecting = asyncio.ensure_future(self._events(job))
        watching = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait((collecting, watching), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (collecting, watching):
                task.cancel()
            await asyncio.gather(collecting, watching, return_exceptions=True)
        if collecting.cancelled():
            return None
        return collecting.result()

    async def _events(self, job: Job) -> tuple[str, Done, list[TokenLogprob]]:
        parts: list[str] = []
        entries: list[TokenLogprob] = []
        async for event in self.lead.events(job):
            if isinstance(event, Delta):
                parts.append(event.text)
                entries.extend(event.logprobs)
            elif isinstance(event, Done):
                return "".join(parts), event, entries
            elif isinstance(event, Failed):
                raise GenerationFailed(event.message)
        raise GenerationFailed("generation ended without a result")

    def _stream(
        self,
        job: Job,
        chunk: Callable[..., dict[str, Any]],
        first: dict[str, Any] | None = None,
    ) -> StreamingResponse:
        """SSE: one chunk per piece of text, a last chunk with finish_reason, usage and
        timings, then [DONE]. `chunk(text, finish_reason, logprob entries)` shapes a
        chunk."""

        async def events() -> AsyncIterator[bytes]:
            if first is not None:
                yield sse(first)
            async for event in self.lead.events(job):
                if isinstance(event, Delta):
                    yield sse(chunk(event.text, None, event.logprobs))
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
