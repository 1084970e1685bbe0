"""The lead's API described as OpenAPI 3.0 (served at GET /openapi.json).

Every route the lead serves is here with its request and response schemas; the drafter
channel, a WebSocket, appears as the GET that upgrades to it (OpenAPI 3.0 has no words for
a WebSocket's messages: duo.channel.protocol defines them). Every error answer has
OpenAI's error shape (`Error`). A test checks the document against the OpenAPI 3.0 schema
and that every route of the app is in it.
"""

from __future__ import annotations

from typing import Any

from duo import __version__

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(properties: dict[str, Schema], required: tuple[str, ...] = (), **extra: Any) -> Schema:
    schema: Schema = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    return schema


_STR: Schema = {"type": "string"}
_INT: Schema = {"type": "integer"}
_NUM: Schema = {"type": "number"}
_BOOL: Schema = {"type": "boolean"}
_ANY_OBJ: Schema = {"type": "object", "additionalProperties": True}


def _arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def _nullable(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


_SAMPLING: dict[str, Schema] = {
    "max_tokens": {"type": "integer", "minimum": 1},
    "max_completion_tokens": {"type": "integer", "minimum": 1},
    "stop": {"oneOf": [_STR, {**_arr(_STR), "maxItems": 4}]},
    "seed": {"type": "integer", "minimum": -1, "description": "-1: random"},
    "temperature": {"type": "number", "minimum": 0, "default": 0.8},
    "top_k": {"type": "integer", "minimum": 0, "default": 40},
    "top_p": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 1},
    "min_p": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.05},
    "repeat_penalty": {"type": "number", "default": 1.0},
    "repeat_last_n": {"type": "integer", "minimum": -1, "default": 64},
    "n": {
        "type": "integer",
        "minimum": 1,
        "maximum": 128,
        "default": 1,
        "description": "choices; with a seed s, choice i samples with seed s + i",
    },
    "stream": {"type": "boolean", "default": False},
    "stream_options": _obj({"include_usage": _BOOL}),
    "user": _STR,
    "logit_bias": {
        "type": "object",
        "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
        "description": "token ID (as a string) -> bias added to its logit",
    },
    "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2, "default": 0},
    "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2, "default": 0},
    "response_format": _obj(
        {
            "type": {"enum": ["text", "json_object", "json_schema"]},
            "json_schema": _obj({"name": _STR, "schema": _ANY_OBJ, "strict": _BOOL}),
            "schema": _ANY_OBJ,
        },
        ("type",),
    ),
}
# logprobs: a flag and a count of alternatives for chat, the count alone for completions
_CHAT_LOGPROBS: dict[str, Schema] = {
    "logprobs": {"type": "boolean", "default": False},
    "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
}
_COMPLETION_LOGPROBS: dict[str, Schema] = {
    "logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
}

_MESSAGE = _obj(
    {
        "role": {"type": "string", "example": "user"},
        "content": _nullable(
            {"oneOf": [_STR, _arr(_obj({"type": {"enum": ["text"]}, "text": _STR}))]}
        ),
        "name": _STR,
        "tool_call_id": _STR,
        "tool_calls": _arr(_ref("ToolCall")),
    },
    ("role",),
)

_TOOL = _obj(
    {
        "type": {"type": "string", "enum": ["function"]},
        "function": _obj({"name": _STR, "description": _STR, "parameters": _ANY_OBJ}, ("name",)),
    },
    ("type", "function"),
)

_TOOL_CHOICE: Schema = {
    "oneOf": [
        {"type": "string", "enum": ["none", "auto", "required"]},
        _obj(
            {
                "type": {"type": "string", "enum": ["function"]},
                "function": _obj({"name": _STR}, ("name",)),
            },
            ("type", "function"),
        ),
    ]
}

_CHAT_FIELDS: dict[str, Schema] = {
    "model": _STR,
    "messages": {**_arr(_MESSAGE), "minItems": 1},
    "tools": {**_arr(_TOOL), "maxItems": 128},
    "tool_choice": _TOOL_CHOICE,
}

_USAGE = _obj(
    {"prompt_tokens": _INT, "completion_tokens": _INT, "total_tokens": _INT},
    ("prompt_tokens", "completion_tokens", "total_tokens"),
)

_TIMINGS = _obj(
    {
        "prompt_n": _INT,
        "prompt_ms": _NUM,
        "predicted_n": _INT,
        "predicted_ms": _NUM,
        "predicted_per_second": _NUM,
        "main_decode_ms": _NUM,
        "overhead_ms_per_round": _NUM,
        "draft_n": _INT,
        "draft_n_accepted": _INT,
        "acceptance_rate": _NUM,
        "mean_acceptance_length": _NUM,
        "rounds": _INT,
        "draft_sources": {
            "type": "object",
            "additionalProperties": _obj({"draft_n": _INT, "draft_n_accepted": _INT}),
        },
    },
    description="llama.cpp's timings plus the speculation figures (all choices together)",
)

_FINISH: Schema = _nullable({"type": "string", "enum": ["stop", "length", "tool_calls"]})

_RESPONSE_META: dict[str, Schema] = {
    "id": _STR,
    "object": _STR,
    "created": _INT,
    "model": _STR,
    "usage": _ref("Usage"),
    "timings": _ref("Timings"),
}

_COMPLETION_CHOICE = _obj(
    {"index": _INT, "text": _STR, "logprobs": _nullable(_ANY_OBJ), "finish_reason": _FINISH},
    ("index", "text", "finish_reason"),
)

_CHAT_MESSAGE_OUT = _obj(
    {
        "role": {"type": "string", "enum": ["assistant"]},
        "content": _nullable(_STR),
        "tool_calls": _arr(_ref("ToolCall")),
    },
    ("role", "content"),
)

_TOOL_CALL = _obj(
    {
        "id": _STR,
        "type": {"type": "string", "enum": ["function"]},
        "function": _obj(
            {"name": _STR, "arguments": {"type": "string", "description": "JSON text"}},
            ("name", "arguments"),
        ),
    },
    ("id", "type", "function"),
)

_TOOL_CALL_DELTA = _obj(
    {"index": _INT, **_TOOL_CALL["properties"]},
    ("index",),
)

_CHAT_CHOICE = _obj(
    {
        "index": _INT,
        "message": _CHAT_MESSAGE_OUT,
        "logprobs": _nullable(_ANY_OBJ),
        "finish_reason": _FINISH,
    },
    ("index", "message", "finish_reason"),
)

_CHAT_CHUNK_CHOICE = _obj(
    {
        "index": _INT,
        "delta": _obj(
            {
                "role": {"type": "string", "enum": ["assistant"]},
                "content": _STR,
                "tool_calls": _arr(_TOOL_CALL_DELTA),
            }
        ),
        "logprobs": _nullable(_ANY_OBJ),
        "finish_reason": _FINISH,
    },
    ("index", "delta", "finish_reason"),
)

SCHEMAS: dict[str, Schema] = {
    "Error": _obj(
        {
            "error": _obj(
                {
                    "message": _STR,
                    "type": {
                        "type": "string",
                        "example": "invalid_request_error",
                        "description": "invalid_request_error (400, 404, 405, 413), "
                        "authentication_error (401), not_found_error (404), server_error "
                        "(500, 503)",
                    },
                    "param": _nullable({**_STR, "description": "the request field at fault"}),
                    "code": _nullable(_STR),
                },
                ("message", "type", "param", "code"),
            )
        },
        ("error",),
    ),
    "Usage": _USAGE,
    "Timings": _TIMINGS,
    "ToolCall": _TOOL_CALL,
    "CompletionRequest": _obj(
        {
            "model": _STR,
            "prompt": {
                "oneOf": [_STR, {**_arr(_STR), "minItems": 1, "maxItems": 1}, _arr(_INT)],
                "description": "text, or the prompt's token IDs",
            },
            **_SAMPLING,
            **_COMPLETION_LOGPROBS,
        },
        ("prompt",),
    ),
    "Completion": _obj(
        {**_RESPONSE_META, "choices": _arr(_COMPLETION_CHOICE)},
        ("id", "object", "created", "model", "choices"),
        description="a whole completion; with stream, SSE events of this shape (text "
        "pieces), ending in `data: [DONE]`",
    ),
    "ChatCompletionRequest": _obj({**_CHAT_FIELDS, **_SAMPLING, **_CHAT_LOGPROBS}, ("messages",)),
    "ChatCompletion": _obj(
        {**_RESPONSE_META, "choices": _arr(_CHAT_CHOICE)},
        ("id", "object", "created", "model", "choices"),
    ),
    "ChatCompletionChunk": _obj(
        {**_RESPONSE_META, "choices": _arr(_CHAT_CHUNK_CHOICE)},
        ("id", "object", "created", "model", "choices"),
        description="one SSE event of a streamed chat completion; the stream ends in "
        "`data: [DONE]`",
    ),
    "Models": _obj(
        {
            "object": {"type": "string", "enum": ["list"]},
            "data": _arr(
                _obj(
                    {
                        "id": _STR,
                        "object": {"type": "string", "enum": ["model"]},
                        "created": _INT,
                        "owned_by": _STR,
                        "meta": _obj({"n_ctx": _INT, "n_vocab": _INT}),
                    },
                    ("id", "object"),
                )
            ),
        },
        ("object", "data"),
    ),
    "Health": _obj(
        {
            "status": _STR,
            "model": _STR,
            "drafters": _INT,
            "local_drafter": _BOOL,
            "busy": _BOOL,
            "queued": _INT,
            "time": _NUM,
        },
        ("status",),
    ),
    "TokenizeRequest": _obj(
        {
            "content": {"oneOf": [_STR, _arr({"oneOf": [_STR, _INT]})]},
            "add_special": {**_BOOL, "default": False},
            "parse_special": {**_BOOL, "default": True},
            "with_pieces": {**_BOOL, "default": False},
        },
        ("content",),
    ),
    "TokenizeResponse": _obj(
        {
            "tokens": {
                "oneOf": [
                    _arr(_INT),
                    _arr(
                        _obj(
                            {"id": _INT, "piece": {"oneOf": [_STR, _arr(_INT)]}},
                            ("id", "piece"),
                        )
                    ),
                ]
            }
        },
        ("tokens",),
    ),
    "DetokenizeRequest": _obj({"tokens": _arr(_INT)}, ("tokens",)),
    "DetokenizeResponse": _obj({"content": _STR}, ("content",)),
    "ApplyTemplateRequest": _obj(_CHAT_FIELDS, ("messages",)),
    "ApplyTemplateResponse": _obj({"prompt": _STR}, ("prompt",)),
    "Props": _obj(
        {
            "default_generation_settings": _obj({"n_ctx": _INT, "params": _ANY_OBJ}),
            "total_slots": _INT,
            "model_alias": _STR,
            "model_path": _STR,
            "modalities": _ANY_OBJ,
            "chat_template": _STR,
            "chat_template_caps": _ANY_OBJ,
            "bos_token": _STR,
            "eos_token": _STR,
            "build_info": _STR,
            "is_sleeping": _BOOL,
            "n_vocab": _INT,
            "speculative": _obj(
                {
                    "mode": {"type": "string", "enum": ["target", "sync", "async"]},
                    "spec_types": _arr(_STR),
                    "draft_max": _INT,
                    "max_ahead": _INT,
                    "policy": {"type": "string", "enum": ["adaptive", "fixed"]},
                    "deterministic": _BOOL,
                    "ngram_max": _INT,
                    "local_drafter": _BOOL,
                    "drafters": _INT,
                }
            ),
        },
        ("default_generation_settings", "model_path", "speculative"),
    ),
}


def _json(schema: Schema) -> Schema:
    return {"content": {"application/json": {"schema": schema}}}


def _error(description: str) -> Schema:
    return {"description": description, **_json(_ref("Error"))}


_ERRORS = {
    "400": _error("a bad request field (`param` names it)"),
    "401": _error("a missing or wrong API key"),
    "413": _error("a request body over --max-body"),
    "500": _error("an error on the lead's side"),
    "503": _error("the main model is unavailable (with --rpc, while its worker restarts)"),
}


def _op(
    summary: str,
    response: Schema,
    request: str | None = None,
    *,
    ok: str = "200",
    errors: tuple[str, ...] = ("400", "401", "413", "500", "503"),
) -> Schema:
    op: Schema = {"summary": summary, "responses": {ok: response}}
    if request is not None:
        op["requestBody"] = {"required": True, **_json(_ref(request))}
    for status in errors:
        op["responses"][status] = _ERRORS[status]
    return op


def _ok(schema: str, description: str = "OK") -> Schema:
    return {"description": description, **_json(_ref(schema))}


def _ok_or_stream(schema: str, chunk: str) -> Schema:
    return {
        "description": "the whole answer, or with `stream` an SSE stream of chunks",
        "content": {
            "application/json": {"schema": _ref(schema)},
            "text/event-stream": {"schema": {**_STR, "description": f"`data: <{chunk}>` events"}},
        },
    }


_READ = ("401", "500", "503")

PATHS: dict[str, dict[str, Schema]] = {
    "/v1/chat/completions": {
        "post": _op(
            "A chat completion, through the model's own chat template",
            _ok_or_stream("ChatCompletion", "ChatCompletionChunk"),
            "ChatCompletionRequest",
        )
    },
    "/v1/completions": {
        "post": _op(
            "A text completion", _ok_or_stream("Completion", "Completion"), "CompletionRequest"
        )
    },
    "/v1/models": {"get": _op("The served model", _ok("Models"), errors=_READ)},
    "/health": {
        "get": {
            "summary": "Liveness, drafters and queue (no key needed)",
            "security": [],
            "responses": {"200": _ok("Health"), "503": _ok("Health", "not ready (--rpc)")},
        }
    },
    "/metrics": {
        "get": _op(
            "Prometheus metrics",
            {"description": "text format 0.0.4", "content": {"text/plain": {"schema": _STR}}},
            errors=_READ,
        )
    },
    "/tokenize": {
        "post": _op("Tokenize text (llama-server)", _ok("TokenizeResponse"), "TokenizeRequest")
    },
    "/detokenize": {
        "post": _op(
            "Token IDs back to text (llama-server)", _ok("DetokenizeResponse"), "DetokenizeRequest"
        )
    },
    "/apply-template": {
        "post": _op(
            "The prompt a chat request renders to (llama-server)",
            _ok("ApplyTemplateResponse"),
            "ApplyTemplateRequest",
        )
    },
    "/props": {
        "get": _op(
            "Model, context, chat template, defaults and speculation settings (llama-server)",
            _ok("Props"),
            errors=_READ,
        )
    },
    "/openapi.json": {
        "get": _op(
            "This document",
            {"description": "OpenAPI 3.0", "content": {"application/json": {"schema": _ANY_OBJ}}},
            errors=_READ,
        )
    },
    "/v1/drafter": {
        "get": _op(
            "The drafter channel: a WebSocket (see duo.channel.protocol), for `duo back`",
            {"description": "switching to the WebSocket protocol"},
            ok="101",
            errors=(),
        )
    },
}


def openapi_schema() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "duo lead",
            "version": __version__,
            "description": "An OpenAI-compatible API with llama-server's extension endpoints, "
            "served by the main model of duo's speculative decoding. Every error has "
            "OpenAI's error shape.",
        },
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
