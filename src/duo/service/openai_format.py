"""The OpenAI wire format of the lead's API: request fields in, JSON and SSE out.

Errors are OpenAI-style JSON bodies: {"error": {"message", "type", "param", "code"}};
sampler fields take llama.cpp server's names and defaults; responses carry `usage` plus
llama.cpp-style `timings` with the speculation figures.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from duo.core.sampling import SamplingParams
from duo.core.stats import Stats
from duo.errors import DuoError


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


def timings(s: Stats) -> dict[str, Any]:
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
        "draft_sources": {
            name: {"draft_n": x.drafted, "draft_n_accepted": x.accepted}
            for name, x in s.by_source.items()
        },
    }


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()
