"""The OpenAI sampling fields: parsed strictly, shaped as OpenAI's clients expect."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from duo.core.logprobs import TokenLogprob
from duo.core.sampling import SamplingParams
from duo.errors import UsageError
from duo.lead.body import decode
from duo.lead.openai.chat import ChatRequest
from duo.lead.openai.logprobs import CompletionLogprobs, chat_logprobs
from duo.lead.openai.requests import CompletionRequest
from duo.llama.grammar import JSON_OBJECT, json_schema_gbnf, nesting, unenforced

PIECES = {1: b"He", 2: b"llo", 3: b" \xe2\x82", 4: b"\xac", 5: b"!"}
USER = [{"role": "user", "content": "hi"}]


def sampling_extras(body: dict[str, Any], n_vocab: int, *, chat: bool) -> SamplingParams:
    """The sampler settings of a chat or completion request with these fields."""
    full = {**body, "messages": USER} if chat else {**body, "prompt": "hi"}
    kind = ChatRequest if chat else CompletionRequest
    return decode(json.dumps(full).encode(), kind).sampling(256, n_vocab)


def logit_bias(body: dict[str, Any], n_vocab: int) -> tuple[tuple[int, float], ...]:
    return sampling_extras(body, n_vocab, chat=False).logit_bias


def grammar_text(body: dict[str, Any]) -> str | None:
    request = decode(json.dumps({**body, "prompt": "hi"}).encode(), CompletionRequest)
    fmt = request.response_format
    return None if fmt is None else fmt.gbnf()


def test_fields_become_sampler_settings() -> None:
    body = {
        "logprobs": True,
        "top_logprobs": 4,
        "logit_bias": {"7": -100, "3": 2.5},
        "presence_penalty": 0.5,
        "frequency_penalty": -1,
    }
    p = sampling_extras(body, 100, chat=True)
    assert (p.logprobs, p.logit_bias) == (4, ((3, 2.5), (7, -100.0)))
    assert (p.presence_penalty, p.frequency_penalty) == (0.5, -1.0)
    assert sampling_extras({"logprobs": True}, 100, chat=True).logprobs == 0
    assert sampling_extras({}, 100, chat=True).logprobs is None
    assert sampling_extras({"logprobs": 2}, 100, chat=False).logprobs == 2
    assert sampling_extras({"logprobs": None}, 100, chat=False).logprobs is None


@pytest.mark.parametrize(
    ("body", "chat"),
    [
        ({"logprobs": 3}, True),  # chat: a boolean
        ({"logprobs": True}, False),  # completions: a count
        ({"logprobs": 21}, False),
        ({"logprobs": True, "top_logprobs": 21}, True),
        ({"top_logprobs": 1}, True),
        ({"logit_bias": {"-1": 1}}, True),
        ({"logit_bias": {"100": 1}}, True),
        ({"logit_bias": {"1": 100.5}}, True),
        ({"logit_bias": {"1": True}}, True),
        ({"logit_bias": {"٣": 1}}, True),  # a digit, but not an ASCII one
        ({"logit_bias": [[1, 2]]}, True),
        ({"presence_penalty": 2.01}, True),
        ({"frequency_penalty": -3}, False),
    ],
)
def test_bad_fields_are_refused(body: dict[str, Any], chat: bool) -> None:
    with pytest.raises(UsageError) as e:
        sampling_extras(body, 100, chat=chat)
    assert e.value.param in body


def test_logit_bias_keys_are_token_ids() -> None:
    assert logit_bias({"logit_bias": {"0": 1, "99": -1.5}}, 100) == ((0, 1.0), (99, -1.5))
    assert logit_bias({}, 100) == ()


def test_response_formats() -> None:
    assert grammar_text({}) is None
    assert grammar_text({"response_format": {"type": "text"}}) is None
    assert grammar_text({"response_format": {"type": "json_object"}}) == JSON_OBJECT
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    gbnf = grammar_text({"response_format": fmt})
    assert gbnf is not None and "root ::=" in gbnf and "true" in gbnf
    with_schema = {"type": "json_object", "schema": schema}  # llama-server's form
    assert grammar_text({"response_format": with_schema}) == gbnf
    for bad in (
        {"type": "yaml"},
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"schema": []}},
        {"type": "json_schema", "json_schema": {"schema": {"type": "tuple"}}},
        {"type": "json_schema", "json_schema": {"schema": {"$ref": "https://x/y.json"}}},
    ):
        with pytest.raises(UsageError):
            grammar_text({"response_format": bad})


def test_keywords_the_grammar_cannot_enforce_are_refused() -> None:
    fine = {
        "type": "object",
        "properties": {"minimum": {"type": "integer"}},  # a property's name, not a keyword
        "$defs": {"p": {"type": "array", "items": {"enum": [1, 2]}, "maxItems": 2}},
    }
    assert unenforced(fine) is None
    json_schema_gbnf(fine)
    nested = {"type": "object", "properties": {"n": {"anyOf": [{"type": "integer", "minimum": 0}]}}}
    assert unenforced(nested) == "#/properties/n/anyOf/0/minimum"
    for schema in (nested, {"type": "array", "uniqueItems": True}, {"not": {"type": "null"}}):
        with pytest.raises(UsageError):
            json_schema_gbnf(schema)


def test_chat_logprobs_shape() -> None:
    entries = [TokenLogprob(1, -0.5, ((1, -0.5), (2, -1.5))), TokenLogprob(3, -2.0, ())]
    assert chat_logprobs(entries, PIECES.__getitem__) == {
        "content": [
            {
                "token": "He",
                "logprob": -0.5,
                "bytes": [72, 101],
                "top_logprobs": [
                    {"token": "He", "logprob": -0.5, "bytes": [72, 101]},
                    {"token": "llo", "logprob": -1.5, "bytes": [108, 108, 111]},
                ],
            },
            {"token": " \ufffd", "logprob": -2.0, "bytes": [32, 226, 130], "top_logprobs": []},
        ],
        "refusal": None,
    }


def test_completion_logprobs_offsets_count_characters_across_chunks() -> None:
    legacy = CompletionLogprobs(PIECES.__getitem__)
    first = legacy.shape([TokenLogprob(1, -0.1, ((2, -0.2),)), TokenLogprob(2, -0.3, ())])
    assert first == {
        "tokens": ["He", "llo"],
        "token_logprobs": [-0.1, -0.3],
        "top_logprobs": [{"llo": -0.2, "He": -0.1}, {"llo": -0.3}],  # plus the sampled one
        "text_offset": [0, 2],
    }
    rest = legacy.shape([TokenLogprob(t, -1.0, ()) for t in (3, 4, 5)])
    assert rest["text_offset"] == [5, 6, 7]  # "Hello €!": the euro sign is one character


def test_schemas_that_would_blow_up_the_grammar_are_refused() -> None:
    for schema in (
        {"type": "string", "maxLength": 100_000_000},
        {"type": "array", "minItems": 5000},
        {"type": "object", "properties": {"a": {"type": "string", "maxLength": 2000}}},
    ):
        with pytest.raises(UsageError):
            json_schema_gbnf(schema)
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(100):
        deep = {"anyOf": [deep]}
    with pytest.raises(UsageError):
        json_schema_gbnf(deep)
    assert json_schema_gbnf({"type": "string", "maxLength": 1000})


def test_grammar_nesting_skips_literals_classes_and_comments() -> None:
    assert nesting('root ::= ("(" [()] (x)?) # ((((\n') == 2
    assert nesting('root ::= "\\"(" x') == 0
    assert nesting("root ::= " + "(" * 3000 + '"a"' + ")?" * 3000) == 3000


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"enum": list(range(1001))}, "more than 1000 'enum' values"),
        (
            {"properties": {f"p{i}": {"enum": list(range(100))} for i in range(11)}},
            "more than 1000 'enum' values",  # in all
        ),
        ({"const": "x" * 200_000}, "bytes; at most"),
        ({"type": "string", "pattern": "^(ab$"}, "'pattern' at # is not a regular expression"),
        (
            {"properties": {"a": {"type": "string", "pattern": "[z-a]"}}},
            "'pattern' at #/properties/a is not",
        ),
    ],
)
def test_a_schema_too_costly_to_enforce_or_with_a_bad_pattern_is_refused(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        json_schema_gbnf(schema)


def test_a_schema_within_the_bounds_is_converted() -> None:
    schema = {"properties": {"id": {"type": "string", "pattern": "^[a-z]{2}[0-9]+$"}}}
    assert json_schema_gbnf(schema)
    assert json_schema_gbnf({"enum": list(range(1000))})


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"prompt": ["Hello", "Bye"]}, "prompt", "a batch of prompts is not supported"),
        ({"prompt": "hi", "echo": True}, "echo", "'echo' is not supported"),
    ],
)
def test_what_completions_do_not_do_is_said(body: dict[str, Any], param: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)) as e:
        decode(json.dumps(body).encode(), CompletionRequest)
    assert e.value.param == param


def test_a_list_of_one_prompt_and_echo_false_are_served() -> None:
    request = decode(b'{"prompt": ["Hello"], "echo": false}', CompletionRequest)
    assert request.text_or_tokens() == "Hello"
