"""The OpenAI wire format of the lead's API: request fields in, JSON and SSE out.

Errors are OpenAI-style JSON bodies: {"error": {"message", "type", "param", "code"}};
sampler fields take llama.cpp server's names and defaults; responses carry `usage` plus
llama.cpp-style `timings` with the speculation figures.
"""

from __future__ import annotations

import json
import math
import re
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from duo.core.sampling import SamplingParams
from duo.core.stats import Stats
from duo.errors import DuoError, RequestTooLarge, UsageError, http_status


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


def duo_error_response(e: DuoError) -> JSONResponse:
    """Any DuoError in OpenAI's error shape, with its status from duo.errors.STATUS."""
    status, kind = http_status(e)
    return error_response(status, e.message, kind=kind, param=e.param, code=e.code)


# -- request parsing ----------------------------------------------------------------------

MAX_STOP_CHARS = 1024  # the longest stop string (holding text back costs its length squared)
MAX_SEED = 2**64 - 1
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"the request body is larger than the lead accepts ({limit} bytes, see --max-body)"
    )


async def read_body(request: Request, limit: int) -> dict[str, Any]:
    """The JSON object in the body, read without ever holding more than `limit` bytes.

    A declared Content-Length over the limit is refused before a byte is read; a chunked
    body (or one longer than declared) is counted as it arrives. uvicorn discards what the
    client still sends after the answer, so the connection stays usable.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async with aclosing(request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
    return parse_json(b"".join(chunks))


def _refuse_constant(name: str) -> Any:
    raise UsageError(f"the request body holds {name}, which is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf
        raise UsageError(f"the number {text[:40]} is out of range")
    return value


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise UsageError("the request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise UsageError("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise UsageError("the request body must be a JSON object")
    return body


def checked_text(value: str, param: str) -> str:
    """A string the model can take: JSON may carry lone UTF-16 surrogates ("\\ud800"),
    which have no UTF-8 encoding."""
    if _SURROGATE.search(value):
        raise UsageError(f"'{param}' holds a lone UTF-16 surrogate (invalid text)", param=param)
    return value


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise UsageError(f"'{name}' must be a number", param=name)
    if not isinstance(value, kind):
        raise UsageError(f"'{name}' has the wrong type", param=name)
    return value


def integer(body: dict[str, Any], name: str, default: int, lo: int, hi: int | None = None) -> int:
    """An integer field in [lo, hi]: a JSON integer (2.0 and true are refused)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"'{name}' must be an integer", param=name)
    if value < lo or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise UsageError(f"'{name}' must be {bounds}", param=name)
    return value


def number(
    body: dict[str, Any],
    name: str,
    default: float,
    lo: float,
    hi: float | None = None,
    *,
    lo_open: bool = False,
) -> float:
    """A number field in [lo, hi], or (lo, hi] with lo_open (finite: the parser saw to it)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"'{name}' must be a number", param=name)
    try:
        x = float(value)  # a JSON integer of 400 digits does not fit a float
    except OverflowError:
        raise UsageError(f"'{name}' is out of range", param=name) from None
    if x < lo or (lo_open and x == lo) or (hi is not None and x > hi):
        left = "(" if lo_open else "["
        bounds = f"{'>' if lo_open else '>='} {lo:g}" if hi is None else f"in {left}{lo:g}, {hi:g}]"
        raise UsageError(f"'{name}' must be {bounds}", param=name)
    return x


def sampling_fields(
    body: dict[str, Any], default_max: int, n_ctx: int
) -> tuple[int, list[str], SamplingParams]:
    """max_tokens, stop strings and sampler settings (llama.cpp server names and defaults)."""
    name = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )
    max_tokens = integer(body, name, default_max, 1)
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else [] if stop is None else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise UsageError("'stop' must be a string or a list of strings", param="stop")
    if len(stops) > 4:
        raise UsageError("'stop' may hold at most 4 sequences", param="stop")
    for s in stops:
        if len(s) > MAX_STOP_CHARS:
            raise UsageError(
                f"a stop string may be at most {MAX_STOP_CHARS} characters", param="stop"
            )
        checked_text(s, "stop")
    d = SamplingParams()
    # llama.cpp's conventions: repeat_last_n -1 = the whole context, seed -1 = random.
    repeat_last_n = integer(body, "repeat_last_n", d.repeat_last_n, -1)
    seed = integer(body, "seed", -1, -1, MAX_SEED)
    params = SamplingParams(
        temperature=number(body, "temperature", d.temperature, 0),
        top_k=integer(body, "top_k", d.top_k, 0),
        top_p=number(body, "top_p", d.top_p, 0, 1, lo_open=True),
        min_p=number(body, "min_p", d.min_p, 0, 1),
        # Past these the penalised float32 logits overflow to inf: NaN probabilities.
        repeat_penalty=number(body, "repeat_penalty", d.repeat_penalty, 1e-6, 1e6),
        repeat_last_n=n_ctx if repeat_last_n == -1 else repeat_last_n,
        seed=None if seed == -1 else seed,
    )
    try:
        params.check()
    except DuoError as e:  # the checks above should have said it first
        raise UsageError(str(e)) from None
    return min(max_tokens, n_ctx), stops, params


@dataclass(frozen=True)
class Output:
    """How a request wants its answer: how many choices, streamed or not."""

    n: int = 1  # choices
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with usage


def output_fields(body: dict[str, Any], max_choices: int) -> Output:
    """`n`, `stream` and `stream_options`; `user` is accepted (and only checked)."""
    n = integer(body, "n", 1, 1, max_choices)
    stream = field(body, "stream", bool, False)
    options = field(body, "stream_options", dict, {})
    if options and not stream:
        raise UsageError("'stream_options' needs 'stream': true", param="stream_options")
    include_usage = options.get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise UsageError("'stream_options.include_usage' must be a boolean", param="stream_options")
    user = field(body, "user", str, None)
    if user is not None:
        checked_text(user, "user")
    return Output(n, stream, bool(include_usage))


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation as chat templates take it: role and content (text), plus an
    assistant's `tool_calls` and a tool result's `tool_call_id` and `name`."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise UsageError("'messages' must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise UsageError(f"messages[{i}] needs a 'role'", param="messages")
        content = m.get("content")
        tool_calls = _tool_calls(i, m)
        if content is None and tool_calls:
            content = ""  # an assistant turn that only calls tools
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            parts = [
                p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"
            ]
            if len(parts) != len(content) or not all(isinstance(t, str) for t in parts):
                raise UsageError(f"messages[{i}]: only text content is supported", param="messages")
            content = "".join(parts)  # type: ignore[arg-type]
        if not isinstance(content, str):
            raise UsageError(f"messages[{i}] needs a string 'content'", param="messages")
        message: dict[str, Any] = {
            "role": checked_text(m["role"], "messages"),
            "content": checked_text(content, "messages"),
        }
        if tool_calls:
            message["tool_calls"] = tool_calls
        for name in ("tool_call_id", "name"):
            value = m.get(name)
            if value is not None:
                if not isinstance(value, str):
                    raise UsageError(f"messages[{i}].{name} must be a string", param="messages")
                message[name] = checked_text(value, "messages")
        out.append(message)
    return out


def _tool_calls(i: int, m: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message's tool calls, checked: [{id, type, function: {name, arguments}}]."""
    calls = m.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise UsageError(f"messages[{i}].tool_calls must be a list", param="messages")
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not all(
            isinstance(function.get(k), str) for k in ("name", "arguments")
        ):
            raise UsageError(
                f"messages[{i}].tool_calls: each call needs a function with a 'name' and "
                "'arguments' (JSON text)",
                param="messages",
            )
        call_id = call.get("id")
        out.append(
            {
                "id": checked_text(call_id, "messages") if isinstance(call_id, str) else "",
                "type": "function",
                "function": {
                    "name": checked_text(function["name"], "messages"),
                    "arguments": checked_text(function["arguments"], "messages"),
                },
            }
        )
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
