"""Request bodies: read under the size limit, then decoded into their typed request at once.

    Fields             the base of the request models (duo.lead.openai.requests, .chat;
                       duo.lead.verifier.requests), with TokenId and MAX_SEED
    read_body(...)     the raw body, never holding more than the limit (413 past it)
    decode(raw, kind)  the body as a `kind`, every field checked, or a UsageError

msgspec decodes the bytes straight into the request's class, checking each field's type
and bounds as it reads it; a class's `__post_init__` checks what a type cannot say. Unknown
fields are ignored; integers must be JSON integers (2.0 and true are not), and nothing is
converted from a string. What is not strict JSON is refused: NaN and Infinity, numbers
no float holds, invalid UTF-8, lone UTF-16 surrogates ("\\ud800", which have no UTF-8 form,
so no text a model can take), nesting past Python's recursion limit. Every refusal is a
UsageError (a 400) whose `param` names the top-level field at fault, or None when the body as a
whole is; a body over the limit is a RequestTooLarge (a 413).

msgspec says where a value breaks its field's type (`$.messages[0].content`), but a body
it cannot read at all, such as one holding a lone surrogate, it only calls malformed: such a
body, and only such a body, is read once more, by Python's json, to say what is wrong and where.
"""

from __future__ import annotations

import functools
import json
import math
import re
from contextlib import aclosing
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta
from starlette.requests import Request

from duo.errors import RequestTooLarge, UsageError

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)

_SURROGATE = re.compile(r"[\ud800-\udfff]")

MAX_SEED = 2**64 - 1  # seeds are 64-bit (msgspec bounds stop at 2**63: checked by hand)
TokenId = Annotated[int, Meta(ge=0, description="a token ID, below the model's n_vocab")]


class Fields(msgspec.Struct, kw_only=True):
    """A request's fields. As OpenAI's API reads them, null means a field's default: a
    field declared `T | None` with a default other than None holds that default when
    the client sent null, once decoded (see `filled`)."""

    def __post_init__(self) -> None:
        for name, default in _defaults(type(self)):
            if getattr(self, name) is None:
                setattr(self, name, default)


@functools.cache
def _defaults(kind: type[msgspec.Struct]) -> tuple[tuple[str, Any], ...]:
    fields = msgspec.structs.fields(kind)
    return tuple((f.name, f.default) for f in fields if f.default not in (None, msgspec.NODEFAULT))


def filled(value: T | None) -> T:
    """A field with a default, once decoded: `Fields` replaced a null by the default."""
    assert value is not None
    return value


# -- reading ------------------------------------------------------------------------------


def too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"the request body is larger than the lead accepts ({limit} bytes, see --max-body)"
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The body, read without ever holding more than `limit` bytes.

    A declared Content-Length over the limit is refused before a byte is read; a chunked
    body (or one longer than declared) is counted as it arrives. uvicorn discards what the
    client still sends after the answer, so the connection stays usable.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async with aclosing(request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
    return b"".join(chunks)


# -- decoding -----------------------------------------------------------------------------


@functools.cache
def _decoder(kind: type[msgspec.Struct]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(kind)


def decode(raw: bytes, kind: type[S]) -> S:
    """The body as a `kind`, or a UsageError naming the field at fault."""
    try:
        request: S = _decoder(kind).decode(raw)
    except msgspec.ValidationError as e:
        raise field_error(str(e)) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise _diagnosis(raw) from None
    return request


def field_error(message: str) -> UsageError:
    """A UsageError from msgspec's account of a value that breaks its field's type, such as
    "Expected `int` <= 128 - at `$.n`": its path says the field."""
    text, _, where = message.partition(" - at `")
    path = where[where.find("$") + 1 :].rstrip("`") if where else ""  # ".messages[0].role"
    missing = re.fullmatch(r"Object missing required field `(.+)`", text)
    if missing:
        path += f".{missing[1]}"
    path = path.removeprefix(".")
    if not path:  # the body itself: a list, a number, ...
        return UsageError("the request body must be a JSON object")
    param = re.match(r"[^.\[]*", path)[0]  # type: ignore[index]  # always matches
    if missing:
        return UsageError(f"'{path}' is required", param=param)
    keys = " keys" if where.startswith("key`") else ""
    return UsageError(f"'{path}'{keys}: {text[:1].lower()}{text[1:]}", param=param)


def _diagnosis(raw: bytes) -> UsageError:
    """What is wrong with a body msgspec could not read, and in which field."""
    try:
        body = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except UsageError as e:
        return e
    except RecursionError:
        return UsageError("the request body is nested too deeply")
    except (ValueError, UnicodeDecodeError):
        return UsageError("the request body is not valid JSON")
    if isinstance(body, dict):  # what Python's json takes and msgspec does not
        for name, value in body.items():
            if _lone_surrogate(value) and not _lone_surrogate(name):
                return UsageError(
                    f"'{name}' holds a lone UTF-16 surrogate (invalid text)", param=name
                )
        if _lone_surrogate(body):
            return UsageError("a field name holds a lone UTF-16 surrogate (invalid text)")
    return UsageError("the request body is not valid JSON")


def _refuse_constant(name: str) -> Any:
    raise UsageError(f"the request body holds {name}, which is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf
        raise UsageError(f"the number {text[:40]} is out of range")
    return value


def _lone_surrogate(value: Any) -> bool:
    """Whether any text in a parsed JSON value holds a lone surrogate (iteratively: the
    value may be as deep as Python's json goes)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
    return False
