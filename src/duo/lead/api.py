"""The lead's HTTP API, in the conventions the `openai` SDK and llama.cpp's server use: its
parts' operations in one route table (duo.lead.routes), served as one Starlette app and
described by one OpenAPI document (duo.lead.openapi).

    POST /v1/chat/completions, /v1/completions; GET /v1/models
                                the OpenAI endpoints (duo.lead.openai.completions)
    POST /v1/responses          OpenAI's Responses API (duo.lead.responses.routes)
    POST /v1/messages, /v1/messages/count_tokens
                                Anthropic's Messages API (duo.lead.anthropic.messages)
    POST /completion, /completions, /infill
                                llama.cpp's native endpoints (duo.lead.native.routes)
    POST /tokenize, /detokenize, /apply-template; GET /props
                                llama-server's extension endpoints (duo.lead.openai.extensions)
    POST /prefill, /verify; GET /stats
                                seed 003's verifier, for drafter-driven clients
                                (duo.lead.verifier.service)
    GET  /health                liveness, connected drafters, queue
    GET  /metrics               Prometheus text format
    GET  /slots                 each slot's state (llama-server's)
    GET  /openapi.json          the OpenAPI document of all of these
    WS   /v1/drafter            the drafter channel (duo.channel.protocol)

plus the web page's (duo.lead.web.page), which the composition root hands in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.websockets import WebSocket

from duo.channel import protocol
from duo.channel.endpoint import DrafterEndpoint
from duo.errors import DuoError, http_status
from duo.lead.anthropic.messages import Messages
from duo.lead.engine.lead import Lead, Slot, Status
from duo.lead.engine.metrics import Metrics
from duo.lead.format import duo_error_response, error_response
from duo.lead.native.routes import Native
from duo.lead.openai.completions import Completions
from duo.lead.openai.extensions import Extensions
from duo.lead.openai.prompts import Prompts
from duo.lead.openai.reasoning import Format
from duo.lead.openapi import openapi_schema
from duo.lead.protocol.llama import DrafterState, Health, SlotState
from duo.lead.responses.routes import Responses
from duo.lead.routes import Answer, Dialect, Operation, starlette_routes
from duo.lead.verifier.service import Verifier


class Api:
    def __init__(
        self,
        lead: Lead,
        metrics: Metrics,
        drafters: DrafterEndpoint,
        authorize: Callable[[str | None], bool],
        max_body: int,
        reasoning_format: Format = "auto",
        spm_infill: bool = False,
    ) -> None:
        self.lead = lead
        self.info = lead.info
        self._metrics = metrics
        self.drafters = drafters
        self.authorize = authorize
        self.max_body = max_body
        self.prompts = Prompts(lead)
        self.completions = Completions(lead, self.prompts, reasoning_format)
        self.extensions = Extensions(lead, self.prompts)
        self.responses = Responses(self.completions)
        self.messages = Messages(self.completions)
        self.native = Native(lead, self.prompts, spm_infill)
        self.verifier = Verifier(lead, self.prompts)
        self._operations: list[Operation] = []  # what the app serves, for its document
        self._dialects: dict[str, Dialect] = {}  # paths whose errors have their own shape
        self._document: dict[str, Any] | None = None

    def app(self, more: Sequence[Operation] = (), cors_origins: Sequence[str] = ()) -> Starlette:
        """The app: the API's operations, and `more` (the web page's); browsers on pages of
        `cors_origins` ("*": any) may call it (CORS: preflights answered, the headers
        set). Credentials mode is never allowed: keys go in the Authorization header."""
        self._operations = [*self.operations(), *more]
        self._dialects = {op.path: op.dialect for op in self._operations if op.dialect}
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
            allow_headers=["Authorization", "Content-Type", "X-Api-Key", "Anthropic-Version"],
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
            *self.completions.operations(),
            *self.responses.operations(),
            *self.messages.operations(),
            *self.native.operations(),
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

    # Each in OpenAI's shape, or in that of the API the path belongs to (Anthropic's).

    async def _duo_error(self, request: Request, e: Exception) -> Response:
        assert isinstance(e, DuoError)
        dialect = self._dialects.get(request.url.path)
        return duo_error_response(e) if dialect is None else dialect.respond(*_status(e))

    async def _http_error(self, request: Request, e: Exception) -> Response:
        assert isinstance(e, HTTPException)
        dialect = self._dialects.get(request.url.path)
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        response = (
            error_response(e.status_code, str(e.detail), kind=kind)
            if dialect is None
            else dialect.respond(e.status_code, str(e.detail))
        )
        response.headers.update(e.headers or {})  # a 405's Allow
        return response

    async def _internal_error(self, request: Request, e: Exception) -> Response:
        return await self._duo_error(request, DuoError("internal server error"))

    # -- endpoints ----------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse(health_body(self.lead.health()))

    async def slots(self, request: Request) -> Response:
        drafters = [
            DrafterState(name=r.name, state=r.state, why=r.why) for r in self.lead.backs.remotes
        ]
        return JSONResponse([slot_state(s, drafters) for s in self.lead.slots()])

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(self._metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        if self._document is None:
            self._document = openapi_schema(self._operations)
        return JSONResponse(self._document)

    async def drafter(self, ws: WebSocket) -> None:
        await self.drafters.serve(ws)


def health_body(s: Status) -> Health:
    """GET /health's answer (also what the web page's feed reads): the engine's Status,
    field for field (tests/unit/lead/test_api.py checks that they stay so), with what
    follows from it."""
    return cast(Health, {"status": "ok", "busy": s.slots_busy > 0, **asdict(s)})


def slot_state(s: Slot, drafters: list[DrafterState]) -> SlotState:
    """GET /slots' answer for one slot: the engine's Slot, field for field (checked as
    health_body's is), and the backs that draft for every slot."""
    return cast(SlotState, {**asdict(s), "drafters": drafters})


def _status(e: DuoError) -> tuple[int, str]:
    """An error's status and message, the message naming the field at fault (an error
    shape with no `param`, such as Anthropic's, says it there)."""
    named = e.param is None or e.param in e.message
    return http_status(e)[0], e.message if named else f"{e.param}: {e.message}"
