"""A response_format's JSON schema with local $refs (duo.lead.schema_refs): refs through
$defs and definitions, to the root and into lists, recursion; what points at nothing is
refused naming its path; and llama.cpp's own converter test cases, through duo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from duo.errors import UsageError, http_status
from duo.lead.schema_refs import resolve_refs
from tests.unit.lead.openai.test_requests_sampling import grammar_text

CASES = json.loads((Path(__file__).parent / "json_schema_cases.json").read_text())["cases"]


def schema_gbnf(schema: Any) -> str | None:
    """The grammar of a chat completion's response_format with this schema."""
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    return grammar_text({"response_format": fmt})


def rules(gbnf: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in gbnf.strip().splitlines())


GUEST = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

# Each with a document that validates against it and one that does not.
RESOLVED = {
    "a definition that refers to another": (
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/a"}},
            "required": ["a"],
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": GUEST},
        },
        {"a": {"name": "x"}},
        {"a": {}},
    ),
    "a top-level $ref to a definition that refers to another": (
        {
            "$ref": "#/$defs/a",
            "$defs": {
                "a": {"type": "array", "items": {"$ref": "#/$defs/b"}},
                "b": {"$ref": "#/$defs/c"},
                "c": GUEST,
            },
        },
        [{"name": "x"}],
        [{"name": 1}],
    ),
    "a linked list": (
        {
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"value": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}},
                    "required": ["value"],
                    "additionalProperties": False,
                }
            },
        },
        {"value": 1, "next": {"value": 2}},
        {"value": 1, "next": {}},
    ),
    "a tree, through the root": (
        {
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["kids"],
        },
        {"kids": [{"kids": []}]},
        {"kids": [{}]},
    ),
    "a ref into a list": (
        {
            "type": "object",
            "properties": {
                "a": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                "b": {"anyOf": [{"$ref": "#/properties/a/anyOf/0"}, {"type": "boolean"}]},
            },
        },
        {"a": 1, "b": "x"},
        {"b": 1},
    ),
    "names to escape": (
        {
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/a~1b%20~0c"}},
            "required": ["x"],
            "$defs": {"a/b ~c": {"type": "boolean"}},
        },
        {"x": True},
        {"x": "true"},
    ),
    "a definition with a rule's name": (
        {
            "type": "object",
            "properties": {"s": {"type": "string"}, "x": {"$ref": "#/$defs/string"}},
            "required": ["s", "x"],
            "$defs": {"string": {"type": "integer"}},
        },
        {"s": "a", "x": 1},
        {"s": "a", "x": "1"},
    ),
}


@pytest.mark.parametrize(("schema", "good", "bad"), RESOLVED.values(), ids=list(RESOLVED))
def test_refs_resolve_through_definitions_the_root_and_lists(
    schema: dict[str, Any], good: Any, bad: Any
) -> None:
    gbnf = schema_gbnf(schema)
    assert gbnf is not None and "root ::=" in gbnf
    resolved = resolve_refs(schema)
    assert "$ref" not in resolved  # the converter would look no further
    # The same documents validate against the schema as written and as resolved.
    for document, valid in ((good, True), (bad, False)):
        for s in (schema, resolved):
            assert jsonschema.Draft202012Validator(s).is_valid(document) == valid, (s, document)


def test_a_recursive_ref_is_a_recursive_rule() -> None:
    tree = RESOLVED["a tree, through the root"][0]
    found = rules(schema_gbnf(tree) or "")
    assert found["root"] == "alternative-0" and found["alternative-0"] == "ref0"
    assert found["ref0-kids-item"] == "ref0"  # a kid is a tree again
    linked = rules(schema_gbnf(RESOLVED["a linked list"][0]) or "")
    assert found and linked["ref0-next"] == "ref0"


def test_a_definition_named_as_a_rule_keeps_its_own_rule() -> None:
    """The converter names a ref's rule after the ref's last part: `#/$defs/string` was
    the rule `string` that the string property had made, and took strings."""
    found = rules(schema_gbnf(RESOLVED["a definition with a rule's name"][0]) or "")
    assert found["x"] == "integer"


def test_a_long_chain_of_refs_is_followed_once() -> None:
    n = 3000
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "boolean"}
    schema = {"type": "array", "items": {"$ref": "#/$defs/d0"}, "$defs": defs}
    assert len(resolve_refs(schema)["$defs"]) == n + 1
    defs[f"d{n}"] = {"$ref": "#/$defs/d0"}
    with pytest.raises(UsageError, match="go round in a circle"):
        resolve_refs(schema)


def test_definitions_and_what_no_ref_uses() -> None:
    schema = {
        "$ref": "#/definitions/a",
        "definitions": {
            "a": {"type": "array", "items": {"$ref": "#/definitions/b"}},
            "b": {"type": "boolean"},
            "unused": {"type": "string"},
        },
    }
    assert rules(schema_gbnf(schema) or "")["ref0-item"] == "boolean"
    assert resolve_refs(schema) == {
        "anyOf": [{"$ref": "#/$defs/ref0"}],
        "$defs": {
            "ref0": {"type": "array", "items": {"$ref": "#/$defs/ref1"}},
            "ref1": {"type": "boolean"},
        },
    }
    plain = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert resolve_refs(plain) is plain  # no refs: as it is


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/b"}}},
            "'$ref' '#/$defs/b' at #/$defs/a/$ref points at nothing",
        ),
        (
            {"properties": {"a": {"$ref": "#/definitions/a"}}},
            "'$ref' '#/definitions/a' at #/properties/a/$ref points at nothing",
        ),
        ({"items": {"$ref": "#/items/7"}}, "'$ref' '#/items/7' at #/items/$ref points at nothing"),
        (
            {"$ref": "https://example.com/schema.json"},
            "at #/$ref is not a reference within the schema ('#' or '#/...')",
        ),
        ({"$ref": "#node"}, "'$ref' '#node' at #/$ref is not a reference within the schema"),
        ({"items": {"$ref": 3}}, "'$ref' at #/items/$ref is not a string"),
        (
            {"properties": {"a": {"$ref": "#/required"}}, "required": ["a"]},
            "'$ref' '#/required' at #/properties/a/$ref points at no schema",
        ),
        (
            {
                "$ref": "#/$defs/a",
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            },
            "'$ref's go round in a circle, never reaching a schema: "
            "#/$defs/a -> #/$defs/b -> #/$defs/a",
        ),
        ({"$ref": "#"}, "go round in a circle, never reaching a schema: # -> #"),
        (
            {"$ref": "#/$defs/a", "$defs": {"a": {"type": "integer", "maximum": 3}}},
            "uses 'maximum' (at #/$defs/a/maximum)",  # where the schema has it
        ),
    ],
)
def test_refs_that_lead_nowhere_are_refused_naming_the_path(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError) as e:
        schema_gbnf(schema)
    assert message in str(e.value)
    assert str(e.value).startswith("the JSON schema")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_llama_cpp_converter_cases(case: dict[str, Any]) -> None:
    """llama.cpp's own cases (json_schema_cases.json): a grammar where duo makes one (that
    llama.cpp parses it, or cannot: tests/integration/test_structured_api.py), a 400 where
    duo refuses; `why` says where duo differs from llama.cpp."""
    assert (case["duo"] == "grammar") == (case["llama_cpp"] == "success") or case["why"]
    if case["duo"] in ("grammar", "unparsable"):
        gbnf = schema_gbnf(case["schema"])
        assert gbnf is not None and "root ::=" in gbnf
    else:
        with pytest.raises(UsageError) as e:
            schema_gbnf(case["schema"])
        assert http_status(e.value)[0] == 400
