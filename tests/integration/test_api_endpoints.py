"""The API's breadth through the official openai client and llama-server's extension
endpoints, on real models, with a back attached: `n` choices (streamed and not, seeded
choices equal to the main model alone), stream options, tools refused where the template
cannot show them, tool calls (the model's own, and forced by tool_choice), /tokenize,
/detokenize, /apply-template, /props and /openapi.json."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openapi_spec_validator import validate

from tests.integration.conftest import Cluster, health

pytestmark = pytest.mark.integration

PROMPT = "Here is a list of ten fruits and their colors:\n1."
QUESTION: list[Any] = [{"role": "user", "content": "Name three colors."}]


@pytest.fixture(scope="module")
def lead(pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A lead whose only draft source is one back (fixed policy: its drafts are verified),
    with one slot: a request's choices run one after another, so the back has read the
    prompt by the second and its drafts are verified however busy the machine is (side by
    side, a short greedy answer can end before a loaded back's first draft)."""
    with Cluster(tmp_path_factory.mktemp("endpoints")) as cluster:
        _, url = cluster.lead(
            "-m", str(pair[0]), "--spec-type", "model", "--policy", "fixed", "--deterministic",
            "-np", "1", "--quiet",
        )  # fmt: skip
        cluster.back(url, "-m", str(pair[1]))
        yield url


@pytest.fixture
def client(lead: str) -> openai.OpenAI:
    assert health(lead)["drafters"] == 1
    return openai.OpenAI(base_url=f"{lead}/v1", api_key="x", timeout=120, max_retries=0)


def timings(response: Any) -> dict[str, Any]:
    return response.model_extra["timings"]  # type: ignore[no-any-return]


def test_n_chat_choices_are_the_seeded_single_choices(client: openai.OpenAI) -> None:
    settings: dict[str, Any] = {"max_tokens": 24, "temperature": 0.9, "extra_body": {"top_k": 30}}
    many = client.chat.completions.create(
        model="duo", messages=QUESTION, n=3, seed=11, user="tester", **settings
    )
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert timings(many)["draft_n"] > 0, "the back's drafts were never verified"
    singles = [
        client.chat.completions.create(model="duo", messages=QUESTION, seed=11 + i, **settings)
        for i in range(3)
    ]
    assert [c.message.content for c in many.choices] == [
        s.choices[0].message.content for s in singles
    ]
    assert len({c.message.content for c in many.choices}) > 1  # three draws, not one
    assert many.usage is not None and all(s.usage is not None for s in singles)
    assert many.usage.prompt_tokens == singles[0].usage.prompt_tokens  # type: ignore[union-attr]
    assert many.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)  # type: ignore[union-attr]

    # Streamed: chunks tagged by index rebuild the same choices; usage comes last, alone.
    texts = ["", "", ""]
    finish: dict[int, str] = {}
    chunks = list(
        client.chat.completions.create(
            model="duo",
            messages=QUESTION,
            n=3,
            seed=11,
            stream=True,
            stream_options={"include_usage": True},
            **settings,
        )
    )
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert texts == [c.message.content for c in many.choices]
    assert finish == {c.index: c.finish_reason for c in many.choices}
    assert chunks[-1].choices == [] and chunks[-1].usage == many.usage
    assert all(c.usage is None for c in chunks[:-1])


def alone(main: Path, *args: str) -> subprocess.Popen[str]:
    """`duo generate` with the main model alone (no drafter), as the reference."""
    argv = [sys.executable, "-m", "duo", "generate", "-m", str(main), "--mode", "target"]
    return subprocess.Popen(
        [*argv, "--deterministic", "--color", "never", *args],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def output(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0
    return out.removesuffix("\n")


def test_choices_equal_the_main_model_alone(client: openai.OpenAI, pair: tuple[Path, Path]) -> None:
    """Choice 1 of a request seeded 5 samples with seed 6: `duo generate` with no drafter
    and seed 6 writes the same text. Greedy choices are all the main model's greedy text."""
    sampled = alone(
        pair[0], "-p", PROMPT, "-n", "32", "--temp", "0.9", "--top-k", "30", "--seed", "6"
    )
    greedy = alone(pair[0], "--chat", "-p", QUESTION[0]["content"], "-n", "24", "--temp", "0")
    api = client.completions.create(
        model="duo",
        prompt=PROMPT,
        n=2,
        seed=5,
        max_tokens=32,
        temperature=0.9,
        extra_body={"top_k": 30},
    )
    assert timings(api)["draft_n"] > 0
    chat = client.chat.completions.create(
        model="duo", messages=QUESTION, n=2, max_tokens=24, temperature=0
    )
    assert timings(chat)["draft_n"] > 0
    assert api.choices[1].text == output(sampled)
    assert api.choices[0].text != api.choices[1].text
    assert [c.message.content for c in chat.choices] == [output(greedy)] * 2


def test_tools_are_refused_with_a_template_that_cannot_show_them(client: openai.OpenAI) -> None:
    tool: Any = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="duo", messages=QUESTION, tools=[tool], max_tokens=8)
    assert info.value.param == "tools"  # type: ignore[attr-defined]
    assert "template" in info.value.message
    # tool_choice "none": the tools are not used, the chat is served.
    reply = client.chat.completions.create(
        model="duo", messages=QUESTION, tools=[tool], tool_choice="none", max_tokens=8
    )
    assert reply.choices[0].message.content


def test_llama_server_extension_endpoints(lead: str, client: openai.OpenAI) -> None:
    def post(path: str, body: Any) -> Any:
        r = httpx.post(f"{lead}{path}", json=body, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    text = "Hello, world! <|im_end|> é"
    tokens = post("/tokenize", {"content": text})["tokens"]
    assert all(isinstance(t, int) for t in tokens)
    pieces = post("/tokenize", {"content": text, "with_pieces": True})["tokens"]
    assert [p["id"] for p in pieces] == tokens
    joined = b"".join(
        p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces
    )
    assert joined.decode() == text
    assert post("/detokenize", {"tokens": tokens}) == {"content": text}
    # parse_special: "<|im_end|>" is one special token, or plain text.
    plain = post("/tokenize", {"content": "<|im_end|>", "parse_special": False})["tokens"]
    assert len(post("/tokenize", {"content": "<|im_end|>"})["tokens"]) == 1 < len(plain)
    mixed = post("/tokenize", {"content": ["Hello", tokens[1], "!"]})["tokens"]
    assert mixed[1] == tokens[1]
    assert post("/tokenize", {})["tokens"] == []

    # /apply-template gives the prompt a chat request generates from.
    prompt = post("/apply-template", {"messages": QUESTION})["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n") and "Name three colors." in prompt
    reply = client.chat.completions.create(model="duo", messages=QUESTION, max_tokens=4)
    assert reply.usage is not None
    assert len(post("/tokenize", {"content": prompt})["tokens"]) == reply.usage.prompt_tokens

    props = httpx.get(f"{lead}/props", timeout=10).json()
    models = httpx.get(f"{lead}/v1/models", timeout=10).json()["data"][0]
    assert props["default_generation_settings"]["n_ctx"] == models["meta"]["n_ctx"]
    assert props["default_generation_settings"]["params"]["temperature"] == 0.8
    assert props["model_path"].endswith(".gguf") and "<|im_start|>" in props["chat_template"]
    assert props["chat_template_caps"]["supports_tools"] is False
    assert props["speculative"]["drafters"] == 1
    assert props["speculative"]["spec_types"] == ["model"]
    assert props["speculative"]["policy"] == "fixed"

    for path, body in [
        ("/tokenize", {"content": 5.5}),
        ("/tokenize", {"content": "x", "with_pieces": "yes"}),
        ("/detokenize", {"tokens": [-1]}),
        ("/detokenize", {"tokens": "1 2"}),
        ("/apply-template", {"messages": []}),
    ]:
        r = httpx.post(f"{lead}{path}", json=body, timeout=10)
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["error"]["param"], r.text


def test_openapi_document(lead: str) -> None:
    r = httpx.get(f"{lead}/openapi.json", timeout=10)
    assert r.status_code == 200
    schema = r.json()
    validate(schema)
    for path in ("/v1/chat/completions", "/tokenize", "/props", "/v1/drafter", "/openapi.json"):
        assert path in schema["paths"]
    r = httpx.get(f"{lead}/nowhere", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


# -- tool calls from a real model -----------------------------------------------------------

TEMPLATE = (
    Path(__file__).parents[1] / "unit" / "lead" / "tools" / "templates" / "qwen2.5-instruct.jinja"
)
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def weather_chat(question: str) -> list[Any]:
    """Three earlier turns that called the tool, then the question: SmolLM2-135M follows
    the pattern and calls the tool itself (it does not from the instructions alone)."""
    messages: list[Any] = []
    for i, (city, weather) in enumerate([("Paris", "sunny"), ("Berlin", "rainy"), ("Rome", "hot")]):
        arguments = json.dumps({"city": city})
        call = {"id": f"call_{i}", "type": "function"}
        call["function"] = {"name": "get_weather", "arguments": arguments}
        messages += [
            {"role": "user", "content": f"What is the weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": weather},
            {"role": "assistant", "content": f"It is {weather} in {city}."},
        ]
    return [*messages, {"role": "user", "content": question}]


@pytest.fixture(scope="module")
def tool_lead(pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The default main model with Qwen 2.5's chat template, which shows it the tools."""
    with Cluster(tmp_path_factory.mktemp("tools")) as cluster:
        _, url = cluster.lead(
            "-m", str(pair[0]), "--chat-template-file", str(TEMPLATE), "--spec-type", "model",
            "--policy", "fixed", "--deterministic", "--quiet",
        )  # fmt: skip
        cluster.back(url, "-m", str(pair[1]))
        yield url


def test_a_real_model_calls_a_tool(tool_lead: str) -> None:
    client = openai.OpenAI(base_url=f"{tool_lead}/v1", api_key="x", timeout=120, max_retries=0)
    messages = weather_chat("What is the weather in Oslo?")
    request: dict[str, Any] = {
        "model": "duo",
        "messages": messages,
        "tools": [WEATHER],
        "max_tokens": 40,
        "temperature": 0,
    }
    whole = client.chat.completions.create(**request)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Oslo"},
    )
    assert timings(whole)["draft_n"] > 0

    # Streamed: the same call, its arguments as they are written, finish_reason tool_calls.
    deltas, finish = [], None
    for chunk in client.chat.completions.create(**request, stream=True):
        for c in chunk.choices:
            deltas += c.delta.tool_calls or []
            assert not c.delta.content
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert len(deltas) > 1  # the arguments came in pieces
    [(index, name, arguments)] = streamed_calls(deltas)
    assert (index, name) == (0, "get_weather")
    assert json.loads(arguments) == json.loads(call.function.arguments)  # type: ignore[union-attr]

    # The call is the main model's own text: the same prompt as a plain completion.
    prompt = httpx.post(
        f"{tool_lead}/apply-template", json={"messages": messages, "tools": [WEATHER]}, timeout=30
    ).json()["prompt"]
    assert "get_weather" in prompt.split("<|im_end|>")[0]  # the tools, in the system turn
    tokens = httpx.post(f"{tool_lead}/tokenize", json={"content": prompt}, timeout=30).json()
    text = client.completions.create(
        model="duo", prompt=tokens["tokens"], max_tokens=40, temperature=0
    )
    assert text.choices[0].text.startswith('<tool_call>\n{"name": "get_weather", "arguments": ')

    # tool_choice "none": the tools are not shown, and the reply is text.
    plain = client.chat.completions.create(**request, tool_choice="none")
    assert plain.choices[0].finish_reason != "tool_calls"
    assert not plain.choices[0].message.tool_calls


ALARM: Any = {
    "type": "function",
    "function": {
        "name": "set_alarm",
        "description": "Set an alarm",
        "parameters": {
            "type": "object",
            "properties": {
                "hour": {"type": "integer"},
                "label": {"type": "string"},
                # Bounded: greedy, the 135M model would repeat "tue" until max_tokens.
                "days": {"type": "array", "items": {"enum": ["mon", "tue", "wed"]}, "maxItems": 3},
            },
            "required": ["hour", "days"],
        },
    },
}


@pytest.mark.parametrize(
    ("choice", "names"),
    [
        ("required", {"get_weather", "set_alarm"}),
        ({"type": "function", "function": {"name": "set_alarm"}}, {"set_alarm"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"}),
    ],
)
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 3}])
def test_tool_choice_forces_a_valid_call(
    tool_lead: str, choice: Any, names: set[str], sampling: dict[str, Any]
) -> None:
    """With no example turns SmolLM2-135M answers in prose; "required" and a named function
    hold it to a call (a grammar), whose arguments validate against the parameters."""
    client = openai.OpenAI(base_url=f"{tool_lead}/v1", api_key="x", timeout=120, max_retries=0)
    tools = {t["function"]["name"]: t for t in (WEATHER, ALARM)}
    request: dict[str, Any] = {
        "model": "duo",
        "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
        "tools": list(tools.values()),
        "tool_choice": choice,
        "max_tokens": 60,
        **sampling,
    }

    def check(name: str, arguments: str) -> None:
        assert name in names
        jsonschema.validate(json.loads(arguments), tools[name]["function"]["parameters"])

    whole = client.chat.completions.create(**request)
    reply = whole.choices[0]
    assert reply.finish_reason == "tool_calls", reply
    assert reply.message.content is None
    [call] = reply.message.tool_calls or []
    check(call.function.name, call.function.arguments)  # type: ignore[union-attr]

    # Streamed: one call in a tool_calls delta, no content.
    deltas, finish = [], None
    for chunk in client.chat.completions.create(**request, stream=True):
        for c in chunk.choices:
            deltas += c.delta.tool_calls or []
            assert not c.delta.content
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    [(_, name, arguments)] = streamed_calls(deltas)
    check(name, arguments)

    # A grammar of its own besides: refused, naming the field.
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**request, response_format={"type": "json_object"})
    assert info.value.param == "response_format"  # type: ignore[attr-defined]


def streamed_calls(deltas: list[Any]) -> list[tuple[int, str, str]]:
    """Calls from a stream's tool_calls deltas, as OpenAI's clients put them together: by
    index, the name from the first, the arguments joined."""
    calls: dict[int, tuple[str, str]] = {}
    for d in deltas:
        name, arguments = calls.get(d.index, ("", ""))
        calls[d.index] = (name or d.function.name or "", arguments + (d.function.arguments or ""))
    return [(index, *call) for index, call in sorted(calls.items())]


def test_parallel_tool_calls_let_a_forced_reply_hold_several(tool_lead: str) -> None:
    """With parallel_tool_calls the grammar takes one or more tagged calls: asked about
    two cities, the model calls the tool for each."""
    client = openai.OpenAI(base_url=f"{tool_lead}/v1", api_key="x", timeout=120, max_retries=0)
    request: dict[str, Any] = {
        "model": "duo",
        "messages": [{"role": "user", "content": "Weather in Oslo and in Rome, please."}],
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_tokens": 120,
        "temperature": 0,
    }
    one = client.chat.completions.create(**request).choices[0]
    several = client.chat.completions.create(**request, parallel_tool_calls=True).choices[0]
    assert len(one.message.tool_calls or []) == 1  # without it, one call (llama-server's default)
    assert several.finish_reason == "tool_calls" and several.message.content is None
    calls = several.message.tool_calls or []
    cities = [json.loads(c.function.arguments)["city"] for c in calls]  # type: ignore[union-attr]
    assert len(calls) >= 2 and {"Oslo", "Rome"} <= set(cities), cities
    assert len({c.id for c in calls}) == len(calls)


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"hour": {"type": "integer", "maximum": 23}}},
        {"$ref": "#"},  # a rule that is only itself: llama.cpp's parser refuses it
    ],
)
def test_forced_calls_refuse_parameters_the_grammar_cannot_hold(
    tool_lead: str, parameters: dict[str, Any]
) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    body = {"messages": QUESTION, "tools": [tool], "tool_choice": "required", "max_tokens": 8}
    r = httpx.post(f"{tool_lead}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "tools"
    assert httpx.get(f"{tool_lead}/health", timeout=10).status_code == 200
