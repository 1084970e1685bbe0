"""Tool calling: `tools` and `tool_choice` in, through the model's own chat template, and
OpenAI `tool_calls` out, parsed from the generated text.

    Tools                    the tools a request offers and its tool_choice
                             (checked by the request's type, duo.lead.openai.chat)
    template_caps(render)    whether a chat template can show tools to the model
    template_messages(...)   messages as templates expect them (tool-call arguments as objects)
    parse_tool_calls(text)   (content, calls) from a finished generation
    ToolCallStream           the same while the text streams: content goes out as it comes,
                             text that may be a tool call is held back until it is one, and
                             a call's arguments stream as they are written

The tools go to the template as the `tools` variable, as llama-server does in its `--jinja`
mode and as Hugging Face's `apply_chat_template` does; a template that never shows them to
the model cannot call them, and the lead refuses such requests instead of ignoring the tools.

The text is read as llama.cpp's generic and Hermes parsers read it: `<tool_call>{"name": ...,
"arguments": {...}}</tool_call>` blocks (Hermes 2 Pro, Qwen 2.5 and 3, SmolLM3 and more), or a
reply that is nothing but such a JSON object, a list of them, or `{"tool_call": {...}}` /
`{"tool_calls": [...]}` (llama.cpp's generic format). Only calls to offered functions count;
anything else stays text. The output is never changed: a reply that holds no call is the
generated text exactly.

`tool_choice` "required" and a named function show the model the tools it may call (a named
choice shows that function alone) and hold its reply to one call to them with a grammar
(duo.lead.tools.grammar), in the form the template asks for (`TemplateCaps.tool_call_tags`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from duo.core.stops import tail_of
from duo.lead.tools.formats import PREFIXES, ToolCall, json_calls, new_call_id, read_calls

MAX_TOOLS = 128  # OpenAI's bound
OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)

Message = dict[str, Any]
Render = Callable[[list[Message], list[dict[str, Any]] | None], str]


@dataclass(frozen=True)
class Tools:
    """The functions a request offers and how it wants them used."""

    functions: list[dict[str, Any]]  # the request's `tools`, checked
    choice: str  # "auto", "required", or the name of the function to call
    parallel: bool = False  # parallel_tool_calls: a forced reply may hold several calls

    @property
    def names(self) -> set[str]:
        return {t["function"]["name"] for t in self.functions}

    def shown(self) -> list[dict[str, Any]]:
        """The tools the template shows the model: a named choice shows that one alone."""
        if self.choice in ("auto", "required"):
            return self.functions
        return [t for t in self.functions if t["function"]["name"] == self.choice]

    @property
    def forced(self) -> bool:
        """Whether the reply must be a call ("required" or a named function)."""
        return self.choice != "auto"


# -- the template ---------------------------------------------------------------------------

_PROBE_NAME = "duo_probe_function"
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": _PROBE_NAME,
        "description": "Looks something up.",
        "parameters": {
            "type": "object",
            "properties": {"probe_argument": {"type": "string"}},
            "required": ["probe_argument"],
        },
    },
}


@dataclass(frozen=True)
class TemplateCaps:
    """What a chat template can express (llama.cpp's chat_template_caps, in part)."""

    supports_tools: bool  # it shows the tools to the model
    supports_tool_calls: bool  # it shows earlier tool calls in the conversation
    object_arguments: bool  # it wants tool-call arguments as objects, not JSON text
    tool_call_tags: bool  # it writes (or asks for) calls in <tool_call> tags

    def as_json(self) -> dict[str, bool]:
        return {
            "supports_tools": self.supports_tools,
            "supports_tool_calls": self.supports_tool_calls,
            "requires_object_arguments": self.object_arguments,
        }


def template_caps(render: Render) -> TemplateCaps:
    """Probe a template as llama.cpp's minja does: render a conversation with a tool and a
    tool call, and look for them in the prompt."""
    user: Message = {"role": "user", "content": "Look it up."}

    def call(arguments: Any) -> list[Message]:
        function = {"name": _PROBE_NAME, "arguments": arguments}
        tool_call = {"id": "call_probe", "type": "function", "function": function}
        return [
            user,
            {"role": "assistant", "content": None, "tool_calls": [tool_call]},
            {"role": "tool", "tool_call_id": "call_probe", "content": "found"},
        ]

    arguments = {"probe_argument": "probe value"}
    shown = '"probe_argument": "probe value"'
    with_tools = _rendered(render, [user], [_PROBE_TOOL])
    with_call = _rendered(render, call(arguments), [_PROBE_TOOL])
    tools = _PROBE_NAME in with_tools
    objects = shown in with_call
    with_text_call = "" if objects else _rendered(render, call(json.dumps(arguments)), None)
    strings = shown in with_text_call
    # llama.cpp picks its Hermes format for a template that holds "<tool_call>".
    tags = OPEN in with_tools + with_call + with_text_call
    return TemplateCaps(tools, objects or strings, objects, tags)


def _rendered(render: Render, messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
    """The prompt rendered from these messages and tools ("" if the template refuses)."""
    try:
        return render(messages, tools)
    except Exception:  # a template may raise on what it does not know
        return ""


def template_messages(messages: Sequence[Message], object_arguments: bool) -> list[Message]:
    """The messages with each tool call's arguments as the template wants them: JSON text
    (OpenAI's form) parsed into an object where the template writes it out with tojson."""
    if not object_arguments:
        return list(messages)
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls:
            m = {**m, "tool_calls": [_object_arguments(c) for c in calls]}
        out.append(m)
    return out


def _object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    try:
        arguments = json.loads(function["arguments"])
    except (TypeError, ValueError):
        return call
    return {**call, "function": {**function, "arguments": arguments}}


# -- the reply ------------------------------------------------------------------------------


def parse_tool_calls(text: str, names: set[str]) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a reply. Without a call to one of `names`, the content is the
    text exactly; with calls, the text around them without trailing whitespace (None if
    nothing but whitespace is left)."""
    if OPEN in text:
        calls: list[ToolCall] = []
        for block in _BLOCK.findall(text):
            found = json_calls(block, names)  # a block holds JSON: an object, or a list
            if found is None:
                return text, []  # a block that is not a call: the reply is text
            calls.extend(found)
        content = _BLOCK.sub("", text).rstrip()
        return content if content.strip() else None, calls
    found = read_calls(text, names)
    if found:
        return None, found
    return text, []


@dataclass(frozen=True)
class CallPiece:
    """A piece of a call whose arguments stream: the first of a call names it (its `id` and
    `name` set, arguments ""), the others carry its arguments' next JSON text."""

    index: int  # the call's position among the reply's calls
    arguments: str = ""
    id: str = ""
    name: str = ""


# The head of a call whose arguments can stream: a JSON object that names an offered function
# first, bare or in a <tool_call> block, a fence or after Llama's tag, up to its arguments'
# opening brace.
_HEAD = re.compile(
    r"(?:<tool_call>|```(?:json|tool_call)?|<\|python_tag\|>)?\s*"
    r'\{\s*"name"\s*:\s*"([^"\\]+)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)'
)


_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')  # a JSON string's escape
_CLOSE = re.compile(r"^\s*\}\s*(?:</tool_call>|```)?")  # a streamed call's end, after its arguments
_PARTIAL_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")  # one still being written


class ToolCallStream:
    """Parse a reply while it streams: `feed` returns the content that can go out now and
    the pieces of calls whose arguments stream, `finish` the rest of the content and every
    call.

    Content goes out as it comes, except what may still turn into a call: from a possible
    `<tool_call>` on (and the whitespace before it), or a whole reply that starts as JSON.
    What `feed` and `finish` return, joined, is the content `parse_tool_calls` gives.

    A call whose head names an offered function (`{"name": ..., "arguments": {`, in a
    <tool_call> block or as the whole reply) streams its arguments as the model writes
    them, as OpenAI's and llama-server's streams do, rather than waiting for its end: a
    client sees a long call (a whole file written back) as it grows. The calls `finish`
    gives keep the streamed ones' IDs. A reply that ends before a streamed call is whole
    (cut by its length) leaves that call as it was sent, and nothing more; one that goes
    on after a whole streamed call with what is no call keeps that call, the rest content.
    """

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.text = ""
        self.sent = 0  # characters of self.text already returned as content
        self.streamed: list[ToolCall] = []  # calls whose arguments streamed (as sent so far)
        self.scan = 0  # where the streaming call's arguments go on; 0: none streams
        self.after = 0  # where the last streamed call's arguments ended
        self.depth = 0  # the arguments' nesting, and whether inside a string
        self.quoted = False
        self.broken = False  # a streamed call's arguments stopped being JSON

    def feed(self, piece: str) -> tuple[str, list[CallPiece]]:
        self.text += piece
        if self.broken:
            return "", []
        if self.scan:
            return "", self._arguments()
        if self.streamed:  # after a call: only a <tool_call> block may stream another
            at = self.text.find(OPEN, self.after)
            return "", self._head(at) if at >= 0 else []
        text = self.text
        start = text.lstrip()
        if not start or start.startswith(("{", "[", *PREFIXES)) or _begins(start):
            return "", self._head(len(text) - len(start))  # may be a call: wait, or stream
        opened = text.find(OPEN)
        if opened < 0:  # hold back a partial "<tool_call>" at the end
            opened = len(text) - tail_of(text, OPEN)
        safe = len(text[:opened].rstrip())  # and the whitespace before it
        pieces = self._head(opened) if text.startswith(OPEN, opened) else []
        if safe <= self.sent:
            return "", pieces
        out = text[self.sent : safe]
        self.sent = safe
        return out, pieces

    def _head(self, at: int) -> list[CallPiece]:
        """A call's first piece, if a call to an offered function starts at `at`, and what
        of its arguments is written."""
        head = _HEAD.match(self.text, at)
        if head is None or head[1] not in self.names:
            return []
        call = ToolCall(head[1], "", new_call_id())
        self.streamed.append(call)
        self.scan, self.depth = head.end(), 0
        return [CallPiece(len(self.streamed) - 1, "", call.id, call.name), *self._arguments()]

    def _arguments(self) -> list[CallPiece]:
        """The streaming call's arguments written since its last piece, up to their end.

        Only JSON goes out, as clients parse the pieces as they come (the `anthropic` SDK
        does): an escape waits until it is whole, and the first thing JSON does not allow
        in a string (an escape such as `\\'`, a raw newline) ends the streaming; the call
        then stands as it was sent, and the reply, whole, is text."""
        text, begin, end, whole = self.text, self.scan, self.scan, False
        while end < len(text) and not whole:
            c = text[end]
            if self.quoted and c == "\\":
                escape = _ESCAPE.match(text, end)
                if escape is None:
                    self.broken = _PARTIAL_ESCAPE.fullmatch(text, end) is None
                    break
                end = escape.end()
                continue
            end += 1
            if self.quoted:
                self.quoted = c != '"'
                if c < " ":
                    self.broken, end = True, end - 1
                    break
            elif c == '"':
                self.quoted = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                whole = self.depth == 0
        self.scan, self.after = (0 if whole or self.broken else end), end
        if end == begin:
            return []
        index = len(self.streamed) - 1
        call = self.streamed[index]
        self.streamed[index] = ToolCall(call.name, call.arguments + text[begin:end], call.id)
        return [CallPiece(index, text[begin:end])]

    def finish(self) -> tuple[str, list[ToolCall]]:
        content, calls = parse_tool_calls(self.text, self.names)
        content = content or ""
        streamed = self.streamed
        if streamed and [c.name for c in calls[: len(streamed)]] != [c.name for c in streamed]:
            # Read whole, the reply is no call; its streamed calls are out, and stand.
            self.sent = len(self.text)
            if self.scan or self.broken:  # cut short, or not JSON: as they were sent
                return "", []
            rest = _CLOSE.sub("", self.text[self.after :], count=1)  # the call's own end
            return rest.strip(), list(streamed)
        calls = [
            ToolCall(c.name, c.arguments, streamed[i].id) if i < len(streamed) else c
            for i, c in enumerate(calls)
        ]
        # Content returned so far is a prefix of the content (see feed).
        rest = content[self.sent :] if content.startswith(self.text[: self.sent]) else ""
        self.sent = len(self.text)
        return rest, calls


def _begins(text: str) -> bool:
    """Whether `text` is the beginning of one of the forms' prefixes."""
    return any(p.startswith(text) for p in PREFIXES)
