"""The lead's API described as OpenAPI 3.1 (served at GET /openapi.json), generated from the
types the lead runs on.

The request schemas are msgspec's JSON schemas of the request models, the classes each body
is decoded into (duo.lead.openai.requests, .chat; which route decodes which comes from the
app), so the document states the fields, defaults and bounds the lead enforces; a test holds
the two together. The response schemas are those of the typed dicts the answers are built as
(duo.lead.openai.responses). Here are only the paths. The drafter channel, a WebSocket,
appears as the GET that upgrades to it (OpenAPI has no words for a WebSocket's messages:
duo.channel.protocol defines them). Every error answer has OpenAI's error shape
(`ErrorBody`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from duo import __version__
from duo.channel import protocol
from duo.lead.engine.lead import Health, SlotState
from duo.lead.openai.responses import (
    AppliedTemplate,
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    Detokenized,
    ErrorBody,
    Models,
    PropsBody,
    Tokens,
)
from duo.lead.verifier.requests import Prefilled, Verified, VerifierStats
from duo.lead.web.page import EVENTS_PATH

Schema = dict[str, Any]
SLOTS = list[SlotState]
REF = "#/components/schemas/{name}"
ANSWERS: list[type] = [
    Completion,
    ChatCompletion,
    ChatCompletionChunk,
    ErrorBody,
    Models,
    Health,
    Tokens,
    Detokenized,
    AppliedTemplate,
    PropsBody,
    Prefilled,
    Verified,
    VerifierStats,
    SLOTS,
]
ERRORS = {
    "400": "a bad request field (`param` names it)",
    "401": "a missing or wrong API key",
    "404": "no such file",
    "413": "a request body over --max-body",
    "500": "an error on the lead's side",
    "503": "the main model is unavailable (with --rpc, while its worker restarts)",
}
READ = ("401", "500", "503")  # the errors of a GET
DESCRIPTION = """An OpenAI-compatible API with llama-server's extension endpoints, served \
by the main model of duo's speculative decoding.

In a request, null means a field's default, and unknown fields are ignored. Every error \
has OpenAI's error shape. The drafter channel at /v1/drafter is a WebSocket of binary \
frames for `duo back` (duo.channel.protocol)."""


def openapi_schema(bodies: Mapping[str, type]) -> dict[str, Any]:
    """The document, for an app whose POST routes decode `bodies` (path -> request type)."""
    types = [*dict.fromkeys(bodies.values()), *ANSWERS]
    refs, components = msgspec.json.schema_components(types, ref_template=REF)
    ref = dict(zip(types, refs, strict=True))

    def json(kind: type, description: str = "OK") -> Schema:
        return {"description": description, "content": {"application/json": {"schema": ref[kind]}}}

    def media(kind: str, description: str) -> Schema:
        return {"description": description, "content": {kind: {"schema": {"type": "string"}}}}

    def op(summary: str, ok: Schema, errors: tuple[str, ...] = READ, **extra: Any) -> Schema:
        responses = {"200": ok} | {status: json(ErrorBody, ERRORS[status]) for status in errors}
        return {"summary": summary, "responses": responses, **extra}

    def post(path: str, summary: str, ok: Schema) -> dict[str, Schema]:
        body = {"required": True, "content": {"application/json": {"schema": ref[bodies[path]]}}}
        return {"post": op(summary, ok, ("400", "401", "413", "500", "503"), requestBody=body)}

    def streamed(whole: type, chunk: type) -> Schema:
        name = chunk.__name__
        return {
            "description": "the whole answer, or with `stream` server-sent events",
            "content": {
                "application/json": {"schema": ref[whole]},
                "text/event-stream": {
                    "schema": {"type": "string", "description": f"`data: <{name}>` events"}
                },
            },
        }

    public: Schema = {"security": []}  # no key needed
    paths = {
        "/v1/chat/completions": post(
            "/v1/chat/completions",
            "A chat completion, through the model's own chat template",
            streamed(ChatCompletion, ChatCompletionChunk),
        ),
        "/v1/completions": post(
            "/v1/completions", "A text completion", streamed(Completion, Completion)
        ),
        "/v1/models": {"get": op("The served model", json(Models))},
        "/health": {
            "get": {
                "summary": "Liveness, drafters and queue",
                **public,
                "responses": {"200": json(Health), "503": json(Health, "not ready (--rpc)")},
            }
        },
        "/metrics": {"get": op("Prometheus metrics", media("text/plain", "text format 0.0.4"))},
        "/tokenize": post("/tokenize", "Tokenize text (llama-server)", json(Tokens)),
        "/detokenize": post(
            "/detokenize", "Token IDs back to text (llama-server)", json(Detokenized)
        ),
        "/apply-template": post(
            "/apply-template",
            "The prompt a chat request renders to (llama-server)",
            json(AppliedTemplate),
        ),
        "/props": {
            "get": op(
                "Model, context, chat template, defaults and speculation settings (llama-server)",
                json(PropsBody),
            )
        },
        **{
            path: post(path, "Start a drafter-driven session afresh (seed 003)", json(Prefilled))
            for path in ("/prefill", "/prefill/")
        },
        **{
            path: post(
                path,
                "Verify a client's draft; commit the prefix the main model accepts (seed 003)",
                json(Verified),
            )
            for path in ("/verify", "/verify/")
        },
        "/slots": {
            "get": op(
                "Each slot: busy or not, its cached tokens (llama-server)", json(list[SlotState])
            )
        },
        "/stats": {"get": op("The drafter-driven sessions' figures", json(VerifierStats))},
        "/openapi.json": {"get": op("This document", media("application/json", "OpenAPI 3.1"))},
        protocol.PATH: {
            "get": {
                "summary": "The drafter channel: a WebSocket (duo.channel.protocol), for "
                "`duo back`",
                "responses": {"101": {"description": "switching to the WebSocket protocol"}},
            }
        },
        "/": {
            "get": op(
                "The web page: a chat and a drafter dashboard",
                media("text/html", "the page"),
                (),
                **public,
            )
        },
        "/ui/{name}": {
            "get": op(
                "The web page's scripts, styles and icon",
                media("text/javascript", "a file of the page (also text/css, image/svg+xml)"),
                ("404",),
                parameters=[
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                **public,
            )
        },
        EVENTS_PATH: {
            "get": op(
                "The web page's live events: drafters, requests, acceptance",
                media("text/event-stream", "server-sent events"),
                ("401",),
            )
        },
    }
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
