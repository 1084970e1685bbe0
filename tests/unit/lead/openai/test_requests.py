"""Request parsing of the lead's API (bodies decoded into the typed requests): hostile bodies
are 4xx DuoErrors naming the field, never other exceptions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from duo.errors import DuoError, UsageError, http_status
from duo.lead.body import MAX_SEED, decode, read_body
from duo.lead.openai.chat import ChatRequest
from duo.lead.openai.requests import (
    CompletionRequest,
    DetokenizeRequest,
    Output,
    TokenizeRequest,
)

N_CTX = 4096
N_VOCAB = 1000


def parse_json(raw: bytes) -> CompletionRequest:
    return decode(raw, CompletionRequest)


def completion(**body: Any) -> CompletionRequest:
    return decode(json.dumps({"prompt": "hi", **body}).encode(), CompletionRequest)


def output_fields(body: dict[str, Any]) -> Output:
    return completion(**body).output()


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return decode(json.dumps(body).encode(), ChatRequest).template_messages()


@contextmanager
def refused(status: int = 400, param: str | None = None) -> Iterator[None]:
    """The block raises a DuoError with this HTTP status, naming this field."""
    with pytest.raises(DuoError) as info:
        yield
    e = info.value
    assert http_status(e)[0] == status, (http_status(e), e.message)
    assert e.message
    if param is not None:
        assert e.param == param, (e.param, e.message)


# -- the JSON itself -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"prompt": "hi", "temperature": NaN}',
        b'{"prompt": "hi", "repeat_penalty": Infinity}',
        b'{"prompt": "hi", "top_p": -Infinity}',
        b'{"prompt": "hi", "temperature": 1e999}',  # parses to inf
        b'{"prompt": "hi", "extra": [1, NaN]}',  # anywhere in the body
    ],
)
def test_nan_and_infinity_are_refused(raw: bytes) -> None:
    assert json.loads(raw)  # Python's json takes them: the lead must not
    with refused():
        parse_json(raw)


def test_deep_nesting_is_a_400_not_a_recursion_error() -> None:
    for raw in (b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, b"[" * 100_000 + b"]" * 100_000):
        with refused():
            parse_json(raw)


@pytest.mark.parametrize(
    "raw",
    [b"", b"{not json", b"[1, 2]", b'"text"', b'{"prompt": "\xff"}', b"1" * 5000],
)
def test_not_a_json_object(raw: bytes) -> None:
    with refused():
        parse_json(raw)


# -- reading the body under a limit --------------------------------------------------------


def request(
    chunks: list[bytes], headers: dict[str, str] | None = None
) -> tuple[Request, list[int]]:
    """A Starlette request whose body arrives in `chunks`; the list counts the chunks read."""
    read = [0]
    pending: Iterator[bytes] = iter(chunks)

    async def receive() -> dict[str, Any]:
        chunk = next(pending, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        read[0] += 1
        return {"type": "http.request", "body": chunk, "more_body": True}

    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": raw_headers}
    return Request(scope, receive), read


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    req, read = request([b"x" * 100], {"content-length": "1001"})
    with refused(413):
        asyncio.run(read_body(req, 1000))
    assert read[0] == 0


def test_a_streamed_body_is_cut_off_as_soon_as_it_passes_the_limit() -> None:
    req, read = request([b" " * 400] * 1000)  # chunked: no Content-Length
    with refused(413):
        asyncio.run(read_body(req, 1000))
    assert read[0] == 3  # 1200 bytes > 1000: nothing past the chunk that crossed the limit
    with pytest.raises(DuoError) as info:
        asyncio.run(read_body(request([b" " * 400] * 3, {"content-length": "10"})[0], 1000))
    assert info.value.code == "request_too_large"  # a Content-Length that lies


def test_a_body_at_the_limit_is_read() -> None:
    body = json.dumps({"prompt": "x" * 980}).encode()
    req, _ = request([body[:500], body[500:]], {"content-length": str(len(body))})
    assert asyncio.run(read_body(req, len(body))) == body


# -- sampling fields -----------------------------------------------------------------------


def sampling(**body: Any) -> tuple[int, list[str], Any]:
    request = completion(**body)
    return request.max_new_tokens(N_CTX), request.stops(), request.sampling(N_CTX, N_VOCAB)


def test_seed_minus_one_means_random_as_in_llama_cpp() -> None:
    assert sampling(seed=-1)[2].seed is None
    assert sampling(seed=0)[2].seed == 0
    assert sampling(seed=MAX_SEED)[2].seed == MAX_SEED
    assert sampling()[2].seed is None


def test_repeat_last_n_minus_one_is_the_whole_context() -> None:
    assert sampling(repeat_last_n=-1)[2].repeat_last_n == N_CTX
    assert sampling(repeat_last_n=0)[2].repeat_last_n == 0


def test_good_values_pass_through() -> None:
    max_tokens, stops, p = sampling(
        max_tokens=10**30,  # more than the context: cut to it
        temperature=0,
        top_k=0,
        top_p=1,
        min_p=0,
        repeat_penalty=1.1,
        stop=["", "\n"],
        n=1,
        stream=False,
    )
    assert max_tokens == N_CTX
    assert stops == ["", "\n"]  # empty stop strings are harmless: the matcher skips them
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty) == (0, 0, 1, 0, 1.1)
    assert sampling(max_completion_tokens=5, max_tokens=9)[0] == 5


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("seed", -2),
        ("seed", MAX_SEED + 1),
        ("seed", 1.5),
        ("seed", 7.0),  # integers are JSON integers
        ("seed", "42"),
        ("seed", True),
        ("top_k", -1),
        ("top_k", 40.0),
        ("top_k", False),
        ("top_p", 0),  # SamplingParams takes (0, 1]
        ("top_p", 1.01),
        ("top_p", -0.5),
        ("min_p", 1.5),
        ("min_p", -0.1),
        ("temperature", -0.01),
        ("temperature", "hot"),
        ("temperature", 10**400),  # an integer no float holds
        ("repeat_penalty", 0),
        ("repeat_penalty", -1.0),
        ("repeat_penalty", 1e-45),  # logits / 1e-45 overflow float32: NaN probabilities
        ("repeat_penalty", 1e300),
        ("repeat_last_n", -2),
        ("repeat_last_n", 64.5),
        ("max_tokens", 0),
        ("max_tokens", -5),
        ("max_tokens", 1e300),
        ("max_tokens", 16.0),
        ("max_tokens", "ten"),
        ("max_completion_tokens", 0),
        ("stop", 5),
        ("stop", ["a", 5]),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("stop", "x" * 1025),
        ("stop", "\ud800"),
    ],
)
def test_bad_values_are_400_naming_the_field(param: str, value: Any) -> None:
    with refused(400, param):
        sampling(**{param: value})


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("n", 0),
        ("n", 129),
        ("n", 1.0),
        ("stream", "yes"),
        ("stream_options", "include_usage"),
        ("user", ["a"]),
        ("user", "\ud800"),
    ],
)
def test_bad_output_fields_are_400_naming_the_field(param: str, value: Any) -> None:
    with refused(400, param):
        output_fields({param: value})


def test_output_fields() -> None:
    assert output_fields({}) == Output(1, False, False)
    body = {"n": 128, "stream": True, "stream_options": {"include_usage": True}, "user": "u"}
    assert output_fields(body) == Output(128, True, True)
    assert output_fields({"stream": True, "stream_options": None}) == Output(1, True, False)


# -- chat messages -------------------------------------------------------------------------


def test_messages_with_lone_surrogates_are_refused() -> None:
    body = json.loads('{"messages": [{"role": "user", "content": "a\\ud800b"}]}')
    with refused(400, "messages"):
        chat_messages(body)
    body = json.loads('{"messages": [{"role": "\\udfff", "content": "hi"}]}')
    with refused(400, "messages"):
        chat_messages(body)
    # A surrogate pair is a real character.
    body = json.loads('{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}')
    assert chat_messages(body) == [{"role": "user", "content": "\U0001f600"}]


@pytest.mark.parametrize(
    "messages",
    [
        None,
        [],
        {"role": "user"},
        [{"content": "hi"}],
        [{"role": 1, "content": "hi"}],
        [{"role": "user", "content": None}],
        [{"role": "user", "content": 5}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        [{"role": "user", "content": [{"type": "text", "text": 5}]}],
        [{"role": "user", "content": ["text"]}],
    ],
)
def test_malformed_messages(messages: Any) -> None:
    with refused(400, "messages"):
        chat_messages({"messages": messages})


def test_text_parts_are_joined() -> None:
    parts = [{"type": "text", "text": "ab"}] * 50_000
    assert chat_messages({"messages": [{"role": "user", "content": parts}]}) == [
        {"role": "user", "content": "ab" * 50_000}
    ]


def test_null_means_the_default_and_unknown_fields_are_ignored() -> None:
    nulls = dict.fromkeys(("temperature", "top_p", "seed", "n", "stream", "stop", "logit_bias"))
    request = completion(**nulls, unknown={"nested": [1, "x"]}, logprobs=None)
    assert request.sampling(N_CTX, N_VOCAB) == completion().sampling(N_CTX, N_VOCAB)
    assert request.output() == Output(1, False, False)
    assert request.max_new_tokens(N_CTX) == 16  # /v1/completions' default
    assert sampling(max_tokens=None)[0] == 16


def test_errors_name_the_field_at_fault() -> None:
    with refused(400, "messages"):
        chat_messages({"messages": [{"role": "user", "content": "hi"}, {"content": "x"}]})
    for body, param in [
        ({"prompt": "hi", "logit_bias": {"x": 1}}, "logit_bias"),  # a key
        ({"prompt": "hi", "logit_bias": {"1": 101}}, "logit_bias"),  # a value
        ({"prompt": "hi", "stream_options": {"include_usage": 1}}, "stream_options"),
        ({}, "prompt"),  # missing
        ({"prompt": None}, "prompt"),
    ]:
        with refused(400, param):
            parse_json(json.dumps(body).encode())
    with pytest.raises(DuoError) as info:
        parse_json(b"[]")
    assert info.value.param is None  # the body as a whole


# Any JSON value, with the requests' own field names among the keys to get past the top.
FIELDS = [
    *("prompt", "messages", "role", "content", "tools", "tool_choice", "function", "name"),
    *("type", "text", "tool_calls", "arguments", "stop", "seed", "n", "logprobs"),
    *("top_logprobs", "logit_bias", "response_format", "json_schema", "schema", "stream"),
    *("stream_options", "include_usage", "tokens", "max_tokens", "temperature", "top_p"),
]
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
    | st.sampled_from(["function", "text", "json_schema", "auto", "user", "1"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=3), inner, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_any_json_body_is_a_request_or_a_usage_error_naming_a_field_it_holds(value: Any) -> None:
    raw = json.dumps(value).encode()
    for kind in (CompletionRequest, ChatRequest, TokenizeRequest, DetokenizeRequest):
        try:
            request = decode(raw, kind)
            if isinstance(request, CompletionRequest | ChatRequest):
                request.sampling(N_CTX, N_VOCAB)
                request.output()
                request.stops()
            if isinstance(request, ChatRequest):
                request.template_messages()
                request.offered_tools()
        except UsageError as e:
            fields = set(value) if isinstance(value, dict) else set()
            named = {e.param} - {None, "functions"}  # functions: or function_call
            assert named <= fields | {"prompt", "messages"}, (e.param, e.message)  # or missing
