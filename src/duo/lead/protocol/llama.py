"""llama-server's shapes, as duo answers them (duo.lead.openai.extensions, duo.lead.api):
typed dicts, as duo.lead.protocol.openai's.

    Tokens, Detokenized, AppliedTemplate   /tokenize, /detokenize, /apply-template
    NativeResult, NativeChunk              /completion and /infill: an answer, a stream's event
    PropsBody                              /props: the model, its settings, duo's speculation
    SlotState                              /slots: one slot
    Health                                 /health: whether the lead is up, and how busy
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from msgspec import Meta

from duo.lead.protocol.openai import Timings


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


class DrafterState(TypedDict):
    """A connected back, as the lead's placement judges it (duo.session.placement)."""

    name: str
    state: Annotated[
        Literal["drafting", "resting", "looking"],
        Meta(
            description="drafting; resting: told to draft nothing, its drafts did not pay; "
            "looking: drafting again for a while, to be judged afresh"
        ),
    ]
    why: str


class SlotState(TypedDict):
    """GET /slots: one slot, in llama-server's fields (and duo's n_cached and drafters)."""

    id: int
    n_ctx: int
    speculative: bool  # whether any draft source serves it
    is_processing: bool
    n_cached: int  # tokens in its KV cache (a next prompt sharing them skips them)
    n_prompt_tokens: int  # of its request, while processing (else 0)
    n_decoded: int  # tokens its request generated so far
    drafters: Annotated[
        list[DrafterState],
        Meta(description="the backs that draft for every slot, and what each is doing now"),
    ]


class Health(TypedDict):
    """GET /health: whether the lead is up, and how busy."""

    status: str
    model: str
    drafters: int  # backs connected
    local_drafter: bool
    busy: bool
    slots: int
    slots_busy: int
    queued: int  # requests waiting for a slot
    time: float


class TopProbability(TypedDict):
    id: int
    token: str
    bytes: list[int]
    logprob: float


class TokenProbability(TypedDict):
    """completion_probabilities: one generated token (llama-server's, before sampling)."""

    id: int
    token: str
    bytes: list[int]
    logprob: float
    top_logprobs: list[TopProbability]


class NativeChunk(TypedDict, total=False):
    """A streamed event of /completion or /infill: a piece of one completion's text."""

    index: int
    content: str
    tokens: list[int]
    stop: bool
    id_slot: Annotated[int, Meta(description="-1 (llama-server says the slot at the end)")]
    tokens_predicted: int
    tokens_evaluated: int
    completion_probabilities: list[TokenProbability]


class NativeResult(TypedDict, total=False):
    """One completion of /completion or /infill, whole (an array of them for several
    prompts or n_cmpl; only the response_fields asked for, if any, keyed by their paths).
    Streamed, the last event is this with stop: true, its text already sent."""

    index: int
    content: str
    tokens: Annotated[list[int], Meta(description="the generated tokens")]
    id_slot: int
    stop: bool
    model: str
    tokens_predicted: int
    tokens_evaluated: Annotated[int, Meta(description="the prompt's tokens")]
    generation_settings: dict[str, Any]
    prompt: Annotated[str, Meta(description="the prompt's text, special tokens shown")]
    has_new_line: bool
    truncated: Annotated[bool, Meta(description="the context filled up, or the prompt was cut")]
    stop_type: Annotated[
        Literal["none", "eos", "limit", "word"],
        Meta(
            description="eos: the model ended; limit: n_predict, the context, n_indent or "
            "t_max_predict_ms; word: a stop string"
        ),
    ]
    stopping_word: str
    tokens_cached: Annotated[int, Meta(description="tokens in the slot's KV cache after it")]
    timings: Timings
    completion_probabilities: list[TokenProbability]
