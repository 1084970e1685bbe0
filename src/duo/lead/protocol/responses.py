"""OpenAI's Responses API shapes, as duo answers them (duo.lead.responses.routes).

ResponseBody    POST /v1/responses, whole; also inside response.created,
                response.in_progress and response.completed events
ResponseEvent   each event of its stream
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from msgspec import Meta


class Part(TypedDict):
    """A message's output_text, or a reasoning item's reasoning_text."""

    type: Literal["output_text", "reasoning_text"]
    text: str
    annotations: NotRequired[list[Any]]


class OutputItem(TypedDict):
    """An output item: a message, reasoning (a reasoning model's thoughts), or a
    function_call."""

    type: Literal["message", "reasoning", "function_call"]
    id: Annotated[str, Meta(examples=["msg_0a1b2c3d4e5f60718293a4b5"])]
    status: Literal["in_progress", "completed", "incomplete"]
    role: NotRequired[Literal["assistant"]]
    content: NotRequired[list[Part]]
    summary: NotRequired[list[Any]]
    call_id: NotRequired[str]
    name: NotRequired[str]
    arguments: NotRequired[Annotated[str, Meta(description="JSON text")]]


class InputDetails(TypedDict):
    cached_tokens: int


class OutputDetails(TypedDict):
    reasoning_tokens: int


class ResponseUsage(TypedDict):
    input_tokens: int
    input_tokens_details: InputDetails
    output_tokens: int
    output_tokens_details: OutputDetails
    total_tokens: int


class Incomplete(TypedDict):
    reason: Literal["max_output_tokens"]


class ResponseBody(TypedDict):
    id: Annotated[str, Meta(examples=["resp_0a1b2c3d4e5f60718293a4b5"])]
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    error: dict[str, str] | None
    incomplete_details: Incomplete | None
    model: str
    instructions: str | None
    output: list[OutputItem]
    parallel_tool_calls: bool
    tool_choice: Any
    tools: list[Any]
    temperature: float | None
    top_p: float | None
    max_output_tokens: int | None
    previous_response_id: None
    store: Annotated[bool, Meta(description="false: duo stores nothing")]
    text: Any
    metadata: dict[str, str]
    usage: ResponseUsage | None


class ResponseEvent(TypedDict):
    """One event of a stream (`event: <type>` then `data: <this>`), from response.created
    to response.completed."""

    type: str
    sequence_number: int
    response: NotRequired[ResponseBody]
    output_index: NotRequired[int]
    content_index: NotRequired[int]
    item_id: NotRequired[str]
    item: NotRequired[OutputItem]
    part: NotRequired[Part]
    delta: NotRequired[str]
    text: NotRequired[str]
    arguments: NotRequired[str]
