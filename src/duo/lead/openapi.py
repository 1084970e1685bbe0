"""The lead's API described as OpenAPI 3.1 (served at GET /openapi.json), generated from the
route table (duo.lead.routes) the app is served from, and the types the lead runs on.

The request schemas are msgspec's JSON schemas of the request models, the classes each body
is decoded into (duo.lead.openai.requests, .chat; the table says which route decodes which),
so the document states the fields, defaults and bounds the lead enforces; a test holds the
two together. The response schemas are those of the typed dicts the answers are built as
(duo.lead.protocol). The drafter channel, a WebSocket, appears as the GET that
upgrades to it (OpenAPI has no words for a WebSocket's messages: duo.channel.protocol
defines them). Every error answer has OpenAI's error shape (`ErrorBody`), but those of
Anthropic's Messages API, which have Anthropic's (`AnthropicError`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from duo import __version__
from duo.lead.protocol.openai import ErrorBody
from duo.lead.routes import Answer, Operation

Schema = dict[str, Any]
REF = "#/components/schemas/{name}"
ERRORS = {
    "400": "a bad request field (`param` names it)",
    "401": "a missing or wrong API key",
    "404": "no such file",
    "413": "a request body over --max-body",
    "500": "an error on the lead's side",
    "501": "the served model cannot do this (infill without fill-in-the-middle tokens)",
    "503": "the main model is unavailable (with --rpc, while its worker restarts)",
}
METHOD_ERRORS = {  # an operation's error answers, unless it says otherwise
    "GET": ("401", "500", "503"),
    "POST": ("400", "401", "413", "500", "503"),
    "WEBSOCKET": (),
}
DESCRIPTION = """An OpenAI-compatible API with llama-server's extension endpoints, served \
by the main model of duo's speculative decoding.

In a request, null means a field's default, and unknown fields are ignored. Every error \
has OpenAI's error shape, but those of /v1/messages, which have Anthropic's. The drafter \
channel at /v1/drafter is a WebSocket of binary frames for `duo back` (duo.channel.protocol)."""


def openapi_schema(operations: Sequence[Operation]) -> dict[str, Any]:
    """The document of an app served from `operations`."""
    bodies = [op.body for op in operations if op.body is not None]
    answers = [a for op in operations for a in (op.answer, *op.more)]
    shapes = [x for a in answers for x in (a.shape, a.chunk) if x is not None]
    dialects = [op.dialect.shape for op in operations if op.dialect is not None]
    types = [*dict.fromkeys([*bodies, *shapes, ErrorBody, *dialects])]
    refs, components = msgspec.json.schema_components(types, ref_template=REF)
    ref = dict(zip(types, refs, strict=True))

    def answer(a: Answer) -> Schema:
        if a.media is not None:
            return {
                "description": a.description,
                "content": {a.media: {"schema": {"type": "string"}}},
            }
        if a.shape is None:
            return {"description": a.description}
        content: Schema = {"application/json": {"schema": ref[a.shape]}}
        if a.chunk is not None:
            events = f"`data: <{a.chunk.__name__}>` events"
            content["text/event-stream"] = {"schema": {"type": "string", "description": events}}
        return {"description": a.description, "content": content}

    def operation(op: Operation) -> Schema:
        errors = METHOD_ERRORS[op.method] if op.errors is None else op.errors
        shape = ErrorBody if op.dialect is None else op.dialect.shape
        error = {"content": {"application/json": {"schema": ref[shape]}}}
        out: Schema = {
            "summary": op.summary,
            "responses": {a.status: answer(a) for a in (op.answer, *op.more)}
            | {status: {"description": ERRORS[status], **error} for status in errors},
        }
        if op.body is not None:
            body = {"application/json": {"schema": ref[op.body]}}
            out["requestBody"] = {"required": True, "content": body}
        names = re.findall(r"{(\w+)}", op.path)
        if names:
            string = {"type": "string"}
            out["parameters"] = [
                {"name": n, "in": "path", "required": True, "schema": string} for n in names
            ]
        if not op.auth:
            out["security"] = []  # no key needed
        return out

    paths: dict[str, dict[str, Schema]] = {}
    for op in operations:
        method = "get" if op.method == "WEBSOCKET" else op.method.lower()
        paths.setdefault(op.path, {})[method] = operation(op)
    return {
        "openapi": "3.1.0",
        "info": {"title": "duo lead", "version": __version__, "description": DESCRIPTION},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
