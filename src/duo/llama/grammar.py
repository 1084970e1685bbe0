"""Grammars: llama.cpp's GBNF machinery constraining the main model's sampling.

A `Grammar` is one generation's grammar state over a model's vocabulary (llama.cpp's
grammar sampler); it implements duo.core.sampling.Constraint. `json_schema_gbnf` turns a
JSON schema into GBNF with llama.cpp's converter (as shipped in llama-cpp-python),
`json_schema_rules` several schemas into rules a larger grammar refers to, and
`JSON_OBJECT` is llama.cpp's grammar for any JSON object.
"""

from __future__ import annotations

import copy
import ctypes
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from duo.core.sampling import Logits
from duo.errors import UsageError
from duo.llama.backend import Model

# llama.cpp's grammars/json.gbnf: any JSON object, with bounded whitespace (a model cannot
# run away in blanks).
JSON_OBJECT = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

ws ::= | " " | "\n" [ \t]{0,20}
"""

# llama.cpp parses groups recursively: 20,000 nested parentheses overflow its stack (a
# segfault; it refuses 2,000 and 5,000 cleanly), so duo refuses deeper grammars itself.
MAX_NESTING = 1024
MAX_SCHEMA_DEPTH = 64  # subschemas within subschemas
MAX_SCHEMA_BYTES = 128 * 1024  # a schema's JSON
MAX_ENUM_VALUES = 1000  # in all of a schema's enums, as OpenAI's structured outputs
MAX_GRAMMAR_BYTES = 512 * 1024  # a grammar's GBNF text

# llama_token_data as numpy sees it: {int32 id; float logit; float p}
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


# Keywords that restrict which documents validate but that the converter does not turn
# into grammar: a schema using them is refused rather than answered with JSON that may
# not validate.
UNENFORCED = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minProperties",
        "maxProperties",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "patternProperties",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
# Where a schema holds subschemas (JSON Schema 2020-12 and draft 7): one, a list of them,
# or a mapping of names to them. The one walk of a schema's tree (duo.lead.schema_refs too).
SUBSCHEMA = (
    "items",
    "additionalProperties",
    "additionalItems",
    "unevaluatedItems",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
)
SUBSCHEMA_LIST = ("items", "prefixItems", "anyOf", "oneOf", "allOf")
SUBSCHEMA_MAP = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")
_BOUNDS = ("minLength", "maxLength", "minItems", "maxItems")


def pointer_token(name: str) -> str:
    """A name as a JSON pointer's token."""
    return name.replace("~", "~0").replace("/", "~1")


def subschemas(node: dict[str, Any], path: str) -> list[tuple[str, object]]:
    """(JSON pointer, subschema) of each subschema `node` (at `path`) holds."""
    out: list[tuple[str, object]] = []
    for key, value in node.items():
        where = f"{path}/{pointer_token(key)}"
        if key in SUBSCHEMA and isinstance(value, dict | bool):
            out.append((where, value))
        elif key in SUBSCHEMA_LIST and isinstance(value, list):
            out += [(f"{where}/{i}", sub) for i, sub in enumerate(value)]
        elif key in SUBSCHEMA_MAP and isinstance(value, dict):
            out += [(f"{where}/{pointer_token(name)}", sub) for name, sub in value.items()]
    return out


def unenforced(schema: object, path: str = "#", depth: int = 0) -> str | None:
    """The path of the first keyword in `schema` that the grammar would not enforce."""
    if not isinstance(schema, dict):
        return None
    if depth > MAX_SCHEMA_DEPTH:
        raise UsageError(f"the JSON schema nests more than {MAX_SCHEMA_DEPTH} subschemas deep")
    for key in schema:
        if key in UNENFORCED:
            return f"{path}/{key}"
        # The converter spells a bound out as that many nested groups (a string of 1e8
        # characters would be 800 MB of grammar): bounds past MAX_NESTING cannot parse.
        bound = schema[key]
        if key in _BOUNDS and isinstance(bound, int) and bound > MAX_NESTING:
            raise UsageError(f"'{key}' at {path[:200]} may be at most {MAX_NESTING}")
    for where, sub in subschemas(schema, path):
        found = unenforced(sub, where, depth + 1)
        if found:
            return found
    return None


def check_bounds(schema: dict[str, Any]) -> None:
    """Refuse a schema whose grammar would cost every token of its reply (and the slot it
    holds) too much: more than MAX_SCHEMA_BYTES of JSON, or more than MAX_ENUM_VALUES
    `enum` entries in all (OpenAI's limit); and a `pattern` that is no regular expression.
    Call after `unenforced`, which bounds the depth."""
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        raise UsageError(f"the JSON schema is {size} bytes; at most {MAX_SCHEMA_BYTES}")
    enums = 0
    todo: list[tuple[str, object]] = [("#", schema)]
    while todo:
        path, sub = todo.pop()
        if not isinstance(sub, dict):
            continue
        if isinstance(sub.get("enum"), list):
            enums += len(sub["enum"])
            if enums > MAX_ENUM_VALUES:
                raise UsageError(
                    f"the JSON schema has more than {MAX_ENUM_VALUES} 'enum' values in all"
                )
        pattern = sub.get("pattern")
        if isinstance(pattern, str):
            try:
                re.compile(pattern)
            except (re.error, RecursionError, OverflowError) as e:
                raise UsageError(
                    f"'pattern' at {path[:200]} is not a regular expression: {str(e)[:200]}"
                ) from None
        todo += subschemas(sub, path)


def json_schema_gbnf(schema: dict[str, Any]) -> str:
    """GBNF for the JSON documents that validate against `schema` (llama.cpp's converter:
    types, properties and required, additionalProperties, enum and const,
    anyOf/oneOf/allOf, arrays with items, prefixItems and min/maxItems, strings with
    min/maxLength, pattern and formats, local $refs). Keywords it cannot enforce
    (`UNENFORCED`: numeric bounds, uniqueItems, not, ...) are refused."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    check_enforceable(schema)
    try:
        gbnf: str = json_schema_to_gbnf(json.dumps(schema))
    except Exception as e:  # the converter raises what it cannot express, in many types
        raise UsageError(
            f"the JSON schema cannot be turned into a grammar: {str(e)[:300]}"
        ) from None
    return gbnf


def json_schema_rules(schemas: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[str], str]:
    """GBNF rules for several JSON schemas, for a grammar to refer to (as llama.cpp's
    common_grammar_builder adds schemas): the name of each schema's rule (from the name
    given, made a valid rule name and unique), and the text of all the rules, without a
    root. Each schema's local $refs resolve within that schema."""
    from llama_cpp import llama_grammar

    schema_converter: Any = llama_grammar.SchemaConverter  # untyped
    converter = schema_converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    names: list[str] = []
    for i, (name, schema) in enumerate(schemas):
        check_enforceable(schema)
        try:
            # The converter rewrites each "#/..." $ref in place as "<url>#/...".
            resolved = converter.resolve_refs(copy.deepcopy(schema), f"schema{i}")
            names.append(converter.visit(resolved, name))
        except Exception as e:  # the converter raises what it cannot express, in many types
            raise UsageError(
                f"the JSON schema cannot be turned into a grammar: {str(e)[:300]}"
            ) from None
    rules: str = converter.format_grammar()
    return names, rules


def check_enforceable(schema: dict[str, Any]) -> None:
    """Refuse what a grammar cannot enforce, naming where in the schema it is."""
    try:
        where = unenforced(schema)
    except RecursionError:
        raise UsageError("the JSON schema is nested too deeply") from None
    if where:
        keyword = where.rsplit("/", 1)[1]
        raise UsageError(
            f"the JSON schema uses '{keyword}' (at {where[:200]}), which structured output "
            "cannot enforce"
        )
    check_bounds(schema)


def nesting(gbnf: str) -> int:
    """The deepest nesting of parentheses in a GBNF text (outside literals and classes)."""
    depth = deepest = 0
    i, n = 0, len(gbnf)
    while i < n:
        c = gbnf[i]
        if c in '"[':  # a literal or a character class: skip to its end
            end = '"' if c == '"' else "]"
            i += 1
            while i < n and gbnf[i] != end:
                i += 2 if gbnf[i] == "\\" else 1
        elif c == "#":  # a comment, to the end of the line
            while i < n and gbnf[i] != "\n":
                i += 1
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
        i += 1
    return deepest


class Grammar:
    """One generation's grammar state (llama.cpp's grammar sampler) over `model`'s vocabulary.

    `allows` tests one token (cheap); `mask` runs the grammar over the whole vocabulary,
    which is what costs time, so the sampler asks it only when the token it picked is
    refused. End-of-generation tokens are allowed only where the grammar is complete, and
    never fed to the grammar (llama.cpp aborts on one it did not allow).
    """

    def __init__(self, model: Model, gbnf: str, root: str = "root") -> None:
        self._lib = lib = model._lib
        self._model = model
        self._sampler = None
        if len(gbnf) > MAX_GRAMMAR_BYTES:
            raise UsageError(f"the grammar is {len(gbnf)} characters; at most {MAX_GRAMMAR_BYTES}")
        if nesting(gbnf) > MAX_NESTING:
            raise UsageError(f"the grammar nests groups more than {MAX_NESTING} deep")
        self._sampler = lib.llama_sampler_init_grammar(
            model.vocab.handle, gbnf.encode("utf-8"), root.encode("utf-8")
        )
        if not self._sampler:
            raise UsageError("the grammar does not parse (llama.cpp's GBNF)")
        self._one = (lib.llama_token_data * 1)()
        self._one_array = lib.llama_token_data_array(self._one, 1, -1, False)
        self._all = np.zeros(model.n_vocab, dtype=_TOKEN_DATA)
        self._all["id"] = np.arange(model.n_vocab, dtype=np.int32)
        self._all_array = lib.llama_token_data_array(
            self._all.ctypes.data_as(ctypes.POINTER(lib.llama_token_data)),
            model.n_vocab,
            -1,
            False,
        )

    def allows(self, token: int) -> bool:
        one = self._one[0]
        one.id, one.logit, one.p = token, 0.0, 0.0
        self._one_array.size, self._one_array.selected = 1, -1
        self._lib.llama_sampler_apply(self._sampler, ctypes.byref(self._one_array))
        return bool(np.isfinite(self._one[0].logit))

    def mask(self, logits: Logits) -> Logits:
        self._all["logit"] = logits
        self._all_array.size, self._all_array.selected = logits.shape[0], -1
        self._lib.llama_sampler_apply(self._sampler, ctypes.byref(self._all_array))
        # The grammar sets refused logits to -inf and leaves the others as they were.
        out = np.array(logits, dtype=np.float32)
        out[np.isneginf(self._all["logit"])] = -np.inf
        return out

    def accept(self, token: int) -> None:
        if not self._model.is_eog(token):
            self._lib.llama_sampler_accept(self._sampler, token)

    def close(self) -> None:
        if self._sampler:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self) -> None:
        self.close()
