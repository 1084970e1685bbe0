"""The grammar that holds a reply to a tool call: `tool_choice` "required" or a named
function, enforced as llama-server enforces it (llama.cpp's common/chat builds the same
grammar for its Hermes and generic formats when a call is required).

    call_schema(tool)            the JSON schema of one call to a function
    tool_call_gbnf(tools, tags)  GBNF for a reply that is one call to one of `tools`

The reply is `{"name": <the function's name>, "arguments": <an object valid against its
parameters>}`, wrapped in `<tool_call>` ... `</tool_call>` when the chat template writes
calls so (Hermes 2 Pro, Qwen 2.5 and 3, ...), else bare (llama.cpp's generic form): both
are forms `parse_tool_calls` reads. The grammar is complete once the call is, so the only
token allowed after it ends the generation: one call per reply.
"""

from __future__ import annotations

from typing import Any

from duo.llama.grammar import json_schema_rules
from duo.service.tools import CLOSE, OPEN


def call_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a call to `tool` (a checked entry of `tools`); local $refs in its
    parameters point where the parameters now sit."""
    function = tool["function"]
    parameters = function.get("parameters") or {"type": "object"}
    return {
        "type": "object",
        "properties": {
            "name": {"const": function["name"]},
            "arguments": _rebased(parameters, "#/properties/arguments"),
        },
        "required": ["name", "arguments"],
    }


def _rebased(schema: Any, base: str) -> Any:
    """`schema` with each local $ref ("#" or "#/...") made relative to `base` instead."""
    if isinstance(schema, list):
        return [_rebased(s, base) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _rebased(v, base) for k, v in schema.items()}
    ref = schema.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        out["$ref"] = base + ref[1:]
    return out


def tool_call_gbnf(tools: list[dict[str, Any]], tags: bool) -> str:
    """GBNF for a reply that is one call to one of `tools`, inside `<tool_call>` tags if
    `tags` (with the newlines Hermes templates put inside the tags allowed), bare if not.
    Raises UsageError for parameters the grammar cannot enforce."""
    names, rules = json_schema_rules(
        [(f"{t['function']['name']}-call", call_schema(t)) for t in tools]
    )
    call = " | ".join(names)
    root = f'"{OPEN}" "\\n"? ( {call} ) "\\n"? "{CLOSE}"' if tags else f"( {call} )"
    return f"root ::= {root}\n{rules}\n"
