"""OpenAI's Responses API requests as typed models, and their translation into the one chat
request every door of the lead runs (duo.lead.openai.chat.ChatRequest).

    ResponsesRequest   POST /v1/responses
    .chat()            the ChatRequest it means

The shapes are the `openai` SDK's (types/responses/response_create_params.py): `instructions`
(the system text) and `input`, a string or a list of items. The items are messages (a
role and a string or content parts; `type` may be left out, as the SDK's easy form does),
`function_call` (an assistant's call: call_id, name, arguments), `function_call_output`
(its result, by call_id) and `reasoning` (earlier thoughts, shown to the template as the
next assistant message's reasoning_content). Tools are flat (`{"type": "function", "name",
"parameters"}`), and only they are shown to the model: other kinds (web_search, a namespace of
tools) are skipped; `text.format` holds the reply to a JSON schema as response_format does.

duo keeps no responses: each request carries its whole conversation (Codex CLI sends
`store: false` and does so). `previous_response_id` and `conversation`, which ask for a
stored one, are refused with a 400 that says so; `store` itself is accepted and nothing is
stored. `background` is refused; `reasoning`, `include`, `truncation`, `prompt_cache_key`
and the like are accepted and have no effect.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from msgspec import Meta

from duo.errors import UsageError
from duo.lead.body import Fields
from duo.lead.openai.chat import ChatRequest, chat_request
from duo.lead.tools.calls import MAX_TOOLS

Json = dict[str, Any]
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


class InputPart(Fields, kw_only=True):
    type: Annotated[str, Meta(description="input_text or output_text (text parts only)")]
    text: str | None = None


class Item(Fields, kw_only=True):
    """An item of `input`: which fields it needs depends on its type."""

    type: Annotated[
        Literal["message", "function_call", "function_call_output", "reasoning"] | None,
        Meta(description="message (the default), function_call, function_call_output, reasoning"),
    ] = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: Annotated[
        str | list[InputPart] | None, Meta(description="a message's text, or its text parts")
    ] = None
    call_id: Annotated[str | None, Meta(description="a call, and the output that answers it")] = (
        None
    )
    name: str | None = None
    arguments: Annotated[str | None, Meta(description="a call's arguments, JSON text")] = None
    output: Annotated[
        str | list[InputPart] | None, Meta(description="a call's result: text, or text parts")
    ] = None
    summary: Annotated[list[InputPart] | None, Meta(description="reasoning's summary")] = None
    id: str | None = None
    status: str | None = None

    def check(self, where: str) -> None:
        needs = {
            "message": ("role", "content"),
            "function_call": ("call_id", "name", "arguments"),
            "function_call_output": ("call_id", "output"),
            "reasoning": (),
        }[self.type or "message"]
        for name in needs:
            if getattr(self, name) is None:
                raise UsageError(f"'{where}.{name}' is required for a {self.type}", param="input")
        for parts, field in ((self.content, "content"), (self.output, "output")):
            for k, part in enumerate(parts if isinstance(parts, list) else ()):
                if part.type not in TEXT_PARTS or part.text is None:
                    raise UsageError(
                        f"'{where}.{field}[{k}]': only text parts are supported "
                        f"(the model reads text only), not {part.type!r}",
                        param="input",
                    )


class ResponsesTool(Fields, kw_only=True):
    """A tool. Function tools are shown to the model; the others (OpenAI's hosted tools,
    such as web_search, and namespaces of tools, which Codex CLI sends by default) are
    skipped: the model cannot call them."""

    type: Annotated[str, Meta(description="function; other kinds are skipped")]
    name: Annotated[str, Meta(pattern="^[A-Za-z0-9_.-]{1,64}$")] | None = None
    description: str | None = None
    parameters: Annotated[Json | None, Meta(description="a JSON schema of the arguments")] = None
    strict: bool | None = None


class NamedFunction(Fields, kw_only=True):
    type: Literal["function"]
    name: str


class Format(Fields, kw_only=True):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema: Annotated[Json | None, Meta(description="with json_schema: the schema")] = None
    description: str | None = None
    strict: bool | None = None


class TextOptions(Fields, kw_only=True):
    format: Format | None = None
    verbosity: Annotated[str | None, Meta(description="accepted, and unused")] = None


class ResponsesRequest(Fields, kw_only=True):
    model: Annotated[str | None, Meta(description="ignored: the lead serves one model")] = None
    instructions: Annotated[str | None, Meta(description="the system text")] = None
    input: Annotated[
        str | Annotated[list[Item], Meta(min_length=1)],
        Meta(description="the user's text, or the conversation's items"),
    ]
    tools: Annotated[list[ResponsesTool], Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = None
    parallel_tool_calls: Annotated[
        bool | None, Meta(description="several calls in one reply (default true)")
    ] = True
    max_output_tokens: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="the most tokens to generate (unset: up to the context)"),
    ] = None
    temperature: Annotated[
        Annotated[float, Meta(ge=0)] | None, Meta(description="0: greedy (unset: the lead's)")
    ] = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    text: TextOptions | None = None
    stream: Annotated[bool | None, Meta(description="answer as the Responses API's events")] = False
    store: Annotated[bool | None, Meta(description="accepted: duo stores nothing")] = None
    previous_response_id: Annotated[
        str | None, Meta(description="refused: duo keeps no responses (send the conversation)")
    ] = None
    conversation: Annotated[Any, Meta(description="refused: duo keeps no conversations")] = None
    background: Annotated[bool | None, Meta(description="refused when true")] = None
    metadata: Annotated[dict[str, str] | None, Meta(description="echoed in the response")] = None
    user: Annotated[str | None, Meta(description="accepted, and unused")] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("previous_response_id", "conversation"):
            if getattr(self, name) is not None:
                raise UsageError(
                    f"'{name}' asks for a stored response, and duo keeps none: send the whole "
                    "conversation in 'input' (as with store: false)",
                    param=name,
                )
        if self.background:
            raise UsageError("'background' responses are not supported", param="background")
        for i, tool in enumerate(self.tools or ()):
            if tool.type == "function" and tool.name is None:
                raise UsageError(f"'tools[{i}].name' is required", param="tools")
        names = [t.name for t in self.functions()]
        if len(set(names)) != len(names):
            raise UsageError("'tools' names a function twice", param="tools")
        choice = self.tool_choice
        if isinstance(choice, NamedFunction) and choice.name not in names:
            raise UsageError(
                "'tool_choice' names a function that is not in 'tools'", param="tool_choice"
            )
        if choice == "required" and not names:
            raise UsageError("'tool_choice' needs 'tools'", param="tool_choice")
        if isinstance(self.input, list):
            for i, item in enumerate(self.input):
                item.check(f"input[{i}]")
        self.chat_messages()  # the conversation's faults are the request's

    def texts(self) -> list[tuple[str, list[str]]]:
        """The text of each field but the input that goes into the prompt, by field."""
        tools = [json.dumps(_function(t)) for t in self.functions()]
        return [("instructions", [self.instructions or ""]), ("tools", tools)]

    def functions(self) -> list[ResponsesTool]:
        """The function tools (the only ones the model can call)."""
        return [t for t in self.tools or () if t.type == "function"]

    def chat_messages(self) -> list[Json]:
        """The conversation as chat completions' messages: consecutive calls (and the
        thoughts before them) join the assistant message they belong to."""
        messages: list[Json] = []
        if self.instructions is not None:
            messages.append({"role": "system", "content": self.instructions})
        if isinstance(self.input, str):
            return [*messages, {"role": "user", "content": self.input}]
        called: set[str] = set()
        thoughts: list[str] = []
        for i, item in enumerate(self.input):
            if item.type == "reasoning":
                thoughts += [_text(item.content) or _text(item.summary)]
                continue
            if item.type == "function_call_output":
                if item.call_id not in called:
                    raise UsageError(
                        f"'input[{i}].call_id': no earlier function_call has the call_id "
                        f"{item.call_id!r}",
                        param="input",
                    )
                content = _text(item.output)
                messages.append({"role": "tool", "tool_call_id": item.call_id, "content": content})
                continue
            role = "system" if item.role == "developer" else item.role
            last = messages[-1] if messages else None
            if item.type == "function_call":
                assert item.call_id is not None  # Item.check
                called.add(item.call_id)
                function = {"name": item.name, "arguments": item.arguments}
                call = {"id": item.call_id, "type": "function", "function": function}
                if last is None or last["role"] != "assistant":  # a call of its own
                    last = {"role": "assistant", "content": None}
                    messages.append(last)
                last.setdefault("tool_calls", []).append(call)
            else:
                last = {"role": role, "content": _text(item.content)}
                messages.append(last)
            if thoughts and last["role"] == "assistant":
                last["reasoning_content"] = "".join(thoughts)
                thoughts = []
        return messages

    def chat(self) -> ChatRequest:
        """The ChatRequest this request means."""
        fields: Json = {"messages": self.chat_messages()}
        if self.functions():
            fields["tools"] = [_function(t) for t in self.functions()]
        choice = self.tool_choice
        if isinstance(choice, NamedFunction):
            fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        elif choice is not None:
            fields["tool_choice"] = choice
        fields["parallel_tool_calls"] = self.parallel_tool_calls
        form = self.text.format if self.text is not None else None
        if form is not None and form.type != "text":
            schema = {"name": form.name, "schema": form.schema, "strict": form.strict}
            fields["response_format"] = (
                {"type": "json_schema", "json_schema": schema}
                if form.type == "json_schema"
                else {"type": "json_object"}
            )
        sampling = {
            "max_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
        }
        fields |= {k: v for k, v in sampling.items() if v is not None}
        return chat_request(fields)


def _text(parts: str | list[InputPart] | None) -> str:
    if isinstance(parts, list):
        return "".join(p.text or "" for p in parts)
    return parts or ""


def _function(tool: ResponsesTool) -> Json:
    function: Json = {"name": tool.name}
    fields = {"description": tool.description, "parameters": tool.parameters, "strict": tool.strict}
    function |= {k: v for k, v in fields.items() if v is not None}
    return {"type": "function", "function": function}
