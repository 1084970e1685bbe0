"""logprobs, logit_bias, penalties and structured output through the official client, on a
lead with a back attached, against the main model alone (a lead with --spec-type none).

Both leads run --deterministic (every round is a batch), so the main model's logits are
bit-identical with and without drafts: text, seeded samples and logprobs must be equal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from duo.errors import UsageError
from duo.llama.backend import Model
from duo.llama.grammar import JSON_OBJECT, Grammar

from .conftest import Cluster

pytestmark = pytest.mark.integration

CHAT = [{"role": "user", "content": "Write a poem about autumn."}]
RAW = "a, b, c, d,"
FRUITS = "Here is a list of ten fruits and their colors:\n1."


@pytest.fixture(scope="module")
def leads(
    pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[openai.OpenAI, openai.OpenAI]]:
    """(a lead verifying a back's drafts and its own n-gram lookups, the main model alone)."""
    with Cluster(tmp_path_factory.mktemp("structured")) as cluster:
        common = ("-m", str(pair[0]), "--deterministic", "--quiet")
        _, spec = cluster.lead(*common, "--policy", "fixed")
        cluster.back(spec, "-m", str(pair[1]))
        _, alone = cluster.lead(*common, "--spec-type", "none")
        yield tuple(  # type: ignore[misc]
            openai.OpenAI(base_url=f"{url}/v1", api_key="x", timeout=120, max_retries=0)
            for url in (spec, alone)
        )


@pytest.fixture(scope="module")
def model(pair: tuple[Path, Path]) -> Iterator[Model]:
    with Model(pair[0], n_ctx=64) as model:
        yield model


def drafted(response: Any) -> int:
    return int(response.model_extra["timings"]["draft_n_accepted"])


def entries(logprobs: Any) -> list[tuple[Any, ...]]:
    return [
        (e.token, e.logprob, tuple(e.bytes), tuple((t.token, t.logprob) for t in e.top_logprobs))
        for e in logprobs.content
    ]


def chat(client: openai.OpenAI, **kw: Any) -> tuple[str, Any, Any]:
    """(text, the choice, the response) of a chat request."""
    r = client.chat.completions.create(model="duo", messages=CHAT, **kw)  # type: ignore[arg-type]
    return r.choices[0].message.content or "", r.choices[0], r


def chat_stream(client: openai.OpenAI, **kw: Any) -> tuple[str, list[tuple[Any, ...]]]:
    text, got = [], []
    for chunk in client.chat.completions.create(
        model="duo",
        messages=CHAT,
        stream=True,
        **kw,  # type: ignore[arg-type]
    ):
        choice = chunk.choices[0]
        text.append(choice.delta.content or "")
        if choice.logprobs is not None:
            got.extend(entries(choice.logprobs))
    return "".join(text), got


# -- logprobs -------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 42}])
def test_chat_logprobs_equal_the_main_model_alone(
    leads: tuple[openai.OpenAI, openai.OpenAI], sampling: dict[str, Any]
) -> None:
    spec, alone = leads
    kw = {"max_tokens": 64, "logprobs": True, "top_logprobs": 5, **sampling}
    text, choice, response = chat(spec, **kw)
    assert drafted(response) > 0, "no draft accepted: the check would be vacuous"
    want_text, want_choice, _ = chat(alone, **kw)
    got = entries(choice.logprobs)
    assert (text, got) == (want_text, entries(want_choice.logprobs))  # bit-equal
    assert chat_stream(spec, **kw) == (text, got)
    assert len(got) == response.usage.completion_tokens
    assert "".join(e[0] for e in got) == text
    for token, logprob, raw, top in got:
        assert len(top) == 5 and logprob <= 0
        assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
        assert bytes(raw).decode("utf-8", "replace") == token
        if sampling["temperature"] == 0:  # greedy: the most likely token, by the same numbers
            assert top[0] == (token, logprob)
    plain, plain_choice, _ = chat(spec, max_tokens=64, **sampling)
    assert plain == text and plain_choice.logprobs is None  # asking for them changes nothing


def test_completion_logprobs_in_the_legacy_shape(
    leads: tuple[openai.OpenAI, openai.OpenAI],
) -> None:
    spec, alone = leads
    kw: dict[str, Any] = {"prompt": FRUITS, "max_tokens": 48, "temperature": 0, "logprobs": 3}
    r = spec.completions.create(model="duo", **kw)
    assert drafted(r) > 0
    lp = r.choices[0].logprobs
    text = r.choices[0].text
    want = alone.completions.create(model="duo", **kw).choices[0].logprobs
    assert lp is not None and want is not None
    assert (lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset) == (
        want.tokens,
        want.token_logprobs,
        want.top_logprobs,
        want.text_offset,
    )
    assert lp.tokens and lp.token_logprobs and lp.top_logprobs and lp.text_offset
    assert "".join(lp.tokens) == text
    for token, offset, top, logprob in zip(
        lp.tokens, lp.text_offset, lp.top_logprobs, lp.token_logprobs, strict=True
    ):
        assert text[offset:].startswith(token)
        assert 3 <= len(top) <= 4 and top[token] == logprob
    streamed: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "text_offset": []}
    for chunk in spec.completions.create(model="duo", stream=True, **kw):
        if chunk.choices[0].logprobs is not None:
            for key, values in streamed.items():
                values.extend(getattr(chunk.choices[0].logprobs, key))
    assert streamed == {
        "tokens": lp.tokens,
        "token_logprobs": lp.token_logprobs,
        "text_offset": lp.text_offset,
    }


def test_a_stop_string_takes_its_tokens_out_of_the_logprobs(
    leads: tuple[openai.OpenAI, openai.OpenAI],
) -> None:
    spec, _ = leads
    full, choice, _ = chat(spec, max_tokens=64, temperature=0, logprobs=True)
    tokens = [e[0] for e in entries(choice.logprobs)]
    stop = full[len(full) // 2 : len(full) // 2 + 6]
    cut, cut_choice, _ = chat(spec, max_tokens=64, temperature=0, logprobs=True, stop=stop)
    assert cut == full[: full.index(stop)] and cut_choice.finish_reason == "stop"
    kept = [e[0] for e in entries(cut_choice.logprobs)]
    assert kept == tokens[: len(kept)]
    assert "".join(kept).startswith(cut)
    assert len("".join(kept)) < len(cut) + len(tokens[len(kept) - 1]) + 1  # none past the cut


# -- logit_bias and penalties ---------------------------------------------------------------


def test_logit_bias_steers_the_main_model_with_drafts_verified_against_it(
    leads: tuple[openai.OpenAI, openai.OpenAI], model: Model
) -> None:
    spec, alone = leads

    def complete(client: openai.OpenAI, **kw: Any) -> tuple[str, int]:
        r = client.completions.create(model="duo", prompt=RAW, max_tokens=40, temperature=0, **kw)
        return r.choices[0].text, drafted(r)

    plain, _ = complete(spec)
    assert plain.startswith(" e,")
    (e,) = model.vocab.tokenize(" e", add_special=False)
    banned = {str(e): -100}
    text, accepted = complete(spec, logit_bias=banned)
    assert not text.startswith(" e") and accepted > 0
    assert text == complete(alone, logit_bias=banned)[0]
    (x,) = model.vocab.tokenize(" x", add_special=False)
    favoured = {str(x): 30}
    text, _ = complete(spec, logit_bias=favoured)
    assert text.startswith(" x") and text == complete(alone, logit_bias=favoured)[0]


@pytest.mark.parametrize(
    "penalties",
    [
        {"frequency_penalty": 1.5},
        {"presence_penalty": 1.2},
        {"frequency_penalty": 0.8, "presence_penalty": 0.6, "temperature": 0.8, "seed": 3},
    ],
)
def test_penalties_equal_the_main_model_alone(
    leads: tuple[openai.OpenAI, openai.OpenAI], penalties: dict[str, Any]
) -> None:
    spec, alone = leads
    kw = {"temperature": 0, "max_tokens": 64, **penalties}
    text, _, response = chat(spec, **kw)
    assert drafted(response) > 0
    assert text == chat(alone, **kw)[0]
    unpenalised = {k: v for k, v in kw.items() if not k.endswith("_penalty")}
    assert text != chat(alone, **unpenalised)[0]  # the penalties really changed something


# -- structured output ----------------------------------------------------------------------

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer"},
            "email": {"type": "string", "maxLength": 40},
        },
        "required": ["name", "age"],
    },
    {
        "type": "object",
        "properties": {
            "fruits": {
                "type": "array",
                "items": {"type": "string", "maxLength": 16},
                "minItems": 2,
                "maxItems": 4,
            }
        },
        "required": ["fruits"],
    },
    {
        "type": "object",
        "properties": {
            "answer": {"enum": ["yes", "no", "maybe"]},
            "confident": {"type": "boolean"},
            "score": {"type": "number"},
        },
        "required": ["answer", "confident", "score"],
    },
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "location": {
                "type": "object",
                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat", "lon"],
            },
            "tags": {"type": "array", "items": {"enum": ["big", "old", "cold"]}, "maxItems": 3},
        },
        "required": ["city", "location", "tags"],
    },
]
PROMPTS = [
    "Describe a person as JSON.",
    "Tell me about Paris.",
    "Is the sky blue? Answer in JSON.",
]


def structured(client: openai.OpenAI, prompt: str, fmt: dict[str, Any], **kw: Any) -> Any:
    r = client.chat.completions.create(
        model="duo",
        messages=[{"role": "user", "content": prompt}],
        response_format=fmt,  # type: ignore[arg-type]
        max_tokens=160,
        **kw,
    )
    return r


@pytest.mark.parametrize("schema", SCHEMAS, ids=["person", "list", "enum", "nested"])
def test_json_schema_output_validates_and_equals_the_main_model_alone(
    leads: tuple[openai.OpenAI, openai.OpenAI], schema: dict[str, Any]
) -> None:
    spec, alone = leads
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    prompt = PROMPTS[SCHEMAS.index(schema) % len(PROMPTS)]  # each prompt, each schema once
    for sampling in ({"temperature": 0}, {"temperature": 0.8, "seed": 11}):
        r = structured(spec, prompt, fmt, **sampling)
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", text
        jsonschema.validate(json.loads(text), schema)
        assert text == structured(alone, prompt, fmt, **sampling).choices[0].message.content


def test_json_schema_streams_and_drafts_are_verified_under_the_grammar(
    leads: tuple[openai.OpenAI, openai.OpenAI],
) -> None:
    spec, _ = leads
    schema = SCHEMAS[1]
    fmt = {"type": "json_schema", "json_schema": {"name": "fruits", "schema": schema}}
    first = structured(spec, PROMPTS[1], fmt, temperature=0)
    again = structured(spec, PROMPTS[1], fmt, temperature=0)  # the suffix cache drafts it all
    assert drafted(again) > 0
    parts = [
        chunk.choices[0].delta.content or ""
        for chunk in spec.chat.completions.create(
            model="duo",
            messages=[{"role": "user", "content": PROMPTS[1]}],
            response_format=fmt,  # type: ignore[arg-type]
            max_tokens=160,
            temperature=0,
            stream=True,
        )
    ]
    text = first.choices[0].message.content
    assert again.choices[0].message.content == "".join(parts) == text
    jsonschema.validate(json.loads(text), schema)


def test_json_object_with_logprobs(leads: tuple[openai.OpenAI, openai.OpenAI]) -> None:
    spec, alone = leads
    kw: dict[str, Any] = {"temperature": 0.7, "seed": 5, "logprobs": True, "top_logprobs": 2}
    # Free-form JSON has no bound on its length: prompts this small model answers briefly.
    for prompt in (
        "Give me a JSON object with a name and an age.",
        "Return a JSON object with the keys city and country for Paris.",
        "Write a JSON object describing a cat with its name and color.",
    ):
        r = structured(spec, prompt, {"type": "json_object"}, **kw)
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", text
        assert isinstance(json.loads(text), dict), text
        want = structured(alone, prompt, {"type": "json_object"}, **kw).choices[0]
        assert text == want.message.content
        assert entries(r.choices[0].logprobs) == entries(want.logprobs)


# -- refusals -------------------------------------------------------------------------------


HUGE = {"type": "string", "maxLength": 100_000_000}  # 800 MB of grammar, spelled out
BOUNDED = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}}}


def test_grammars_too_deep_for_llama_cpp_are_refused_before_it_parses_them(model: Model) -> None:
    deep = "root ::= " + '("a" ' * 20000 + ")?" * 20000  # overflows llama.cpp's parser
    with pytest.raises(UsageError):
        Grammar(model, deep)
    with pytest.raises(UsageError):
        Grammar(model, "root ::= undefined-rule")
    grammar = Grammar(model, JSON_OBJECT)
    (brace,) = model.vocab.tokenize("{", add_special=False)
    (x,) = model.vocab.tokenize("x", add_special=False)
    assert grammar.allows(brace) and not grammar.allows(x)
    grammar.close()


def test_schema_grammars_load_in_llama_cpp(model: Model) -> None:
    """llama.cpp's own converter cases that duo turns into a grammar, and schemas with
    $refs (through $defs, definitions, the root, recursive): each grammar parses in
    llama.cpp (but for the cases the fixture says it cannot: a 400 when asked for); a
    recursive one takes a tree of any depth and nothing else."""
    from tests.unit.lead.test_schema_refs import CASES, RESOLVED, schema_gbnf

    parses = [c["schema"] for c in CASES if c["duo"] == "grammar"]
    for schema in [*parses, *(schema for schema, _, _ in RESOLVED.values())]:
        gbnf = schema_gbnf(schema)
        assert gbnf is not None
        Grammar(model, gbnf).close()  # UsageError if llama.cpp cannot parse it
    for case in (c for c in CASES if c["duo"] == "unparsable"):
        with pytest.raises(UsageError, match="the grammar does not parse"):
            Grammar(model, schema_gbnf(case["schema"]) or "")

    def takes(gbnf: str, text: str) -> bool:
        grammar = Grammar(model, gbnf)
        try:
            for token in model.vocab.tokenize(text, add_special=False):
                if not grammar.allows(token):
                    return False
                grammar.accept(token)
            return True
        finally:
            grammar.close()

    tree = schema_gbnf(RESOLVED["a tree, through the root"][0])
    assert tree is not None
    assert takes(tree, '{"kids": [{"kids": [{"kids": []}]}, {"kids": []}]}')
    assert not takes(tree, '{"kids": [{"kids": [1')


@pytest.mark.parametrize(
    "bad",
    [
        {"logit_bias": {"abc": 1}},
        {"logit_bias": {"5": 101}},
        {"logit_bias": {"99999999": 1}},
        {"logit_bias": {"5": "1"}},
        {"logprobs": True, "top_logprobs": 21},
        {"top_logprobs": 2},
        {"presence_penalty": 2.5},
        {"frequency_penalty": "high"},
        {"response_format": {"type": "xml"}},
        {"response_format": {"type": "json_schema", "json_schema": "object"}},
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "x"}}}},
        {"response_format": "json"},
        {"response_format": {"type": "json_schema", "json_schema": {"schema": HUGE}}},
        {"response_format": {"type": "json_schema", "json_schema": {"schema": BOUNDED}}},
    ],
)
def test_bad_fields_are_400_in_openais_shape(
    leads: tuple[openai.OpenAI, openai.OpenAI], bad: dict[str, Any]
) -> None:
    spec, _ = leads
    with pytest.raises(openai.BadRequestError) as e:
        spec.chat.completions.create(model="duo", messages=CHAT, max_tokens=4, extra_body=bad)
    assert e.value.body["param"] in {*bad, None}  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        spec.completions.create(model="duo", prompt="hi", max_tokens=4, logprobs=21)
    assert chat(spec, max_tokens=4, temperature=0)[0]  # the lead is still fine
