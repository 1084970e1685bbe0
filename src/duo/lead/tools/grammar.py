"""The grammar that holds a reply to a tool call: `tool_choice` "required" or a named
function, enforced as llama-server enforces it (llama.cpp's common/chat builds the same
grammar for its Hermes and generic formats when a call is required).

    call_schema(tool, index)     the JSON schema of one call to a function
    tool_call_gbnf(tools, tags)  GBNF for a reply that is a call to one of `tools` (or
                                 several calls, with parallel_tool_calls)

The reply is `{"name": <the function's name>, "arguments": <an object valid against its
parameters>}`, wrapped in `<tool_call>` ... `</tool_call>` when the chat template writes
calls so (Hermes 2 Pro, Qwen 2.5 and 3, ...), else bare (llama.cpp's generic form): both
are forms `parse_tool_calls` reads. The grammar is complete once the call is, so the only
token allowed after it ends the generation: one call per reply. With `several` (the
request's `parallel_tool_calls`), more blocks may follow, or the bare calls form a JSON list.
"""

from __future__ import annotations

from typing import Any

from duo.errors import UsageError
from duo.lead.schema_refs import hoisted
from duo.lead.tools.calls import CLOSE, OPEN
from duo.llama.grammar import json_schema_rules, unenforced


def call_schema(tool: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The JSON schema of a call to `tool` (a checked entry of `tools`, the `index`th).

    Each local $ref in its parameters points into the call schema's own `$defs`, under a
    key unique to this tool and ref (duo.lead.schema_refs): llama.cpp's converter names a
    ref's rule after the last part of its path, so two tools' `#/$defs/Item` would
    otherwise share one rule."""
    function = tool["function"]
    parameters = function.get("parameters") or {"type": "object"}
    try:
        arguments, defs = hoisted(parameters, prefix=f"tool{index}-")
    except UsageError as e:
        raise UsageError(f"{function['name']!r}: {e}") from None
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, "arguments": arguments},
        "required": ["name", "arguments"],
    }
    if defs:
        schema["$defs"] = defs
    return schema


def tool_call_gbnf(tools: list[dict[str, Any]], tags: bool, several: bool = False) -> str:
    """GBNF for a reply that is one call to one of `tools` (one or more if `several`),
    inside `<tool_call>` tags if `tags` (with the newlines Hermes templates put inside the
    tags allowed), bare if not. Raises UsageError for parameters the grammar cannot
    enforce."""
    for tool in tools:
        name = tool["function"]["name"]
        where = unenforced(tool["function"].get("parameters"))
        if where:
            keyword = where.rsplit("/", 1)[1]
            raise UsageError(
                f"the parameters of {name!r} use '{keyword}' (at {where[:200]}), which a "
                "forced tool call cannot enforce"
            )
    try:
        names, rules = json_schema_rules(
            [(f"{t['function']['name']}-call", call_schema(t, i)) for i, t in enumerate(tools)]
        )
    except UsageError as e:
        raise UsageError(f"the tools' parameters: {e}") from None
    call = f"( {' | '.join(names)} )"
    block = f'"{OPEN}" "\\n"? {call} "\\n"? "{CLOSE}"' if tags else call
    if several:  # blocks a line apart, or a JSON list of bare calls
        listed = f'"[" {call} ( "," " "? {call} )* "]"'
        root = f'duo-block ( "\\n" duo-block )*\nduo-block ::= {block}' if tags else listed
    else:
        root = block
    return f"root ::= {root}\n{rules}\n"
