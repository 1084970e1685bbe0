"""The OpenAI wire format of the lead's answers, for every part of its API: errors, and
streams of server-sent events (their events: duo.sse).

Errors are OpenAI-style JSON bodies: {"error": {"message", "type", "param", "code"}}. (The
answers' shapes, `usage` and llama.cpp-style `timings` among them: duo.lead.protocol; the
requests are typed models: duo.lead.openai.requests.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.responses import JSONResponse, StreamingResponse

from duo.errors import DuoError, http_status
from duo.lead.protocol.openai import ErrorBody


def error_body(
    message: str,
    kind: str = "invalid_request_error",
    *,
    param: str | None = None,
    code: str | None = None,
) -> ErrorBody:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(message, kind, param=param, code=code), status_code=status)


def duo_error_response(e: DuoError) -> JSONResponse:
    """Any DuoError in OpenAI's error shape, with its status from duo.errors.STATUS."""
    status, kind = http_status(e)
    return error_response(status, e.message, kind=kind, param=e.param, code=e.code)


def event_stream(events: AsyncIterator[bytes]) -> StreamingResponse:
    """An answer of server-sent events, kept from proxies' buffers and caches."""
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
