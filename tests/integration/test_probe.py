"""The hostile-input probe: one `duo lead` (two slots, an API key and a drafter key) is sent
every kind of bad input its routes and its drafter channel can take, and bad command lines
are run beside it.

- Every route of the lead's route table (duo.lead.routes), read from the lead's own
  /openapi.json, which the table makes with each route's method, key and request model,
  so that a new route or field is probed with no change here: no body, bad JSON, JSON of
  each wrong top type, an empty object, unknown fields; for each field of the request model
  (and of the objects one level down) values of every type it does not take, numbers just
  past its bounds, NaN and infinities, strings past their lengths and of 1 MiB, lists past
  their lengths and holding bad items, unknown choices; no key, the drafter key, another
  scheme; every other method.
- The drafter channel (duo.channel.protocol): garbage before and after the upgrade, bad
  upgrades, truncated, oversized, unmasked and text frames, frames out of turn, a HELLO of
  another version, vocabulary or fingerprint, a missing or wrong key, silence, and clients
  that vanish mid-frame.
- `duo lead` and `duo generate` with bad flags, ports, hosts and model files.

About 1,700 requests, 26 channel connections and 9 command lines, in about 20 s on a
2-core machine (the lead's start and a 10 s wait for the lead to give up on a silent
drafter included). No answer is a 5xx; every 4xx is an OpenAI-style JSON error (on the
routes of Anthropic's API, Anthropic's), on a connection that stays open; every channel
connection is refused with the reason, closed with the reason the protocol gives, or
dropped; every command line exits 2 with one line and no traceback. The lead ends as it
began: healthy, every slot idle, the same greedy text.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from duo.channel import protocol as p
from duo.llama.backend import Model

from .conftest import Cluster, health, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

API_KEY = "probe-api-key"
DRAFTER_KEY = "probe-drafter-key"
TIMEOUT = 30.0  # seconds, for any one call
MiB = 1024 * 1024
NOT_UTF8 = "\ue000"  # a text that `encode` writes as bytes that are not UTF-8
# what a request that is served may cost (the Responses API names its cap max_output_tokens)
CHEAP = {"max_tokens": 1, "max_output_tokens": 1, "temperature": 0}
ERROR_KEYS = {"message", "type", "param", "code"}
ANTHROPIC_ERROR_KEYS = {"message", "type"}
Json = Any


def test_probe(pair: tuple[Path, Path], cluster: Cluster) -> None:
    _, url = cluster.lead(
        "-m", str(pair[0]), "--api-key", API_KEY, "--drafter-key", DRAFTER_KEY, "-np", "2",
        "--quiet",
    )  # fmt: skip
    auth = {"Authorization": f"Bearer {API_KEY}"}
    greedy = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    before = httpx.post(f"{url}/v1/completions", json=greedy, headers=auth, timeout=TIMEOUT)
    assert before.status_code == 200, before.text
    commands = start_bad_commands(pair[0], port=int(url.rsplit(":", 1)[1]))
    try:
        doc = httpx.get(f"{url}/openapi.json", headers=auth, timeout=TIMEOUT).json()
        schemas = Schemas(doc)
        with HttpProbe(url) as http:
            for route in route_table(doc):
                http.route(route, schemas)
        with Model(pair[0], n_ctx=64) as model:
            identity = model.n_vocab, model.vocab.fingerprint
        connections = probe_channel(url, identity)
        lines = finish_bad_commands(commands)
    finally:
        for _, popen in commands:
            if popen.poll() is None:
                popen.kill()
                popen.wait()

    # The lead as it was: healthy, idle, and decoding as before.
    assert health(url)["status"] == "ok"
    assert health(url)["drafters"] == 0
    slots = lambda: httpx.get(f"{url}/slots", headers=auth, timeout=TIMEOUT).json()  # noqa: E731
    wait_until(lambda: not any(s["is_processing"] for s in slots()), 10, "every slot idle")
    assert len(slots()) == 2
    metrics = httpx.get(f"{url}/metrics", headers=auth, timeout=TIMEOUT)
    assert metrics.status_code == 200 and "duo_requests_total" in metrics.text
    after = httpx.post(f"{url}/v1/completions", json=greedy, headers=auth, timeout=TIMEOUT)
    assert after.status_code == 200, after.text
    assert after.json()["choices"][0]["text"] == before.json()["choices"][0]["text"]
    print(f"probe: {http.sent} requests, {connections} channel connections, {lines} commands")


# -- the route table and its request models ------------------------------------------------


@dataclass(frozen=True)
class Route:
    method: str  # GET, POST, or WEBSOCKET
    path: str  # with its parameters filled in
    auth: bool  # the API key is required
    body: Json  # the request body's schema, or None
    events: bool  # a GET answered with server-sent events: read its head only
    # what the document says the route may answer that is no fault of the lead's: 501 (a
    # request the served model cannot do, such as infill without FIM tokens)
    refusals: frozenset[int] = frozenset()
    anthropic: bool = False  # its errors have Anthropic's shape, not OpenAI's


def _error_shape(answers: dict[str, Json]) -> str | None:
    """The name of the schema of a route's error answers."""
    for status, answer in answers.items():
        if status.startswith("4"):
            ref = answer.get("content", {}).get("application/json", {}).get("schema", {})
            return str(ref.get("$ref", "")).rsplit("/", 1)[-1] or None
    return None


def route_table(doc: dict[str, Json]) -> list[Route]:
    """The lead's routes, as its OpenAPI document (made from duo.lead.routes) lists them."""
    routes = []
    for template, operations in doc["paths"].items():
        path = re.sub(r"{\w+}", "probe.txt", template)
        for method, op in operations.items():
            answers = op["responses"]
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            events = "text/event-stream" in answers.get("200", {}).get("content", {})
            routes.append(
                Route(
                    "WEBSOCKET" if "101" in answers else method.upper(),
                    path,
                    op.get("security") != [],
                    body.get("schema"),
                    events and not body,
                    frozenset({501} & {int(status) for status in answers}),
                    _error_shape(answers) == "AnthropicError",
                )
            )
    assert {r.method for r in routes} == {"GET", "POST", "WEBSOCKET"}, routes
    return routes


SAMPLES: dict[str, Json] = {  # a value of each JSON type
    "string": "probe",
    "integer": 7,
    "number": 0.5,
    "boolean": True,
    "array": [1],
    "object": {"probe": 1},
    "null": None,
}


class Schemas:
    """The request models' JSON schemas: valid bodies, and the values each field refuses."""

    def __init__(self, doc: dict[str, Json]) -> None:
        self.components: dict[str, Json] = doc["components"]["schemas"]

    def resolve(self, schema: Json) -> Json:
        while isinstance(schema, dict) and "$ref" in schema:
            schema = self.components[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def alternatives(self, schema: Json) -> list[Json]:
        schema = self.resolve(schema)
        alts = schema.get("anyOf") or schema.get("oneOf")
        return [a for alt in alts for a in self.alternatives(alt)] if alts else [schema]

    def types(self, schema: Json) -> set[str] | None:
        """The JSON types a value may have; None: any."""
        types: set[str] = set()
        for alt in self.alternatives(schema):
            if "type" in alt:
                types.add(alt["type"])
            elif "enum" in alt:
                types.update(json_type(v) for v in alt["enum"])
            else:
                return None
        if "number" in types:
            types.add("integer")
        return types

    def example(self, schema: Json) -> Json:
        """A valid value (for a required field: its first kind)."""
        alt = next(a for a in self.alternatives(schema) if a.get("type") != "null")
        if "examples" in alt:
            return alt["examples"][0]
        if "enum" in alt:
            return alt["enum"][0]
        kind = alt.get("type")
        if kind == "array":
            return [self.example(alt.get("items", {}))] * max(1, alt.get("minItems", 1))
        if kind == "object":
            return self.instance(alt, nested=True)
        low = alt.get("minimum", 1)
        return {"string": "hi", "integer": max(low, 1), "number": low, "boolean": False}[kind]

    def instance(self, schema: Json, nested: bool) -> dict[str, Json]:
        """An object of `schema` with its required fields, and nested, its optional texts."""
        schema = self.resolve(schema)
        props = schema.get("properties", {})
        value = {k: self.example(props[k]) for k in schema.get("required", [])}
        if nested:  # a chat message's content, a function's description
            for name, prop in props.items():
                if name not in value and self.alternatives(prop)[0].get("type") == "string":
                    value[name] = "hi"
        return value

    def bad_values(self, schema: Json, depth: int = 0) -> list[Json]:
        """What a field of `schema` must refuse: a value of each type it does not take,
        numbers past its bounds or not finite, texts and lists past their lengths (and of a
        MiB), lists of bad items, an unknown choice, a map of bad keys or values."""
        types = self.types(schema)
        out = [v for t, v in SAMPLES.items() if types is not None and t not in types]
        for alt in self.alternatives(schema):
            kind = alt.get("type")
            if "enum" in alt:
                out.append("probe-no-such-choice")
            elif kind in ("integer", "number"):
                out += past_bounds(alt, 1 if kind == "integer" else 0.5)
            elif kind == "string":
                out += ["x" * MiB, "\ud800", "\x00", NOT_UTF8]
                if "maxLength" in alt:
                    out.append("x" * (alt["maxLength"] + 1))
                if alt.get("minLength", 0) > 0:
                    out.append("x" * (alt["minLength"] - 1))
                if "pattern" in alt:
                    out.append("probe / not\nthe pattern")
            elif kind == "array":
                item = alt.get("items", {})
                if depth == 0:
                    out += [[bad] for bad in self.bad_values(item, depth + 1)]
                if "maxItems" in alt:
                    out.append([self.example(item)] * (alt["maxItems"] + 1))
                if alt.get("minItems", 0) > 0:
                    out.append([])
            elif kind == "object" and isinstance(alt.get("additionalProperties"), dict):
                out.append({"probe key": 0})
                if depth == 0:
                    values = self.bad_values(alt["additionalProperties"], depth + 1)
                    out += [{"1": bad} for bad in values]
        return out

    def objects(self, schema: Json) -> Iterator[tuple[Json, bool]]:
        """The object kinds with fields a field may hold: (its schema, held in a list)."""
        for alt in self.alternatives(schema):
            listed = alt.get("type") == "array"
            inner = self.resolve(alt.get("items", {})) if listed else alt
            if inner.get("type") == "object" and inner.get("properties"):
                yield inner, listed

    def field_cases(
        self, schema: Json, value: dict[str, Json], depth: int = 0
    ) -> Iterator[tuple[str, Json, dict[str, Json]]]:
        """`value` with one field made bad at a time, down to the objects it holds:
        (what, the bad value, the body)."""
        for name, prop in self.resolve(schema).get("properties", {}).items():
            for bad in self.bad_values(prop):
                yield f"{name}={short(bad)}", bad, {**value, name: bad}
            if depth > 0:
                continue
            for inner, listed in self.objects(prop):
                held = value.get(name)
                held = held[0] if listed and isinstance(held, list) and held else held
                if not isinstance(held, dict):
                    held = self.instance(inner, nested=True)
                unknown = ("probe_unknown", 1, {**held, "probe_unknown": 1})
                for what, bad, changed in [*self.field_cases(inner, held, depth + 1), unknown]:
                    yield f"{name}.{what}", bad, {**value, name: [changed] if listed else changed}


def past_bounds(alt: Json, step: float) -> list[Json]:
    """Numbers a numeric schema refuses: not finite, past each bound (and far past it),
    and for an integer, an integer written as a float. No large number without a maximum:
    max_tokens 10**30 is valid (cut to the context) and would generate for a minute."""
    out: list[Json] = [math.nan, math.inf, -math.inf]
    out += [1e308, -1e308] if step != 1 else [1.0]
    if "minimum" in alt:
        out += [alt["minimum"] - step, -(2**64)]
    if "exclusiveMinimum" in alt:
        out.append(alt["exclusiveMinimum"])
    if "maximum" in alt:
        out += [alt["maximum"] + step, 10**30]
    if "exclusiveMaximum" in alt:
        out.append(alt["exclusiveMaximum"])
    return out


def is_json(value: Json) -> bool:
    """Whether `value` is written as JSON (no NaN, infinity or NOT_UTF8 in it)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | dict):
        return all(is_json(v) for v in (value.values() if isinstance(value, dict) else value))
    return value != NOT_UTF8


def json_type(value: Json) -> str:
    types = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}
    return "null" if value is None else types.get(type(value), "object")


def short(value: Json) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} chars)"


# -- the HTTP probe ------------------------------------------------------------------------


STRUCTURE: list[tuple[str, bytes]] = [
    ("no body", b""),
    ("bad JSON", b"{not json"),
    ("cut JSON", b'{"a": [1, '),
    ("not UTF-8", b'{"a": "\xff\xfe"}'),
    ("a list", b"[]"),
    ("a number", b"1"),
    ("a string", b'"probe"'),
    ("null", b"null"),
    ("an empty object", b"{}"),
    ("unknown fields", b'{"probe_unknown": 1, "probe_other": [null]}'),
]
OTHER_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
KEY = f"Bearer {API_KEY}"
BAD_KEYS = {  # Authorization headers the API refuses (None: no header)
    "no key": None,
    "the drafter key": f"Bearer {DRAFTER_KEY}",
    "another scheme": f"Basic {API_KEY}",
    "a wrong key": "Bearer probe-wrong-key",
    "no token": "Bearer",
}


class HttpProbe:
    """Every request on one keep-alive connection (one client port), each answer checked."""

    anthropic = False  # the route being probed has Anthropic's errors

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(base_url=url, timeout=TIMEOUT)
        self.port: int | None = None
        self.sent = 0

    def __enter__(self) -> HttpProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def send(
        self,
        what: str,
        method: str,
        path: str,
        content: bytes | None = None,
        authorization: str | None = KEY,
        expect: int | None = None,
        refusals: frozenset[int] = frozenset(),
    ) -> httpx.Response:
        """One request; its answer must be no 5xx but the route's documented `refusals`
        (`expect`, if given), any 4xx an error in OpenAI's shape, and the connection the
        same."""
        headers = {"content-type": "application/json"} if content is not None else {}
        if authorization is not None:
            headers["authorization"] = authorization
        r = self.client.request(method, path, content=content, headers=headers)
        self.sent += 1
        what = f"{method} {path} {what}"
        assert r.status_code < 500 or r.status_code in refusals, (what, r.status_code, r.text)
        assert expect is None or r.status_code == expect, (what, r.status_code, r.text[:300])
        if r.status_code >= 400:
            assert_error_body(r, what, self.anthropic)
        port = r.extensions["network_stream"].get_extra_info("client_addr")[1]
        assert self.port in (None, port), f"the lead closed the connection after {what}"
        self.port = port
        return r

    def route(self, route: Route, schemas: Schemas) -> None:
        self.anthropic = route.anthropic
        for method in OTHER_METHODS:  # a WebSocket's path, in plain HTTP, is no route
            if method != route.method:
                expect = 404 if route.method == "WEBSOCKET" else 405
                self.send("(another method)", method, route.path, expect=expect)
        if route.method == "WEBSOCKET":
            return
        if route.auth or not route.events:  # (an open stream would never end)
            for what, header in BAD_KEYS.items():
                expect = 401 if route.auth else None
                self.send(f"({what})", route.method, route.path, None, header, expect)
        if route.events:
            self.events(route)
        elif route.body is None:
            self.send("", route.method, route.path, expect=None)
            self.send("(with a body)", route.method, route.path, b"{not json")
        else:
            self.bodies(route, schemas)

    def events(self, route: Route) -> None:
        """A stream that never ends: its head, on a connection of its own."""
        headers = {"Authorization": KEY}
        with httpx.stream("GET", f"{self.url}{route.path}", headers=headers, timeout=TIMEOUT) as r:
            self.sent += 1
            assert r.status_code == 200, (route.path, r.status_code)

    def bodies(self, route: Route, schemas: Schemas) -> None:
        post = functools.partial(self.send, method="POST", path=route.path, refusals=route.refusals)
        for what, content in STRUCTURE:
            post(f"({what})", content=content)
        base = schemas.instance(route.body, nested=False)
        props = schemas.resolve(route.body).get("properties", {})
        base.update({k: v for k, v in CHEAP.items() if k in props})
        post(f"(a valid body {short(base)})", content=encode(base))
        post("(unknown fields)", content=encode({**base, "probe_unknown": [1]}))
        for what, bad, body in schemas.field_cases(route.body, base):
            r = post(what, content=encode(body))
            if r.status_code == 400:  # names the field, or none where the body is not JSON
                field = re.split(r"[.=]", what)[0] if is_json(bad) else None
                if not route.anthropic:
                    assert r.json()["error"]["param"] == field, (what, r.text[:300])
                elif field is not None:  # Anthropic's errors name it in their message
                    assert field in r.json()["error"]["message"], (what, r.text[:300])


def assert_error_body(r: httpx.Response, what: str, anthropic: bool = False) -> None:
    assert r.headers.get("content-type", "").startswith("application/json"), (what, r.headers)
    if anthropic:
        assert r.json()["type"] == "error", (what, r.text[:300])
    error = r.json()["error"]
    assert set(error) == (ANTHROPIC_ERROR_KEYS if anthropic else ERROR_KEYS), (what, error)
    assert isinstance(error["message"], str) and error["message"], (what, error)
    assert "Traceback" not in r.text, (what, r.text[:300])
    expected = {
        401: "authentication_error",
        404: "not_found_error",
        405: "invalid_request_error",
        501: "api_error" if anthropic else "not_supported_error",
        413: "request_too_large" if anthropic else "invalid_request_error",
    }.get(r.status_code, "invalid_request_error")
    assert error["type"] == expected, (what, r.status_code, error)


def encode(body: Json) -> bytes:
    """JSON, with NaN and infinities as Python writes them, and NOT_UTF8 as bytes that are
    not UTF-8."""
    return json.dumps(body, allow_nan=True).encode().replace(b'"\\ue000"', b'"\xff\xfe"')


# -- the drafter channel -------------------------------------------------------------------


BINARY, TEXT, CLOSE = 0x2, 0x1, 0x8
MASK = b"\x5a\xc3\x17\x88"  # any mask will do: the same one each run


def frame(
    payload: bytes, opcode: int = BINARY, length: int | None = None, mask: bool = True
) -> bytes:
    """A client's WebSocket frame; `length`: the one its header claims, if not its own."""
    n = len(payload) if length is None else length
    bit = 0x80 if mask else 0
    if n < 126:
        head = bytes([0x80 | opcode, bit | n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, bit | 126]) + struct.pack(">H", n)
    else:
        head = bytes([0x80 | opcode, bit | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


@dataclass(frozen=True)
class Outcome:
    """What a connection got: the HTTP answer's status line, the binary frames, the close
    frame's code and reason (None: none came), and whether the lead hung up."""

    status: str
    frames: list[bytes]
    close: tuple[int, str] | None
    ended: bool


class Channel:
    """One connection to the drafter channel, over a plain socket: bytes in, frames out."""

    def __init__(self, url: str, key: str | None, upgrade: dict[str, str] | None = None) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.buffer = b""
        self.status = ""
        if upgrade is None:
            return
        headers = {
            "Host": f"{host}:{port}",
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": base64.b64encode(b"duo probe 16 byt").decode(),
            "Sec-WebSocket-Version": "13",
            **({"Authorization": f"Bearer {key}"} if key else {}),
            **upgrade,
        }
        lines = [f"GET {p.PATH} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items() if v)]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while b"\r\n\r\n" not in self.buffer and self._read():
            pass
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        self.status = head.split(b"\r\n", 1)[0].decode("latin-1")

    def _read(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def _take(self, n: int) -> bytes | None:
        while len(self.buffer) < n:
            if not self._read():
                return None
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def frame(self) -> tuple[int, bytes] | None:
        """The lead's next frame (opcode, payload); None once it hung up."""
        head = self._take(2)
        if head is None:
            return None
        n = head[1] & 0x7F
        if n >= 126:
            size = 2 if n == 126 else 8
            raw = self._take(size)
            if raw is None:
                return None
            n = int.from_bytes(raw, "big")
        payload = self._take(n)
        return None if payload is None else (head[0] & 0x0F, payload)

    def outcome(self, send: bytes = b"", hang_up_after: int | None = None) -> Outcome:
        """Send, then read until the lead closes (with hang_up_after, until that many frames
        came, and hang up ourselves)."""
        frames: list[bytes] = []
        close = None
        ended = False
        try:
            if send:
                self.sock.sendall(send)
            while hang_up_after is None or len(frames) < hang_up_after:
                got = self.frame()
                if got is None:
                    ended = True
                    break
                opcode, payload = got
                if opcode == CLOSE:
                    code = int.from_bytes(payload[:2], "big") if payload else 1005
                    close = code, payload[2:].decode("utf-8", "replace")
                    ended = True
                    break
                frames.append(payload)
        except ConnectionError:
            ended = True
        finally:
            self.sock.close()
        return Outcome(self.status, frames, close, ended)

    def answer(self, send: bytes) -> str:
        """Send bytes that are not an upgrade: the status line of what came back, if any."""
        with self.sock:
            self.sock.sendall(send)
            while self._read():
                pass
        return self.buffer.split(b"\r\n", 1)[0].decode("latin-1")


@dataclass(frozen=True)
class ChannelCase:
    """A connection that sends `send` after the upgrade, and what the lead must do: send a
    WELCOME first, REFUSE with this reason (then close), or close with this code and reason;
    with `hang_up`, the client leaves once it sent `send` (after the WELCOME, if one);
    `dropped`: the lead counts a drafter dropped for breaking the protocol."""

    what: str
    send: bytes
    key: str | None = DRAFTER_KEY
    welcome: bool = False
    refuse: str | None = None
    close: int | None = None
    reason: str = ""
    hang_up: bool = False
    dropped: bool = False


def channel_cases(n_vocab: int, fingerprint: str) -> list[ChannelCase]:
    width = p.token_width(n_vocab)

    def hello(version: int = p.VERSION, vocab: int = n_vocab, fp: str = fingerprint) -> bytes:
        return p.encode(p.Hello(version, vocab, fp, "probe"))

    good = frame(hello())

    def msg(m: p.Message) -> bytes:
        return p.encode(m, width)

    def broken(what: str, send: bytes, reason: str, code: int = 1002) -> ChannelCase:
        """Closed for breaking the protocol, with the reason."""
        return ChannelCase(what, send, close=code, reason=reason, dropped=True)

    def refused(what: str, send: bytes, reason: str, key: str | None = DRAFTER_KEY) -> ChannelCase:
        return ChannelCase(what, send, key=key, refuse=reason)

    def later(what: str, message: bytes, reason: str) -> ChannelCase:
        """After a good handshake, a frame the lead must not take from a drafter."""
        return ChannelCase(
            what, good + message, welcome=True, close=1002, reason=reason, dropped=True
        )

    wrong_key, vocabulary = "invalid or missing drafter key", "the draft model's vocabulary"
    half = frame(msg(p.Append((1, 2))))[:5]
    return [
        # WebSocket framing, refused by the server before the lead reads it
        ChannelCase("garbage after the upgrade", b"\x7f\x05garbage\r\n" * 8, close=1002),
        ChannelCase("an oversized length", frame(b"\x01", length=1 << 62)[:20], close=1009),
        ChannelCase("a frame past the limit", frame(b"\x01" + b"x" * (16 << 10)), close=1009),
        ChannelCase("an unmasked frame", frame(b"\x01", mask=False), close=1002),
        # the handshake
        broken("a truncated HELLO", frame(hello()[:5]), "truncated"),
        broken("a text frame", frame(b"hello", TEXT), "text frames", code=1003),
        broken("an empty frame", frame(b""), "non-empty"),
        broken("an unknown frame", frame(b"\xee\x00"), "unknown frame type"),
        broken("a DRAFT first", frame(msg(p.DraftMsg(0, 0, (1, 2)))), "must be HELLO"),
        refused("an older version", frame(hello(version=p.OLDEST - 1)), "protocol version"),
        refused("another vocabulary", frame(hello(vocab=n_vocab + 1)), vocabulary),
        refused("another fingerprint", frame(hello(fp="0" * 16)), vocabulary),
        refused("no key", good, wrong_key, key=None),
        refused("the API key", good, wrong_key, key=API_KEY),
        refused("a wrong key", good, wrong_key, key="probe-wrong-key"),
        # after it
        later("a HELLO again", good, "only send drafts"),
        later("a BEGIN", frame(msg(p.Begin(0, (1,)))), "only send drafts"),
        later("an unknown token", frame(msg(p.DraftMsg(0, 0, (n_vocab,)))), "vocabulary"),
        later(
            "too many tokens",
            frame(msg(p.Append((1,) * (p.MAX_DRAFT_TOKENS + 1)))),
            "tokens in one frame",
        ),
        later("a truncated DRAFT", frame(msg(p.DraftMsg(0, 0, (1,)))[:7]), "truncated"),
        # clients that leave mid-frame
        ChannelCase("gone mid-HELLO", good[:7], hang_up=True),
        ChannelCase("gone mid-frame", good + half, welcome=True, hang_up=True),
    ]


def probe_channel(url: str, identity: tuple[int, str]) -> int:
    """Every bad connection to the drafter channel, one after the other (and a silent one
    meanwhile); returns how many connections were made."""
    auth = {"Authorization": f"Bearer {API_KEY}"}
    refused, dropped = (
        metric(url, f"duo_drafters_{name}_total", auth) for name in ("refused", "dropped")
    )
    silent = Channel(url, DRAFTER_KEY, upgrade={})
    heard: list[Outcome] = []
    waiting = threading.Thread(target=lambda: heard.append(silent.outcome()), daemon=True)
    waiting.start()

    cases = channel_cases(*identity)
    for case in cases:
        hang_up_after = int(case.welcome) if case.hang_up else None
        got = Channel(url, case.key, upgrade={}).outcome(case.send, hang_up_after)
        check_channel(case, got)
        assert health(url)["status"] == "ok", case.what
    # Not a WebSocket: an HTTP answer, never a 5xx, or none.
    not_http = Channel(url, None).answer(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
    assert not not_http.startswith("HTTP/1.1 5"), not_http
    for what, upgrade in {
        "another WebSocket version": {"Sec-WebSocket-Version": "8"},
        "no WebSocket key": {"Sec-WebSocket-Key": ""},
    }.items():
        channel = Channel(url, DRAFTER_KEY, upgrade)
        channel.sock.close()
        assert channel.status.split()[1][:1] == "4", (what, channel.status)

    waiting.join(TIMEOUT)
    assert heard, "the silent connection was never closed"
    check_channel(
        ChannelCase("silence", b"", close=1002, reason="no HELLO", dropped=True), heard[0]
    )
    wait_until(lambda: health(url)["drafters"] == 0, 10, "every probing drafter gone")
    n_refused = sum(1 for c in cases if c.refuse)
    n_dropped = sum(1 for c in cases if c.dropped) + 1
    assert metric(url, "duo_drafters_refused_total", auth) - refused == n_refused
    assert metric(url, "duo_drafters_dropped_total", auth) - dropped == n_dropped
    return len(cases) + 4


def check_channel(case: ChannelCase, got: Outcome) -> None:
    what = (case.what, got)
    assert got.status.startswith("HTTP/1.1 101"), what
    frames = list(got.frames)
    if case.welcome:
        assert frames and isinstance(p.decode(frames.pop(0)), p.Welcome), what
    if case.refuse is not None:
        assert len(frames) == 1, what
        refusal = p.decode(frames[0])
        assert isinstance(refusal, p.Refuse) and case.refuse in refusal.reason, what
        assert got.close == (1008, "refused"), what
    elif case.hang_up:
        assert not frames, what
    else:
        assert not frames and got.close is not None, what
        assert got.close[0] == case.close and case.reason in got.close[1], what
    assert got.ended or case.hang_up, what


def metric(url: str, name: str, headers: dict[str, str]) -> float:
    for line in httpx.get(f"{url}/metrics", headers=headers, timeout=TIMEOUT).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


# -- the command line ----------------------------------------------------------------------


def start_bad_commands(main: Path, port: int) -> list[tuple[list[str], subprocess.Popen[str]]]:
    """Bad uses of `duo lead` and `duo generate`, all started at once."""
    model = ["-m", str(main)]
    commands = [
        ["lead", *model, "--port", "99999"],
        ["lead", *model, "--port", "abc"],
        ["lead", *model, "--port", str(port)],  # the probed lead's: in use
        ["lead", *model, "--host", ""],
        ["lead", "-m", str(main.with_name("no-such-model.gguf"))],
        ["lead", "-m", str(main.parent)],  # a directory
        ["lead", *model, "--frobnicate"],
        ["generate", *model, "--temp", "hot", "-p", "x"],
        ["generate", *model, "--no-such-flag"],
    ]
    started = []
    for args in commands:
        cmd = [sys.executable, "-m", "duo", *args]
        popen = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        started.append((args, popen))
    return started


def finish_bad_commands(started: list[tuple[list[str], subprocess.Popen[str]]]) -> int:
    """Each exits 2 with one line on stderr, no traceback and nothing on stdout."""
    for args, popen in started:
        try:
            out, err = popen.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            popen.kill()
            raise AssertionError(f"duo {args} did not exit") from None
        assert popen.returncode == 2, (args, popen.returncode, err[-2000:])
        assert "Traceback" not in err and not out, (args, out, err[-2000:])
        assert len(err.strip().splitlines()) == 1 and "error" in err, (args, err)
    return len(started)
