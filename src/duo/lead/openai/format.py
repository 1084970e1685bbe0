"""The OpenAI wire format of the lead's answers: errors, usage, timings and SSE events.

Errors are OpenAI-style JSON bodies: {"error": {"message", "type", "param", "code"}};
responses carry `usage` plus llama.cpp-style `timings` with the speculation figures. (The
requests are typed models: duo.lead.openai.requests.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from duo.core.stats import Stats
from duo.errors import DuoError, http_status
from duo.lead.openai.responses import ErrorBody, Timings, Usage


def error_response(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    body: ErrorBody = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


def duo_error_response(e: DuoError) -> JSONResponse:
    """Any DuoError in OpenAI's error shape, with its status from duo.errors.STATUS."""
    status, kind = http_status(e)
    return error_response(status, e.message, kind=kind, param=e.param, code=e.code)


def usage(s: Stats) -> Usage:
    return {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.tokens,
        "total_tokens": s.prompt_tokens + s.tokens,
    }


def timings(s: Stats) -> Timings:
    """llama.cpp server's `timings`, plus the speculation figures."""
    return {
        "prompt_n": s.prompt_tokens - s.cached_tokens,
        "cache_n": s.cached_tokens,
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
        "rounds_after_rejection": s.readiness("rejection").rounds,
        "ready_after_rejection": s.readiness("rejection").ready,
        "rounds_after_acceptance": s.readiness("acceptance").rounds,
        "ready_after_acceptance": s.readiness("acceptance").ready,
        "draft_sources": {
            name: {
                "draft_n": x.drafted,
                "draft_n_accepted": x.accepted,
                "draft_n_received": x.received,
            }
            for name, x in s.by_source.items()
        },
    }


def sse(data: Mapping[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()
