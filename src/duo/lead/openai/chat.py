"""The chat request: its messages, tools and tool_choice, on top of the shared sampling fields.

    ChatRequest        POST /v1/chat/completions; /apply-template takes the same body
    chat_request(...)  one made from another API's request (Anthropic's, Responses)
    .template_messages()  the conversation as chat templates take it
    .offered_tools()      the tools the reply may call, and how (duo.lead.tools.calls.Tools)

Messages hold text: a string, or a list of text parts (joined); an assistant turn may call
tools instead (`tool_calls`, its `arguments` JSON text), and a tool's result names its call
(`tool_call_id`). Whether the model's template can show tools and earlier calls is the
lead's to say (duo.lead.openai.prompts).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from duo.core.logprobs import MAX_TOP_LOGPROBS
from duo.errors import UsageError
from duo.lead.body import Fields, field_error
from duo.lead.openai.requests import Json, Sampling
from duo.lead.tools.calls import MAX_TOOLS, Tools


class ContentPart(Fields, kw_only=True):
    type: Annotated[str, Meta(description="only text parts are supported")]
    text: str | None = None


class FunctionCall(Fields, kw_only=True):
    name: str
    arguments: Annotated[str, Meta(description="JSON text")]


class AssistantToolCall(Fields, kw_only=True):
    id: str | None = None
    type: Annotated[str | None, Meta(description="function")] = "function"
    function: FunctionCall

    def shown(self) -> Json:
        function = {"name": self.function.name, "arguments": self.function.arguments}
        return {"id": self.id or "", "type": "function", "function": function}


class Message(Fields, kw_only=True):
    role: Annotated[str, Meta(examples=["user"])]
    content: Annotated[
        str | list[ContentPart] | None,
        Meta(description="text, or text parts; null in an assistant turn that calls tools"),
    ] = None
    name: str | None = None
    tool_call_id: Annotated[str | None, Meta(description="the call a tool result answers")] = None
    tool_calls: Annotated[
        list[AssistantToolCall] | None, Meta(description="an assistant turn's calls to tools")
    ] = None
    reasoning_content: Annotated[
        str | None, Meta(description="an assistant turn's thoughts, shown to the template")
    ] = None

    def check(self, i: int) -> None:
        if self.content is None and not self.tool_calls:
            raise UsageError(f"messages[{i}] needs a string 'content'", param="messages")
        if isinstance(self.content, list) and not all(
            p.type == "text" and p.text is not None for p in self.content
        ):
            raise UsageError(f"messages[{i}]: only text content is supported", param="messages")

    def shown(self) -> Json:
        """The message as chat templates take it: role and content (text), plus an
        assistant's `tool_calls` and a tool result's `tool_call_id` and `name`."""
        content = self.content or ""
        if isinstance(content, list):
            content = "".join(p.text or "" for p in content)  # all text: see check
        message: Json = {"role": self.role, "content": content}
        if self.tool_calls:
            message["tool_calls"] = [call.shown() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            message["name"] = self.name
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        return message


class Function(Fields, kw_only=True):
    name: Annotated[str, Meta(pattern="^[A-Za-z0-9_.-]{1,64}$")]
    description: str | None = None
    parameters: Annotated[Json | None, Meta(description="a JSON schema of the arguments")] = None
    strict: bool | None = None


class Tool(Fields, kw_only=True):
    type: Literal["function"]
    function: Function

    def shown(self) -> Json:
        """The tool as the request gave it (the template shows it to the model)."""
        f = self.function
        fields = {"description": f.description, "parameters": f.parameters, "strict": f.strict}
        function = {"name": f.name, **{k: v for k, v in fields.items() if v is not None}}
        return {"type": "function", "function": function}


class FunctionName(Fields, kw_only=True):
    name: str


class NamedTool(Fields, kw_only=True):
    type: Literal["function"]
    function: FunctionName


class ChatRequest(Sampling, kw_only=True):
    messages: Annotated[list[Message], Meta(min_length=1)]
    tools: Annotated[
        Annotated[list[Tool], Meta(max_length=MAX_TOOLS)] | None,
        Meta(description="functions the model may call, shown to it by its chat template"),
    ] = None
    tool_choice: Annotated[
        Literal["none", "auto", "required"] | NamedTool | None,
        Meta(description="auto (the default with tools), none, required, or one function"),
    ] = None
    parallel_tool_calls: Annotated[
        bool | None,
        Meta(
            description="with tool_choice required or a function: several calls may come "
            "(unset: one, as llama-server)"
        ),
    ] = None
    functions: Annotated[Any, Meta(extra_json_schema={"deprecated": True})] = None
    function_call: Annotated[Any, Meta(extra_json_schema={"deprecated": True})] = None
    logprobs: Annotated[bool | None, Meta(description="the logprobs of each generated token")] = (
        False
    )
    top_logprobs: Annotated[
        Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)] | None,
        Meta(description="with logprobs: this many alternatives for each token"),
    ] = None

    reasoning_format: Annotated[
        Literal["auto", "deepseek", "deepseek-legacy", "none"] | None,
        Meta(description="how a reasoning model's thoughts are given (default: the lead's)"),
    ] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.top_logprobs is not None and not self.logprobs:
            raise UsageError("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        if self.functions is not None or self.function_call is not None:
            raise UsageError(
                "'functions' and 'function_call' are deprecated; use 'tools' and 'tool_choice'",
                param="functions",
            )
        for i, message in enumerate(self.messages):
            message.check(i)
        names = [t.function.name for t in self.tools or ()]
        if len(set(names)) != len(names):
            raise UsageError("'tools' names a function twice", param="tools")
        choice = self.tool_choice
        if not names and choice not in (None, "none", "auto"):
            raise UsageError("'tool_choice' needs 'tools'", param="tool_choice")
        if isinstance(choice, NamedTool) and choice.function.name not in names:
            raise UsageError(
                "'tool_choice' names a function that is not in 'tools'", param="tool_choice"
            )

    def logprobs_wanted(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def template_messages(self) -> list[Json]:
        return [m.shown() for m in self.messages]

    def offered_tools(self) -> Tools | None:
        """The tools and how the reply may use them; None when no tool may be called (no
        tools, or tool_choice "none": then the tools are neither shown nor parsed)."""
        choice = self.tool_choice
        if not self.tools or choice == "none":
            return None
        functions = [t.shown() for t in self.tools]
        parallel = bool(self.parallel_tool_calls)
        if isinstance(choice, NamedTool):
            return Tools(functions, choice.function.name, parallel)
        return Tools(functions, "required" if choice == "required" else "auto", parallel)


def chat_request(fields: Json) -> ChatRequest:
    """A ChatRequest from another API's translation of a request (duo.lead.anthropic,
    duo.lead.responses); what is still wrong with it is that request's fault (a tool's
    schema that is not an object, say): a UsageError."""
    try:
        return msgspec.convert(fields, ChatRequest)
    except msgspec.ValidationError as e:
        raise field_error(str(e)) from None
