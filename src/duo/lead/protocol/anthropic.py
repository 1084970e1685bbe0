"""Anthropic's Messages API shapes, as duo answers them (duo.lead.anthropic.messages).

MessageBody        POST /v1/messages, whole
StreamEvent        each of its stream's events (message_start ... message_stop)
TokenCount         POST /v1/messages/count_tokens
AnthropicError     every error of those routes, in Anthropic's shape
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from msgspec import Meta

from duo.lead.protocol.openai import Timings

StopReason = Annotated[
    str | None,
    Meta(description="end_turn, max_tokens, stop_sequence or tool_use; null until the end"),
]


class ContentOut(TypedDict):
    """A content block: text, thinking (a reasoning model's thoughts) or tool_use."""

    type: Literal["text", "thinking", "tool_use"]
    text: NotRequired[str]
    thinking: NotRequired[str]
    signature: NotRequired[Annotated[str, Meta(description="empty: duo signs no thoughts")]]
    id: NotRequired[Annotated[str, Meta(examples=["toolu_0a1b2c3d4e5f60718293a4b5"])]]
    name: NotRequired[str]
    input: NotRequired[dict[str, Any]]


class AnthropicUsage(TypedDict):
    input_tokens: Annotated[int, Meta(description="prompt tokens read, not from the cache")]
    output_tokens: int
    cache_read_input_tokens: Annotated[int, Meta(description="prompt tokens the slot held")]
    cache_creation_input_tokens: int


class MessageBody(TypedDict):
    id: Annotated[str, Meta(examples=["msg_0a1b2c3d4e5f60718293a4b5"])]
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[ContentOut]
    stop_reason: StopReason
    stop_sequence: Annotated[str | None, Meta(description="the stop sequence that ended it")]
    usage: AnthropicUsage


class StreamEvent(TypedDict):
    """One event of a stream (`event: <type>` then `data: <this>`): message_start,
    content_block_start, content_block_delta, content_block_stop, message_delta,
    message_stop, or error."""

    type: str
    message: NotRequired[MessageBody]
    index: NotRequired[int]
    content_block: NotRequired[ContentOut]
    delta: NotRequired[dict[str, Any]]
    usage: NotRequired[AnthropicUsage]
    timings: NotRequired[Timings]  # message_delta: llama.cpp's figures, with duo's drafts


class TokenCount(TypedDict):
    input_tokens: int


class AnthropicErrorDetail(TypedDict):
    type: Annotated[
        str,
        Meta(
            description="invalid_request_error (400), authentication_error (401), "
            "not_found_error (404), request_too_large (413), api_error (500), "
            "overloaded_error (503)"
        ),
    ]
    message: str


class AnthropicError(TypedDict):
    type: Literal["error"]
    error: AnthropicErrorDetail
