"""The OpenAI API's shapes, as duo answers them: typed dicts, what the code that builds an
answer returns (mypy holds it to them) and what the OpenAPI document's response schemas are
generated from (duo.lead.openapi).

    Completion, ChatCompletion, ChatCompletionChunk   /v1/completions, /v1/chat/completions
    ErrorBody                                         every error, in OpenAI's shape
    Models                                            /v1/models
    usage(stats), timings(stats)                      a generation's figures, in these shapes
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired, TypedDict

from msgspec import Meta

from duo.core.stats import Stats

Finish = Annotated[
    str | None, Meta(description="stop, length or tool_calls; null until the choice ends")
]


class ErrorDetail(TypedDict):
    message: str
    type: Annotated[
        str,
        Meta(
            description="invalid_request_error (400, 404, 405, 413), authentication_error "
            "(401), not_found_error (404), server_error (500, 503)",
            examples=["invalid_request_error"],
        ),
    ]
    param: Annotated[str | None, Meta(description="the request field at fault")]
    code: Annotated[str | None, Meta(description="context_length_exceeded, ...")]


class ErrorBody(TypedDict):
    error: ErrorDetail


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SourceTimings(TypedDict):
    draft_n: int
    draft_n_accepted: int
    draft_n_received: Annotated[
        int,
        Meta(description="draft tokens this source sent for the request, usable or not"),
    ]


class Timings(TypedDict):
    """llama.cpp's timings plus the speculation figures (all choices together)."""

    prompt_n: Annotated[int, Meta(description="prompt tokens evaluated (as llama-server)")]
    cache_n: Annotated[int, Meta(description="prompt tokens whose KV was kept from before")]
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float
    main_decode_ms: float
    overhead_ms_per_round: float
    draft_n: int
    draft_n_accepted: int
    acceptance_rate: float
    mean_acceptance_length: float
    rounds: int
    rounds_drafted: Annotated[int, Meta(description="rounds that verified a draft")]
    rounds_after_rejection: Annotated[
        int, Meta(description="rounds after one that rejected a draft token")
    ]
    ready_after_rejection: Annotated[
        int, Meta(description="of which a usable draft was ready when planned")
    ]
    rounds_after_acceptance: Annotated[
        int, Meta(description="rounds after one that accepted its whole draft")
    ]
    ready_after_acceptance: Annotated[
        int, Meta(description="of which a usable draft was ready when planned")
    ]
    draft_sources: Annotated[
        dict[str, SourceTimings], Meta(description="by draft source: back:NAME, model, ...")
    ]


# -- logprobs -------------------------------------------------------------------------------


class TopLogprob(TypedDict):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprobs(TypedDict):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChatLogprobs(TypedDict):
    content: list[TokenLogprobs]
    refusal: None


class TextLogprobs(TypedDict):
    """The legacy logprobs of /v1/completions."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: Annotated[list[int], Meta(description="characters into the generated text")]


# -- completions ----------------------------------------------------------------------------


class CompletionChoice(TypedDict):
    index: int
    text: str
    logprobs: TextLogprobs | None
    finish_reason: Finish


class Envelope(TypedDict):
    id: str
    object: Annotated[
        str, Meta(description="text_completion, chat.completion or chat.completion.chunk")
    ]
    created: int
    model: str


class Completion(Envelope):
    """A whole completion; with stream, SSE events of this shape (text pieces), ending in
    `data: [DONE]`."""

    choices: list[CompletionChoice]
    usage: NotRequired[Annotated[Usage, Meta(description="streamed: on the last event")]]
    timings: NotRequired[Timings]


class CalledFunction(TypedDict):
    name: str
    arguments: Annotated[str, Meta(description="JSON text")]


class CalledTool(TypedDict):
    id: str
    type: Literal["function"]
    function: CalledFunction


class FunctionDelta(TypedDict):
    name: NotRequired[Annotated[str, Meta(description="in a call's first delta")]]
    arguments: Annotated[str, Meta(description="the next piece of the arguments' JSON text")]


class CalledToolDelta(TypedDict):
    """A call in a stream: whole, or a piece of one whose arguments stream (its first delta
    has its id, type and name; the others the next piece of its arguments)."""

    index: Annotated[int, Meta(description="the call's position among the choice's calls")]
    id: NotRequired[str]
    type: NotRequired[Literal["function"]]
    function: FunctionDelta


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: Annotated[str | None, Meta(description="null when tool calls are all there is")]
    reasoning_content: NotRequired[
        Annotated[str, Meta(description="a reasoning model's thoughts (--reasoning-format)")]
    ]
    tool_calls: NotRequired[list[CalledTool]]


class ChatChoice(TypedDict):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: Finish


class ChatCompletion(Envelope):
    choices: list[ChatChoice]
    usage: Usage
    timings: Timings


class ChatDelta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    reasoning_content: str
    tool_calls: list[CalledToolDelta]


class ChunkChoice(TypedDict):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: Finish


class Origin(TypedDict):
    """Where a chunk's text came from (duo.lead.openai.origin)."""

    source: Annotated[
        str | None, Meta(description="back:NAME, model, ngram, suffix; null: the main model")
    ]
    tokens: Annotated[int, Meta(description="tokens emitted since the previous chunk")]


class ChatCompletionChunk(Envelope):
    """One SSE event of a streamed chat completion; the stream ends in `data: [DONE]`."""

    choices: list[ChunkChoice]
    usage: NotRequired[Annotated[Usage, Meta(description="on the last event")]]
    timings: NotRequired[Timings]
    duo: NotRequired[Origin]


# -- the models ---------------------------------------------------------------------------


class ModelMeta(TypedDict):
    n_ctx: int
    n_vocab: int


class ModelEntry(TypedDict):
    """An entry of GET /v1/models (the model itself: duo.llama.backend.Model)."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    meta: ModelMeta


class Models(TypedDict):
    object: Literal["list"]
    data: list[ModelEntry]


# -- from the engine's figures --------------------------------------------------------------


def usage(s: Stats) -> Usage:
    return {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.tokens,
        "total_tokens": s.prompt_tokens + s.tokens,
    }


def timings(s: Stats) -> Timings:
    """llama.cpp server's `timings`, plus the speculation figures."""
    evaluated = s.prompt_tokens - s.cached_tokens
    return {
        "prompt_n": evaluated,
        "cache_n": s.cached_tokens,
        "prompt_ms": 1000 * s.prefill_seconds,
        "prompt_per_token_ms": _per(1000 * s.prefill_seconds, evaluated),
        "prompt_per_second": _per(evaluated, s.prefill_seconds),
        "predicted_n": s.tokens,
        "predicted_ms": 1000 * s.decode_seconds,
        "predicted_per_token_ms": _per(1000 * s.decode_seconds, s.tokens),
        "predicted_per_second": s.tokens_per_second,
        "main_decode_ms": 1000 * s.llama_seconds,
        "overhead_ms_per_round": s.overhead_ms_per_round,
        "draft_n": s.drafted,
        "draft_n_accepted": s.accepted,
        "acceptance_rate": s.acceptance_rate,
        "mean_acceptance_length": s.mean_acceptance_length,
        "rounds": s.rounds,
        "rounds_drafted": s.rounds_drafted,
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


def _per(x: float, y: float) -> float:
    """x / y, 0 where y is (llama-server's would be NaN, which JSON cannot carry)."""
    return x / y if y else 0.0
