"""The grammar that forces a tool call: the call's JSON schema, the GBNF in the Hermes
(tagged) and generic (bare) forms, and the template probe that picks between them."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from duo.errors import DuoError
from duo.lead.tools.calls import template_caps
from duo.lead.tools.grammar import call_schema, tool_call_gbnf
from tests.unit.lead.tools.test_calls import QWEN25, TIME, WEATHER, renderer

# Parameters with a local $ref, as the OpenAI SDK writes Pydantic models.
BOOKING = {
    "type": "function",
    "function": {
        "name": "book.room",
        "parameters": {
            "type": "object",
            "properties": {"guest": {"$ref": "#/$defs/Guest"}, "nights": {"type": "integer"}},
            "required": ["guest", "nights"],
            "$defs": {
                "Guest": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                }
            },
        },
    },
}

# A template that shows the tools but says nothing of <tool_call>: the generic form.
GENERIC = (
    "{% if tools %}Functions: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
)


def rules(gbnf: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in gbnf.strip().splitlines())


@pytest.mark.parametrize(
    ("tool", "call", "valid"),
    [
        (WEATHER, {"name": "get_weather", "arguments": {"city": "Paris"}}, True),
        (WEATHER, {"name": "get_weather", "arguments": {}}, False),
        (WEATHER, {"name": "get_time", "arguments": {"city": "Paris"}}, False),
        (WEATHER, {"name": "get_weather"}, False),
        (TIME, {"name": "get_time", "arguments": {}}, True),
        (TIME, {"name": "get_time", "arguments": "{}"}, False),
        (BOOKING, {"name": "book.room", "arguments": {"guest": {"name": "A"}, "nights": 2}}, True),
        (BOOKING, {"name": "book.room", "arguments": {"guest": {}, "nights": 2}}, False),
    ],
)
def test_call_schema(tool: dict[str, Any], call: dict[str, Any], valid: bool) -> None:
    validator = jsonschema.Draft202012Validator(call_schema(tool))
    assert validator.is_valid(call) == valid


def test_call_schema_moves_local_refs_to_its_own_defs_and_leaves_the_tool_alone() -> None:
    schema = call_schema(BOOKING, 2)
    guest = schema["properties"]["arguments"]["properties"]["guest"]
    assert guest == {"$ref": "#/$defs/tool2-ref0"}
    assert schema["$defs"]["tool2-ref0"]["required"] == ["name"]
    assert BOOKING["function"]["parameters"]["properties"]["guest"] == {  # type: ignore[index]
        "$ref": "#/$defs/Guest"
    }
    # A recursive schema: "#" is the arguments themselves, moved to $defs.
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    schema = call_schema({"type": "function", "function": {"name": "t", "parameters": tree}})
    assert schema["properties"]["arguments"] == {"$ref": "#/$defs/tool0-ref0"}
    assert schema["$defs"]["tool0-ref0"]["properties"]["kids"]["items"] == {
        "$ref": "#/$defs/tool0-ref0"
    }
    jsonschema.validate({"name": "t", "arguments": {"kids": [{"kids": []}]}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "t", "arguments": {"kids": [{"kids": 1}]}}, schema)


def test_two_tools_defs_of_one_name_stay_apart() -> None:
    """The converter names a ref's rule after its last path part: two tools' `Item`s."""

    def tool(name: str, item: dict[str, Any]) -> dict[str, Any]:
        parameters = {
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
            "$defs": {"Item": item},
        }
        return {"type": "function", "function": {"name": name, "parameters": parameters}}

    sku = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
    qty = {"type": "object", "properties": {"qty": {"type": "integer"}}, "required": ["qty"]}
    found = rules(tool_call_gbnf([tool("a", sku), tool("b", qty)], tags=False))
    assert found["a-call-arguments-items-item"] == "tool0-ref0"
    assert found["b-call-arguments-items-item"] == "tool1-ref0"
    assert "sku" in found["tool0-ref0-sku-kv"] and "qty" in found["tool1-ref0-qty-kv"]


def test_hermes_form_wraps_one_call_in_tags() -> None:
    gbnf = tool_call_gbnf([WEATHER, TIME], tags=True)
    root = rules(gbnf)["root"]
    assert root == '"<tool_call>" "\\n"? ( get-weather-call | get-time-call ) "\\n"? "</tool_call>"'
    # Each alternative is the whole call: the name as a constant, then the arguments.
    weather = rules(gbnf)["get-weather-call"]
    assert "get-weather-call-name-kv" in weather and "get-weather-call-arguments-kv" in weather
    assert rules(gbnf)["get-weather-call-name"] == '"\\"get_weather\\""'
    assert '"\\"city\\""' in rules(gbnf)["get-weather-call-arguments-city-kv"]


def test_generic_form_is_the_bare_call() -> None:
    gbnf = tool_call_gbnf([TIME], tags=False)
    assert rules(gbnf)["root"] == "( get-time-call )"
    assert "<tool_call>" not in gbnf


def test_parallel_calls_repeat_the_block_or_list_the_bare_calls() -> None:
    tagged = rules(tool_call_gbnf([WEATHER, TIME], tags=True, several=True))
    assert tagged["root"] == 'duo-block ( "\\n" duo-block )*'
    assert tagged["duo-block"] == (
        '"<tool_call>" "\\n"? ( get-weather-call | get-time-call ) "\\n"? "</tool_call>"'
    )
    bare = rules(tool_call_gbnf([TIME], tags=False, several=True))
    assert bare["root"] == '"[" ( get-time-call ) ( "," " "? ( get-time-call ) )* "]"'


def test_rule_names_stay_apart() -> None:
    """Names the converter spells alike (`_` and `.` become `-`), or that name a rule of
    its own, still get a rule each, and the root is never redefined."""
    same = {"type": "function", "function": {"name": "get.weather"}}
    root = {"type": "function", "function": {"name": "root"}}
    gbnf = tool_call_gbnf([WEATHER, same, root, BOOKING], tags=False)
    names = rules(gbnf)["root"].strip("( )").split(" | ")
    assert len(set(names)) == 4 and "root" not in names
    assert sum(line.startswith("root ::=") for line in gbnf.splitlines()) == 1
    assert '"\\"get.weather\\""' in rules(gbnf).values()


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
        {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
        {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}},
    ],
)
def test_parameters_the_grammar_cannot_enforce_are_refused(parameters: dict[str, Any]) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    with pytest.raises(DuoError):
        tool_call_gbnf([tool], tags=True)


def test_the_template_picks_the_form() -> None:
    assert template_caps(renderer(QWEN25)).tool_call_tags
    generic = template_caps(renderer(GENERIC))
    assert generic.supports_tools and not generic.tool_call_tags
