"""The forms model families write tool calls in, besides `<tool_call>` blocks, as
llama.cpp's chat parsers read them. Each is a whole reply that is nothing but calls:

    [TOOL_CALLS][{"name", "arguments"}, ...]     Mistral Nemo, Mistral Small 3
    [TOOL_CALLS]name[ARGS]{...} ...              Mistral's later models (Magistral, Devstral)
    <|python_tag|>{"name", "parameters"}; ...    Llama 3.1-3.3 (the tag is optional: one or
                                                 several JSON objects, `;` or lines apart)
    ```tool_code name(arg=...)```, ```json {}``` Gemma, in a fenced block
    {"tool_call": ...}, {"tool_calls": [...]}    llama.cpp's generic form; a list of calls

`read_calls(text, names)` gives the calls, or None when the reply is anything else (then
it is text, exactly as generated). Only calls to `names` count.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

MISTRAL, LLAMA, FENCE = "[TOOL_CALLS]", "<|python_tag|>", "```"
PREFIXES = (MISTRAL, LLAMA, FENCE)  # a streamed reply starting so may be calls: held back
_ARGS = "[ARGS]"
_FENCED = re.compile(r"```(?:tool_code|tool_call|json|python)?\s*\n?(.*?)\n?\s*```", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def read_calls(text: str, names: set[str]) -> list[ToolCall] | None:
    """The calls a whole reply is made of, in any of the forms above; None if it is not
    (only) calls to `names`."""
    text = text.strip()
    if text.startswith(MISTRAL):
        return _mistral(text, names)
    if text.startswith(FENCE):
        fenced = _FENCED.fullmatch(text)
        if fenced is None:
            return None
        inner = fenced[1].strip()
        return json_calls(inner, names) or _python_calls(inner, names)
    return json_calls(text.removeprefix(LLAMA).strip(), names)


def calls_of(value: Any, names: set[str]) -> list[ToolCall] | None:
    """The calls a parsed JSON value holds, or None if it is not (only) calls."""
    if isinstance(value, dict) and set(value) == {"tool_call"}:
        value = value["tool_call"]
    elif isinstance(value, dict) and set(value) == {"tool_calls"}:
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict):
            return None
        if isinstance(item.get("function"), dict):  # OpenAI's own shape
            item = item["function"]
        name = item.get("name")
        arguments = item.get("arguments", item.get("parameters", {}))
        if name not in names:
            return None
        call = _call(name, arguments)
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _call(name: str, arguments: Any) -> ToolCall | None:
    if isinstance(arguments, str):
        return ToolCall(name, arguments, new_call_id())
    if isinstance(arguments, dict):
        return ToolCall(name, json.dumps(arguments, ensure_ascii=False), new_call_id())
    return None


def json_calls(text: str, names: set[str]) -> list[ToolCall] | None:
    """One JSON value of calls, or several JSON objects apart by `;`, `,` or whitespace."""
    text = text.strip()
    if not text.startswith(("{", "[")):
        return None
    decoder, calls, at = json.JSONDecoder(), [], 0
    while at < len(text):
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
        found = calls_of(value, names)
        if found is None:
            return None
        calls.extend(found)
        while at < len(text) and text[at] in ";, \t\r\n":
            at += 1
    return calls or None


def _mistral(text: str, names: set[str]) -> list[ToolCall] | None:
    body = text.removeprefix(MISTRAL).strip()
    if body.startswith("["):  # [TOOL_CALLS][{...}, ...]
        return json_calls(body, names)
    calls = []
    for part in text.split(MISTRAL)[1:]:  # [TOOL_CALLS]name[ARGS]{...}, repeated
        name, sep, arguments = part.partition(_ARGS)
        try:
            value = json.loads(arguments) if sep else None
        except ValueError:
            return None
        call = _call(name.strip(), value) if name.strip() in names else None
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _python_calls(text: str, names: set[str]) -> list[ToolCall] | None:
    """Gemma's tool_code: `name(arg=literal, ...)` calls, one a line (in `print(...)` or
    not); arguments must be keywords with literal values."""
    try:
        tree = ast.parse(text, mode="exec")
    except SyntaxError:
        return None
    calls = []
    for statement in tree.body:
        node = statement.value if isinstance(statement, ast.Expr) else None
        if isinstance(node, ast.Call) and _named(node) == "print" and len(node.args) == 1:
            node = node.args[0]
        if not isinstance(node, ast.Call) or node.args or _named(node) not in names:
            return None
        try:
            arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        except ValueError:
            return None
        if len(arguments) != len(node.keywords):  # **kwargs
            return None
        call = _call(_named(node) or "", arguments)
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _named(node: ast.Call) -> str | None:
    return node.func.id if isinstance(node.func, ast.Name) else None
