"""Anthropic's Messages API requests as typed models, and their translation into the one chat
request every door of the lead runs (duo.lead.openai.chat.ChatRequest).

    MessagesRequest      POST /v1/messages
    CountTokensRequest   POST /v1/messages/count_tokens (the same, less the sampling)
    .chat()              the ChatRequest it means

The shapes are the `anthropic` SDK's (types/message_create_params.py): `system` a string or
text blocks; each message's `content` a string or blocks of `text`, `tool_use` (an
assistant's call), `tool_result` (its answer, `is_error` if it failed) and `thinking` (an
assistant's earlier thoughts, shown to the template as reasoning_content). Blocks a text
model cannot read (`image`, `document`) are refused with a 400 that names them; unknown
fields (`cache_control`, `citations`, ...) are ignored.

The translation is llama-server's (server_chat_convert_anthropic_to_oai): the system text
first; a user turn's `tool_result` blocks become `tool` messages, its text one user message;
an assistant turn's text, thoughts and calls one assistant message. `tool_choice` any is
OpenAI's "required", tool a named function; `disable_parallel_tool_use` the inverse of
parallel_tool_calls; `output_config.format` (a JSON schema) response_format's json_schema. A
`tool_result` must answer a `tool_use` of an earlier turn. The current SDK no longer sends
`temperature`, `top_k` and `top_p`; they are still read where a client sends them.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from msgspec import Meta

from duo.errors import UsageError
from duo.lead.body import Fields
from duo.lead.openai.chat import ChatRequest, chat_request
from duo.lead.openai.requests import MAX_STOPS, Stop
from duo.lead.tools.calls import MAX_TOOLS

Json = dict[str, Any]


class ContentBlock(Fields, kw_only=True, tag_field="type"):
    """A content block; `type` says which."""


class TextBlock(ContentBlock, tag="text"):
    text: str


class ImageBlock(ContentBlock, tag="image"):
    source: Any = None


class DocumentBlock(ContentBlock, tag="document"):
    source: Any = None


class ToolUseBlock(ContentBlock, tag="tool_use"):
    id: Annotated[str, Meta(min_length=1)]
    name: Annotated[str, Meta(pattern="^[A-Za-z0-9_.-]{1,64}$")]
    input: Annotated[Json, Meta(description="the call's arguments")]


class ToolResultBlock(ContentBlock, tag="tool_result"):
    tool_use_id: Annotated[str, Meta(description="the tool_use block this answers")]
    content: Annotated[
        str | list[TextBlock | ImageBlock | DocumentBlock] | None,
        Meta(description="the result: text, or text blocks"),
    ] = None
    is_error: Annotated[bool | None, Meta(description="the call failed")] = False


class ThinkingBlock(ContentBlock, tag="thinking"):
    thinking: str
    signature: Annotated[str | None, Meta(description="accepted, and unused")] = None


class RedactedThinkingBlock(ContentBlock, tag="redacted_thinking"):
    data: Annotated[str | None, Meta(description="accepted, and dropped")] = None


Content = TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock
AnyBlock = Content | ThinkingBlock | RedactedThinkingBlock


class MessageParam(Fields, kw_only=True):
    role: Literal["user", "assistant"]
    content: Annotated[str | list[AnyBlock], Meta(description="text, or content blocks")]


class ToolParam(Fields, kw_only=True):
    name: Annotated[str, Meta(pattern="^[A-Za-z0-9_.-]{1,64}$")]
    description: str | None = None
    input_schema: Annotated[Json, Meta(description="a JSON schema of the input")]
    type: Annotated[
        Literal["custom"] | None,
        Meta(description="custom (the default); Anthropic's server tools are not served"),
    ] = None


class ToolChoice(Fields, kw_only=True, tag_field="type"):
    disable_parallel_tool_use: Annotated[
        bool | None, Meta(description="at most one call (unset: as the choice's default)")
    ] = None


class AutoChoice(ToolChoice, tag="auto"):
    pass


class AnyChoice(ToolChoice, tag="any"):
    pass


class NamedChoice(ToolChoice, tag="tool"):
    name: str


class NoChoice(ToolChoice, tag="none"):
    pass


class Thinking(Fields, kw_only=True):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int | None, Meta(description="accepted, and unused")] = None


class OutputFormat(Fields, kw_only=True):
    type: Literal["json_schema"]
    schema: Annotated[Json, Meta(description="the JSON schema the reply follows")]


class OutputConfig(Fields, kw_only=True):
    format: Annotated[
        OutputFormat | None, Meta(description="structured output: the reply held to a schema")
    ] = None
    effort: Annotated[str | None, Meta(description="accepted, and unused")] = None


class Metadata(Fields, kw_only=True):
    user_id: Annotated[str | None, Meta(description="accepted, and unused")] = None


class CountTokensRequest(Fields, kw_only=True):
    model: Annotated[str | None, Meta(description="ignored: the lead serves one model")] = None
    messages: Annotated[list[MessageParam], Meta(min_length=1)]
    system: Annotated[
        str | list[TextBlock] | None, Meta(description="the system prompt: text or text blocks")
    ] = None
    tools: Annotated[list[ToolParam], Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: AutoChoice | AnyChoice | NamedChoice | NoChoice | None = None
    thinking: Annotated[
        Thinking | None,
        Meta(description="accepted: a reasoning model's thoughts come as thinking blocks"),
    ] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        names = [t.name for t in self.tools or ()]
        if len(set(names)) != len(names):
            raise UsageError("'tools' names a tool twice", param="tools")
        choice = self.tool_choice
        if isinstance(choice, AnyChoice | NamedChoice) and not names:
            raise UsageError("'tool_choice' needs 'tools'", param="tool_choice")
        if isinstance(choice, NamedChoice) and choice.name not in names:
            raise UsageError(
                "'tool_choice' names a tool that is not in 'tools'", param="tool_choice"
            )
        self.chat_messages()  # the blocks' faults are the request's

    def texts(self) -> list[tuple[str, list[str]]]:
        """The text of each field but the messages that goes into the prompt, by field."""
        system = self.system
        text = system if isinstance(system, str | None) else "".join(b.text for b in system)
        tools = [json.dumps(_function(t)) for t in self.tools or ()]
        return [("system", [text or ""]), ("tools", tools)]

    def chat_messages(self) -> list[Json]:
        """The conversation as chat completions' messages."""
        messages: list[Json] = []
        if self.system is not None:
            system = self.system
            text = system if isinstance(system, str) else "".join(b.text for b in system)
            messages.append({"role": "system", "content": text})
        called: set[str] = set()
        for i, message in enumerate(self.messages):
            where = f"messages[{i}]"
            if isinstance(message.content, str):
                messages.append({"role": message.role, "content": message.content})
            elif message.role == "assistant":
                messages.append(_assistant(message.content, where, called))
            else:
                messages += _user(message.content, where, called)
        return messages

    def chat_fields(self) -> Json:
        """The fields of the ChatRequest this request means, sampling apart."""
        fields: Json = {"messages": self.chat_messages()}
        if self.tools:
            fields["tools"] = [_function(t) for t in self.tools]
        choice = self.tool_choice
        if choice is not None:
            if isinstance(choice, NamedChoice):
                fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
            else:
                modes = {AutoChoice: "auto", AnyChoice: "required", NoChoice: "none"}
                fields["tool_choice"] = modes[type(choice)]
            if choice.disable_parallel_tool_use is not None:
                fields["parallel_tool_calls"] = not choice.disable_parallel_tool_use
        return fields

    def chat(self) -> ChatRequest:
        return chat_request(self.chat_fields())


class MessagesRequest(CountTokensRequest, kw_only=True):
    max_tokens: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="the most tokens to generate (unset: up to the context)"),
    ] = None
    stop_sequences: Annotated[
        Annotated[list[Stop], Meta(max_length=MAX_STOPS)] | None,
        Meta(description="generation stops before any of these strings"),
    ] = None
    temperature: Annotated[
        Annotated[float, Meta(ge=0)] | None, Meta(description="0: greedy (unset: the lead's)")
    ] = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    stream: Annotated[bool | None, Meta(description="answer as Anthropic's stream events")] = False
    metadata: Metadata | None = None
    output_config: OutputConfig | None = None

    def chat(self) -> ChatRequest:
        fields = self.chat_fields()
        form = self.output_config.format if self.output_config is not None else None
        if form is not None:
            schema = {"name": "output", "schema": form.schema}
            fields["response_format"] = {"type": "json_schema", "json_schema": schema}
        sampling = {
            "max_tokens": self.max_tokens,
            "stop": self.stop_sequences,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
        }
        fields |= {k: v for k, v in sampling.items() if v is not None}
        return chat_request(fields)


def _function(tool: ToolParam) -> Json:
    function: Json = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _unreadable(block: ContentBlock, where: str) -> UsageError:
    kind = "image" if isinstance(block, ImageBlock) else "document"
    return UsageError(
        f"{where}: {kind} blocks are not supported (the model reads text only)", param="messages"
    )


def _assistant(blocks: list[AnyBlock], where: str, called: set[str]) -> Json:
    """An assistant turn: its text, thoughts and calls as one chat message."""
    text, thoughts, calls = [], [], []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ThinkingBlock):
            thoughts.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            called.add(block.id)
            arguments = json.dumps(block.input, ensure_ascii=False)
            function = {"name": block.name, "arguments": arguments}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif isinstance(block, ImageBlock | DocumentBlock):
            raise _unreadable(block, at)
        elif isinstance(block, ToolResultBlock):
            raise UsageError(f"{at}: tool_result blocks belong in a user turn", param="messages")
    message: Json = {"role": "assistant", "content": "".join(text) or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    return message


def _user(blocks: list[AnyBlock], where: str, called: set[str]) -> list[Json]:
    """A user turn: its tool results as tool messages, then its text as one message."""
    results, text = [], []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ToolResultBlock):
            if block.tool_use_id not in called:
                raise UsageError(
                    f"{at}.tool_use_id: no earlier tool_use block has the id {block.tool_use_id!r}",
                    param="messages",
                )
            results.append(_result(block, at))
        elif isinstance(block, ImageBlock | DocumentBlock):
            raise _unreadable(block, at)
        else:
            raise UsageError(
                f"{at}: {block_type(block)} blocks belong in an assistant turn", param="messages"
            )
    out = results
    if text or not results:
        out.append({"role": "user", "content": "".join(text)})
    return out


def _result(block: ToolResultBlock, where: str) -> Json:
    content = block.content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, TextBlock):
                raise _unreadable(part, f"{where}.content[{k}]")
            parts.append(part.text)
        content = "".join(parts)
    text = content or ""
    if block.is_error:
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}


def block_type(block: ContentBlock) -> str:
    return str(block.__struct_config__.tag)
