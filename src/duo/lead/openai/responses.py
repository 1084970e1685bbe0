"""The shapes of the lead's answers, as typed dicts: what the code that builds an answer
returns (mypy holds it to them), and what the OpenAPI document's response schemas are
generated from (duo.lead.openai.openapi).

    Completion, ChatCompletion, ChatCompletionChunk   /v1/completions, /v1/chat/completions
    ErrorBody                                         every error, in OpenAI's shape
    Models, Tokens, Detokenized, AppliedTemplate, PropsBody   the other endpoints

(/health's shape is the lead's own: duo.lead.engine.lead.Health.)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from msgspec import Meta

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
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float
    main_decode_ms: float
    overhead_ms_per_round: float
    draft_n: int
    draft_n_accepted: int
    acceptance_rate: float
    mean_acceptance_length: float
    rounds: int
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


class CalledToolDelta(CalledTool):
    index: Annotated[int, Meta(description="the call's position among the choice's calls")]


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


class Delta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    reasoning_content: str
    tool_calls: list[CalledToolDelta]


class ChunkChoice(TypedDict):
    index: int
    delta: Delta
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


# -- the other endpoints --------------------------------------------------------------------


class ModelMeta(TypedDict):
    n_ctx: int
    n_vocab: int


class Model(TypedDict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    meta: ModelMeta


class Models(TypedDict):
    object: Literal["list"]
    data: list[Model]


class TokenPiece(TypedDict):
    id: int
    piece: Annotated[
        str | list[int], Meta(description="text, or its bytes where they are not UTF-8 alone")
    ]


class Tokens(TypedDict):
    tokens: Annotated[
        list[int | TokenPiece], Meta(description="token IDs; with with_pieces, {id, piece} each")
    ]


class Detokenized(TypedDict):
    content: str


class AppliedTemplate(TypedDict):
    prompt: str


class GenerationSettings(TypedDict):
    n_ctx: int
    params: Annotated[
        dict[str, Any], Meta(description="the request fields' defaults, as llama-server names")
    ]


class Speculative(TypedDict):
    mode: Literal["target", "sync", "async"]
    spec_types: list[str]
    draft_max: int
    max_ahead: int
    policy: Literal["adaptive", "fixed"]
    deterministic: bool
    ngram_max: int
    lookup_max: int
    local_drafter: bool
    drafters: Annotated[int, Meta(description="backs connected now")]


class PlacementBody(TypedDict):
    way: Annotated[
        Literal["alone", "split", "fixed"],
        Meta(
            description="alone: the main model on every core, the in-process drafter "
            "resting; split: the drafter on some of them; fixed: as the flags say"
        ),
    ]
    threads: Annotated[int, Meta(description="the main model's threads now")]
    threads_draft: Annotated[int, Meta(description="the in-process drafter's (0: none)")]
    expected_tokens_per_second: Annotated[
        dict[str, float],
        Meta(description="each way's, from measured costs and the acceptance seen so far"),
    ]
    switches: int


class PropsBody(TypedDict):
    default_generation_settings: GenerationSettings
    total_slots: int
    model_alias: str
    model_path: str
    modalities: dict[str, bool]
    chat_template: str
    chat_template_caps: dict[str, bool]
    bos_token: str
    eos_token: str
    build_info: str
    is_sleeping: bool
    n_vocab: int
    speculative: Speculative
    placement: PlacementBody
