"""The lead's route table: one record per operation (a path and its method), from which both
the Starlette routes (`starlette_routes`) and the OpenAPI document (duo.lead.openapi) are
made, so that nothing is served that the document leaves out, nor described that is not
served.

    Operation   path, method, handler, the request body's type, its answers, whether the
                API key is required, a summary, and the shape of its errors (OpenAI's,
                unless the API it belongs to has its own: Anthropic's)
    Answer      one answer of an operation: a JSON shape, or another media type, or JSON
                whole and server-sent events with `stream`

Each part of the API lists its own operations (duo.lead.openai, .verifier, .web); the app
(duo.lead.api) puts them in one table.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from duo.auth import credential
from duo.errors import AuthError, DuoError
from duo.lead.body import decode, read_body

log = logging.getLogger(__name__)

Method = Literal["GET", "POST", "WEBSOCKET"]
Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Answer:
    """One answer of an operation, as the document states it: JSON of `shape`, or a body of
    the `media` type; with `chunk`, also server-sent events of that shape (`stream`)."""

    shape: Any = None  # the JSON body's type (a TypedDict, or a list of one)
    description: str = "OK"
    media: str | None = None  # a body that is not JSON: its content type
    chunk: Any = None  # with stream: each event's shape
    status: str = "200"


@dataclass(frozen=True)
class Operation:
    """One path and method of the API.

    The handler of a GET takes the request; of a POST, the request and its body decoded as
    `body` (read under the size limit first); of a WEBSOCKET, the socket. With `auth`, the
    API key is required: a GET's or POST's route checks it before the handler runs (401), a
    WebSocket's handler checks its own (the drafter channel's keys). `errors` are the error
    statuses the document lists (None: those of the method); `more` the other answers."""

    method: Method
    path: str
    summary: str
    handler: Callable[..., Awaitable[Any]]
    answer: Answer
    body: type[msgspec.Struct] | None = None
    auth: bool = True
    errors: tuple[str, ...] | None = None
    more: tuple[Answer, ...] = ()
    dialect: Dialect | None = None  # its errors' shape, if not OpenAI's


@dataclass(frozen=True)
class Dialect:
    """The errors of an API with a shape of its own: its body's type (for the document)
    and what writes an error (its HTTP status and message) as that body."""

    shape: Any
    respond: Callable[[int, str], Response]


def starlette_routes(
    operations: Sequence[Operation], authorize: Callable[[str | None], bool], max_body: int
) -> list[BaseRoute]:
    """The routes that serve `operations`, in their order: `authorize` judges the
    Authorization header (or an X-Api-Key header, as Anthropic's clients send the key)
    where a key is required, `max_body` bounds a request body."""

    def route(op: Operation) -> BaseRoute:
        if op.method == "WEBSOCKET":
            return WebSocketRoute(op.path, op.handler)
        handler, kind, auth = op.handler, op.body, op.auth

        async def endpoint(request: Request) -> Response:
            if auth and not authorize(credential(request.headers)):
                raise AuthError()
            if kind is None:
                response: Response = await handler(request)
            else:
                response = await handler(request, decode(await read_body(request, max_body), kind))
            return response

        return Route(op.path, _guarded(endpoint), methods=[op.method])

    return [route(op) for op in operations]


def _guarded(endpoint: Endpoint) -> Endpoint:
    """An unexpected exception becomes a DuoError here, which the app answers as a 500 in
    the route's error shape, on a connection that stays open: past Starlette's
    ServerErrorMiddleware, uvicorn would drop the connection."""

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
            raise DuoError("internal server error") from None  # a 500, in the route's shape

    return guarded
