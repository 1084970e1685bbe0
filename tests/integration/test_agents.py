"""Coding agents on a real `duo lead` (Qwen2.5-Coder 0.5B, whose chat template shows tools):
the `anthropic` SDK on /v1/messages and the `openai` SDK's Responses API on /v1/responses,
each streamed and whole, with tools, a tool's result and a JSON schema; Codex CLI's own
request replayed (tests/integration/fixtures); bad input answered with the field named; and
both routes' text with drafters equal to the main model's alone (greedy)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from duo.llama.models import get_pair, prepare
from duo.sse import iter_events, json_events

from .conftest import Cluster

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent / "fixtures"
TIMEOUT = 120.0
KEY = "agent-key"
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city"}},
        "required": ["city"],
    },
}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
# The current anthropic SDK sends no sampling fields; the API still reads them.
GREEDY = {"temperature": 0}
PRIMES = {"type": "object", "properties": {"primes": {"type": "array", "items": {
    "type": "integer"}, "minItems": 3, "maxItems": 3}}, "required": ["primes"],
    "additionalProperties": False}  # fmt: skip


@pytest.fixture(scope="module")
def coder() -> tuple[Path, Path]:
    """(main F16, draft Q3_K_M) of the qwen-coder pair."""
    return prepare(get_pair("qwen-coder"))


@pytest.fixture(scope="module")
def agent_lead(coder: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A lead with an API key, on the pair's small model (as an agent's lead, quicker)."""
    with Cluster(tmp_path_factory.mktemp("agents")) as c:
        _, url = c.lead("-m", str(coder[1]), "-c", "4096", "--api-key", KEY, "--quiet")
        yield url


@pytest.fixture(scope="module")
def claude(agent_lead: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=agent_lead, api_key=KEY, timeout=TIMEOUT, max_retries=0)


@pytest.fixture(scope="module")
def codex(agent_lead: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{agent_lead}/v1", api_key=KEY, timeout=TIMEOUT, max_retries=0)


# -- Anthropic's Messages API ---------------------------------------------------------------


def test_messages_create_and_stream_give_the_same_reply(claude: anthropic.Anthropic) -> None:
    ask = {"model": "duo", "max_tokens": 24, "extra_body": GREEDY,
           "system": [{"type": "text", "text": "You are terse."}],
           "messages": [{"role": "user", "content": "Name three prime numbers."}]}  # fmt: skip
    whole = claude.messages.create(**ask)
    assert whole.type == "message" and whole.role == "assistant" and whole.id.startswith("msg_")
    assert whole.stop_reason in ("end_turn", "max_tokens")
    assert whole.usage.input_tokens > 10 and 0 < whole.usage.output_tokens <= 24
    text = whole.content[0].text
    assert text.strip()
    with claude.messages.stream(**ask) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == text
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    assert kinds.index("message_delta") == len(kinds) - 2
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_a_stop_sequence_is_reported(claude: anthropic.Anthropic) -> None:
    count = [{"role": "user", "content": "Write the numbers from 1 to 10, separated by commas."}]
    m = claude.messages.create(
        model="duo", max_tokens=64, extra_body=GREEDY, stop_sequences=["5"], messages=count
    )
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "5"
    assert m.content[0].text.startswith("1, 2") and "5" not in m.content[0].text


def test_count_tokens_is_the_prompt_the_reply_reads(claude: anthropic.Anthropic) -> None:
    ask: dict[str, Any] = {"model": "duo", "messages": ASK, "tools": [WEATHER]}
    counted = claude.messages.count_tokens(**ask)
    read = claude.messages.create(**ask, max_tokens=1, extra_body=GREEDY)
    assert counted.input_tokens > 50  # the tool is shown to the model
    assert counted.input_tokens == read.usage.input_tokens + read.usage.cache_read_input_tokens


def test_a_tool_use_and_its_result_round_trip(claude: anthropic.Anthropic) -> None:
    ask: dict[str, Any] = {"model": "duo", "max_tokens": 64, "extra_body": GREEDY,
                           "tools": [WEATHER], "messages": ASK,
                           "tool_choice": {"type": "tool", "name": "get_weather"}}  # fmt: skip
    m = claude.messages.create(**ask)
    assert m.stop_reason == "tool_use"
    call = next(b for b in m.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    assert isinstance(call.input, dict) and "city" in call.input
    with claude.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    streamed_call = next(b for b in streamed.content if b.type == "tool_use")
    assert streamed_call.input == call.input and streamed.stop_reason == "tool_use"
    answer = claude.messages.create(
        model="duo", max_tokens=32, extra_body=GREEDY, tools=[WEATHER],
        messages=[*ASK, {"role": "assistant", "content": m.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": "Sunny, 24 C"}]}],
    )  # fmt: skip
    # The model read the result and answered (this small model may call the tool again).
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert any((b.type == "text" and b.text.strip()) or b.type == "tool_use"
               for b in answer.content)  # fmt: skip


def test_an_output_config_format_holds_the_reply(claude: anthropic.Anthropic) -> None:
    m = claude.messages.create(
        model="duo", max_tokens=64, extra_body=GREEDY,
        messages=[{"role": "user", "content": "Give three prime numbers."}],
        output_config={"format": {"type": "json_schema", "schema": PRIMES}},
    )  # fmt: skip
    assert len(json.loads(m.content[0].text)["primes"]) == 3


def test_the_key_in_x_api_key_is_accepted_and_a_wrong_one_refused(agent_lead: str) -> None:
    body = {"model": "duo", "max_tokens": 1, "messages": ASK}
    headers = {"anthropic-version": "2023-06-01"}
    ok = httpx.post(f"{agent_lead}/v1/messages", json=body, timeout=TIMEOUT,
                    headers={**headers, "x-api-key": KEY})  # fmt: skip
    assert ok.status_code == 200, ok.text
    wrong = httpx.post(f"{agent_lead}/v1/messages", json=body, timeout=TIMEOUT,
                       headers={**headers, "x-api-key": "nope"})  # fmt: skip
    assert wrong.status_code == 401
    assert wrong.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid or missing API key"},
    }
    wrong_client = anthropic.Anthropic(base_url=agent_lead, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong_client.messages.create(model="duo", max_tokens=1, messages=ASK)
    # The other routes take the X-Api-Key too.
    models = httpx.get(f"{agent_lead}/v1/models", headers={"x-api-key": KEY}, timeout=TIMEOUT)
    assert models.status_code == 200


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "tool_result",
                                                      "tool_use_id": "toolu_x"}]}]},
         "no earlier tool_use block has the id 'toolu_x'"),
        ({"messages": [{"role": "user", "content": [{"type": "nope"}]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": ASK, "max_tokens": "many"}, "max_tokens"),
        ({"messages": ASK, "tool_choice": {"type": "any"}}, "tool_choice"),
    ],
)  # fmt: skip
def test_bad_messages_get_a_400_in_anthropic_s_shape(
    agent_lead: str, body: dict[str, Any], words: str
) -> None:
    r = httpx.post(f"{agent_lead}/v1/messages", json={"model": "duo", **body},
                   headers={"x-api-key": KEY}, timeout=TIMEOUT)  # fmt: skip
    assert r.status_code == 400
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"]


# -- OpenAI's Responses API -----------------------------------------------------------------


def test_responses_create_and_stream_give_the_same_text(codex: openai.OpenAI) -> None:
    ask: dict[str, Any] = {"model": "duo", "instructions": "You are terse.",
                           "input": "Name three prime numbers.", "max_output_tokens": 24,
                           "temperature": 0}  # fmt: skip
    whole = codex.responses.create(**ask)
    assert whole.id.startswith("resp_") and whole.output[0].id.startswith("msg_")
    assert whole.status in ("completed", "incomplete") and whole.output_text.strip()
    assert whole.usage is not None and 0 < whole.usage.output_tokens <= 24
    events = list(codex.responses.create(**ask, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == f"response.{whole.status}"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text
    if whole.status == "completed":
        with codex.responses.stream(**ask) as stream:
            assert stream.get_final_response().output_text == whole.output_text


def test_function_calls_and_their_outputs_round_trip(codex: openai.OpenAI) -> None:
    tool = {"type": "function", "name": "get_weather", "description": WEATHER["description"],
            "parameters": WEATHER["input_schema"], "strict": True}  # fmt: skip
    ask: dict[str, Any] = {"model": "duo", "input": ASK[0]["content"], "tools": [tool],
                           "tool_choice": "required", "temperature": 0,
                           "max_output_tokens": 64}  # fmt: skip
    r = codex.responses.create(**ask)
    call = next(item for item in r.output if item.type == "function_call")
    assert call.id is not None and call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert call.name == "get_weather" and "city" in json.loads(call.arguments)
    with codex.responses.stream(**ask) as stream:
        final = stream.get_final_response()
    streamed = next(item for item in final.output if item.type == "function_call")
    assert streamed.arguments == call.arguments
    answer = codex.responses.create(
        model="duo", tools=[tool], temperature=0, max_output_tokens=32,
        input=[{"role": "user", "content": ASK[0]["content"]},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id,
                "output": "Sunny, 24 C"}],
    )  # fmt: skip
    assert answer.output_text.strip() or any(i.type == "function_call" for i in answer.output)


def test_a_json_schema_text_format_holds_the_reply(codex: openai.OpenAI) -> None:
    r = codex.responses.create(
        model="duo", input="Give three prime numbers.", temperature=0, max_output_tokens=64,
        text={"format": {"type": "json_schema", "name": "primes", "schema": PRIMES,
                         "strict": True}},
    )  # fmt: skip
    assert len(json.loads(r.output_text)["primes"]) == 3


def test_codex_cli_s_request_is_answered_as_it_reads_it(agent_lead: str) -> None:
    body = json.loads((FIXTURES / "codex_responses_request.json").read_text())
    body["max_output_tokens"] = 48  # (Codex sends none; the reply is the model's first turn)
    events = []
    with httpx.stream("POST", f"{agent_lead}/v1/responses", json=body, timeout=TIMEOUT,
                      headers={"Authorization": f"Bearer {KEY}"}) as r:  # fmt: skip
        assert r.status_code == 200, r.read()
        for event in iter_events(r.iter_lines()):
            assert event.json()["type"] == event.name
            events.append(event.json())
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed",
                                                            "response.incomplete")  # fmt: skip
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done and done == events[-1]["response"]["output"]
    assert events[-1]["response"]["usage"]["input_tokens"] > 500


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "x"}]},
         "input"),
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": [{"type": "message", "role": "user", "content": 3}]}, "input"),
        ({"input": "hi", "tools": [{"type": "function"}]}, "tools"),
        ({"input": "hi", "max_output_tokens": -1}, "max_output_tokens"),
    ],
)  # fmt: skip
def test_bad_responses_requests_get_a_400_naming_the_field(
    codex: openai.OpenAI, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        codex.responses.create(model="duo", **body)
    assert e.value.param == field


# -- lossless -------------------------------------------------------------------------------


def test_both_routes_give_the_main_model_s_text_with_drafters(
    coder: tuple[Path, Path], cluster: Cluster
) -> None:
    main, draft = (str(p) for p in coder)
    source = "".join((Path(json.__file__).parent / "scanner.py").read_text().splitlines(True)[:40])
    ask = f"Copy this Python code exactly, in one code block:\n\n```python\n{source}```"
    messages = {"model": "duo", "max_tokens": 48, "temperature": 0,
                "messages": [{"role": "user", "content": ask}]}  # fmt: skip
    responses = {"model": "duo", "max_output_tokens": 48, "temperature": 0, "input": ask}
    plain, drafting = cluster.drafted(main, draft, 4096)

    def texts(url: str) -> tuple[str, str]:
        m = httpx.post(f"{url}/v1/messages", json=messages, timeout=TIMEOUT).json()
        r = httpx.post(f"{url}/v1/responses", json=responses, timeout=TIMEOUT).json()
        text = "".join(b["text"] for b in m["content"] if b["type"] == "text")
        output = "".join(c["text"] for i in r["output"] if i["type"] == "message"
                         for c in i["content"])  # fmt: skip
        return text, output

    alone = texts(plain)
    assert len(alone[0]) > 40 and alone[0] == alone[1]
    for url in drafting:
        assert texts(url) == alone, url
    # The drafters drafted: the stream's message_delta carries duo's timings.
    free = drafting[1]
    with httpx.stream("POST", f"{free}/v1/messages", json={**messages, "stream": True},
                      timeout=TIMEOUT) as r:  # fmt: skip
        events = list(json_events(r.iter_lines()))
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["timings"]["draft_n_accepted"] > 0
