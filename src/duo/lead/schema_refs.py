"""A JSON schema's local `$ref`s, resolved before llama.cpp's converter sees the schema.

The converter (duo.llama.grammar: llama-cpp-python's port of llama.cpp's
json_schema_to_grammar) registers a `$ref` only where its walk meets it, and its walk does
not look inside an object that has a `$ref`: the `$defs` beside a top-level `$ref`, and
every ref inside them, were never registered (a definition that refers to another failed
with a bare KeyError, '#/$defs/b'). Nor can it follow a ref into a list
('#/properties/a/anyOf/0'), to the root ('#'), or to a name with '/' or '~' in it; and it
names a ref's rule after the ref's last part, so a definition named `string` or `root`
took the rule of that name instead of its own.

`resolve_refs` rewrites a schema so that every local `$ref` is '#/$defs/<key>' with a key
of duo's own, each target once in the root's `$defs` (moved there: a part of the schema
that a ref points at is itself replaced by that ref), and the root no `$ref` itself. The
converter then meets every ref, and a ref back to a schema it is inside of (a tree, a
linked list) becomes a recursive rule, as in llama.cpp. Refused, naming the path: a ref
that points at nothing (or at no schema), a ref that is not a JSON pointer into the
schema itself (remote schemas are not fetched), and refs that lead round in a circle
without reaching a schema.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from duo.errors import UsageError
from duo.llama.grammar import (
    MAX_SCHEMA_DEPTH,
    SUBSCHEMA,
    SUBSCHEMA_LIST,
    SUBSCHEMA_MAP,
    check_enforceable,
    pointer_token,
    subschemas,
)

_DEFINITIONS = ("$defs", "definitions")


def _shown(path: str) -> str:
    return ("#" + path)[:200]


class _Refs:
    """The local refs of one schema: each target's JSON pointer and its key in $defs."""

    def __init__(self, schema: Any, prefix: str) -> None:
        self.schema = schema
        self.prefix = prefix
        self.keys: dict[str, str] = {}  # JSON pointer ("" is the root) -> key
        self.seen: set[str] = set()

    def collect(self) -> None:
        """Every $ref in the schema and in what its refs point at, checked."""
        todo: list[tuple[str, object, int]] = [("", self.schema, 0)]
        while todo:
            path, node, depth = todo.pop()
            if not isinstance(node, dict) or path in self.seen:
                continue
            self.seen.add(path)
            if depth > MAX_SCHEMA_DEPTH:
                raise UsageError(f"subschemas nest more than {MAX_SCHEMA_DEPTH} deep")
            if "$ref" in node:
                pointer = self.pointer(node["$ref"], f"{path}/$ref")
                if pointer not in self.keys:
                    target = self.lookup(pointer, node["$ref"], f"{path}/$ref")
                    if not isinstance(target, dict | bool):
                        raise UsageError(
                            f"'$ref' {node['$ref']!r:.200} at {_shown(path + '/$ref')} points "
                            "at no schema"
                        )
                    self.keys[pointer] = f"{self.prefix}ref{len(self.keys)}"
                    todo.append((pointer, target, 0))
            todo += [(where, sub, depth + 1) for where, sub in subschemas(node, path)]
        self.check_not_circular()

    def pointer(self, ref: object, where: str) -> str:
        """The JSON pointer of a local ref ("#/$defs/a" -> "/$defs/a")."""
        if not isinstance(ref, str):
            raise UsageError(f"'$ref' at {_shown(where)} is not a string")
        if ref != "#" and not ref.startswith("#/"):
            raise UsageError(
                f"'$ref' {ref[:200]!r} at {_shown(where)} is not a reference within the "
                "schema ('#' or '#/...'): other documents are not fetched"
            )
        return unquote(ref[1:])  # a URI fragment: %25 is '%'

    def lookup(self, pointer: str, ref: object, where: str) -> object:
        """What a JSON pointer points at in the schema."""
        target = self.schema
        for token in pointer.split("/")[1:]:
            name = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and name in target:
                target = target[name]
            elif (
                isinstance(target, list)
                and name.isascii()
                and name.isdigit()
                and int(name) < len(target)
            ):
                target = target[int(name)]
            else:
                raise UsageError(f"'$ref' {ref!r:.200} at {_shown(where)} points at nothing")
        return target

    def check_not_circular(self) -> None:
        """Refs that lead only to refs, back to where they started, describe no value."""
        sound: set[str] = set()  # targets whose refs reach a schema
        for start in self.keys:
            chain: dict[str, None] = {}  # in order
            pointer, node = start, self.lookup(start, "#" + start, start)
            while pointer not in sound and isinstance(node, dict) and "$ref" in node:
                if pointer in chain:
                    circle = [*list(chain)[list(chain).index(pointer) :], pointer]
                    raise UsageError(
                        "'$ref's go round in a circle, never reaching a schema: "
                        + " -> ".join(map(_shown, circle))
                    )
                chain[pointer] = None
                ref, where = node["$ref"], f"{pointer}/$ref"
                pointer = self.pointer(ref, where)
                node = self.lookup(pointer, ref, where)
            sound.update(chain)

    def rewritten(self, node: object, path: str, depth: int = 0, top: bool = True) -> object:
        """`node` (at `path`) with each ref made '#/$defs/<key>', each part that a ref
        points at made that ref, and the definitions left out (those used are in $defs)."""
        if not top and path in self.keys:
            return {"$ref": f"#/$defs/{self.keys[path]}"}
        if not isinstance(node, dict):
            return node
        if depth > MAX_SCHEMA_DEPTH:
            raise UsageError(f"subschemas nest more than {MAX_SCHEMA_DEPTH} deep")
        out: dict[str, Any] = {}
        for key, value in node.items():
            where = f"{path}/{pointer_token(key)}"
            if key in _DEFINITIONS and isinstance(value, dict):
                continue
            if key == "$ref":
                out[key] = f"#/$defs/{self.keys[self.pointer(value, where)]}"
            elif key in SUBSCHEMA and isinstance(value, dict | bool):
                out[key] = self.rewritten(value, where, depth + 1, top=False)
            elif key in SUBSCHEMA_LIST and isinstance(value, list):
                out[key] = [
                    self.rewritten(sub, f"{where}/{i}", depth + 1, top=False)
                    for i, sub in enumerate(value)
                ]
            elif key in SUBSCHEMA_MAP and isinstance(value, dict):
                out[key] = {
                    name: self.rewritten(
                        sub, f"{where}/{pointer_token(name)}", depth + 1, top=False
                    )
                    for name, sub in value.items()
                }
            else:
                out[key] = value
        return out


def hoisted(schema: Any, prefix: str = "") -> tuple[Any, dict[str, Any]]:
    """(the schema, its definitions): every local $ref in the schema made '#/$defs/<key>'
    (keys '<prefix>ref0', '<prefix>ref1', ...), for the definitions to be put in the
    `$defs` of the root the converter is given. Raises UsageError, naming the path, for a
    ref that points at nothing, one that is not within the schema, and refs in a circle."""
    refs = _Refs(schema, prefix)
    refs.collect()
    if not refs.keys:
        return schema, {}
    defs = {
        key: refs.rewritten(refs.lookup(pointer, "#" + pointer, pointer), pointer)
        for pointer, key in refs.keys.items()
    }
    return refs.rewritten(schema, "", top="" not in refs.keys), defs


def resolve_refs(schema: Any) -> Any:
    """The schema, its local $refs resolved for the converter (see `hoisted`): a schema
    without refs is given back as it is. What the grammar cannot enforce is refused first,
    at its path in the schema as written (duo.llama.grammar checks the result again)."""
    if isinstance(schema, dict):
        check_enforceable(schema)
    try:
        body, defs = hoisted(schema)
    except UsageError as e:
        raise UsageError(f"the JSON schema: {e}") from None
    if not defs:
        return body
    if "$ref" in body:  # the converter would look no further than a top-level $ref
        body = {"anyOf": [body]}
    return {**body, "$defs": defs}
