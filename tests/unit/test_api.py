"""The lead's API at its seam: a scripted lead behind the real Starlette app (httpx's ASGI
transport): `n` choices, stream options, tool calls in and out, error shapes, OpenAPI."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from starlette.routing import Route, WebSocketRoute

from duo.channel.backs import Backs
from duo.core.stats import Stats
from duo.lead.engine.jobs import Delta, Done, Job
from duo.lead.engine.lead import ModelInfo
from duo.lead.openai.api import Api
from duo.lead.web.feed import Feed
from duo.lead.web.page import Web
from duo.supervisor.supervise import Supervisor, Worker
from tests.unit.test_tools import QWEN25, SMOLLM2, WEATHER, renderer

N_VOCAB = 1000


class ScriptedLead:
    """Generates `script(job)` in a few deltas; records the jobs it ran."""

    def __init__(self, template: str = SMOLLM2, script: Callable[[Job], str] | None = None):
        self.info = ModelInfo("scripted", 256, N_VOCAB)
        self.render = renderer(template)
        self.script = script or (lambda job: f"seed {job.sampling.seed} says hello.")
        self.jobs: list[Job] = []

    def longest_token_bytes(self) -> int:
        return 8

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True):  # type: ignore[no-untyped-def]
        return [1 + ord(c) % (N_VOCAB - 1) for c in text]

    def check_fits(self, prompt: list[int]) -> None:
        pass

    def render_chat(self, messages: list[dict[str, Any]], tools: Any = None) -> str:
        return self.render(messages, tools)  # type: ignore[no-any-return]

    def check_grammar(self, gbnf: str) -> None:
        pass

    async def events(self, job: Job) -> AsyncIterator[Any]:
        self.jobs.append(job)
        text = self.script(job)
        for k in range(0, len(text), 5):
            await asyncio.sleep(0)
            yield Delta(text[k : k + 5])
        yield Done("stop", Stats(prompt_tokens=len(job.prompt), tokens=len(text) // 5 + 1))


def client(lead: ScriptedLead, *, key: str | None = None, max_body: int = 1 << 20):  # type: ignore[no-untyped-def]
    def authorize(header: str | None) -> bool:
        return key is None or header == f"Bearer {key}"

    api = Api(lead, None, None, authorize, max_body)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=api.app())
    return httpx.AsyncClient(transport=transport, base_url="http://lead", timeout=10)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def events(text: str) -> list[Any]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def assert_error(r: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["message"]
    if param is not None:
        assert error["param"] == param, error
    return error  # type: ignore[no-any-return]


# -- n choices ----------------------------------------------------------------------------


def test_n_choices_each_with_its_seed_and_usage_counting_all() -> None:
    lead = ScriptedLead()

    async def go() -> dict[str, Any]:
        async with client(lead) as c:
            r = await c.post("/v1/completions", json={"prompt": "hi", "n": 3, "seed": 7})
            assert r.status_code == 200, r.text
            return r.json()  # type: ignore[no-any-return]

    body = run(go())
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["text"] for c in body["choices"]] == [f"seed {s} says hello." for s in (7, 8, 9)]
    assert [job.sampling.seed for job in lead.jobs] == [7, 8, 9]
    completion = 3 * (len("seed 7 says hello.") // 5 + 1)  # as ScriptedLead counts them
    assert body["usage"] == {
        "prompt_tokens": 2,  # once, not per choice
        "completion_tokens": completion,
        "total_tokens": 2 + completion,
    }


def test_choice_seeds_wrap_and_unseeded_choices_are_random() -> None:
    lead = ScriptedLead()

    async def go() -> None:
        async with client(lead) as c:
            body = {"prompt": "hi", "n": 2, "seed": 2**64 - 1}
            assert (await c.post("/v1/completions", json=body)).status_code == 200
            body = {"prompt": "hi", "n": 2, "seed": -1}
            assert (await c.post("/v1/completions", json=body)).status_code == 200

    run(go())
    assert [job.sampling.seed for job in lead.jobs] == [2**64 - 1, 0, None, None]


def test_streamed_choices_by_index_with_usage_chunk() -> None:
    lead = ScriptedLead()
    messages = [{"role": "user", "content": "hi"}]

    async def go(options: dict[str, Any]) -> list[Any]:
        async with client(lead) as c:
            body = {"messages": messages, "n": 2, "seed": 1, "stream": True, **options}
            r = await c.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            return events(r.text)

    for include_usage in (True, False):
        options = {"stream_options": {"include_usage": include_usage}} if include_usage else {}
        got = run(go(options))
        assert got[-1] == "[DONE]"
        chunks = got[:-1]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        texts = {0: "", 1: ""}
        finish = {}
        for chunk in chunks:
            for choice in chunk["choices"]:
                texts[choice["index"]] += choice["delta"].get("content", "")
                if choice["finish_reason"]:
                    finish[choice["index"]] = choice["finish_reason"]
        assert texts == {0: "seed 1 says hello.", 1: "seed 2 says hello."}
        assert finish == {0: "stop", 1: "stop"}
        with_usage = [c for c in chunks if "usage" in c]
        assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
        assert with_usage[0]["usage"]["completion_tokens"] == 2 * (len(texts[0]) // 5 + 1)
        # include_usage: a chunk of its own with no choices, as OpenAI sends it.
        assert (chunks[-1]["choices"] == []) == include_usage


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 0}, "n"),
        ({"n": 129}, "n"),
        ({"n": 1.5}, "n"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options"),
        ({"stream": True, "stream_options": []}, "stream_options"),
        ({"user": 5}, "user"),
    ],
)
def test_bad_output_fields(body: dict[str, Any], param: str) -> None:
    async def go() -> httpx.Response:
        async with client(ScriptedLead()) as c:
            return await c.post("/v1/completions", json={"prompt": "hi", **body})

    assert_error(run(go()), 400, param)


def test_user_is_accepted() -> None:
    async def go() -> httpx.Response:
        async with client(ScriptedLead()) as c:
            return await c.post("/v1/completions", json={"prompt": "hi", "user": "user-1234"})

    assert run(go()).status_code == 200


# -- tools --------------------------------------------------------------------------------

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_tools_are_refused_where_the_template_cannot_show_them() -> None:
    lead = ScriptedLead(SMOLLM2)
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER]}

    async def go() -> list[httpx.Response]:
        async with client(lead) as c:
            return [
                await c.post("/v1/chat/completions", json=body),
                await c.post("/apply-template", json=body),
                await c.post("/v1/chat/completions", json={**body, "tool_choice": "none"}),
            ]

    refused, template, none = run(go())
    assert "tools" in assert_error(refused, 400, "tools")["message"]
    assert_error(template, 400, "tools")
    assert none.status_code == 200  # tool_choice "none": a plain chat
    assert len(lead.jobs) == 1


def test_tool_calls_whole_and_streamed() -> None:
    lead = ScriptedLead(QWEN25, script=lambda job: "Checking.\n" + CALL)
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}

    async def go() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with client(lead) as c:
            whole = await c.post("/v1/chat/completions", json=body)
            streamed = await c.post("/v1/chat/completions", json={**body, "stream": True})
            prompt = await c.post("/apply-template", json=body)
            return whole, streamed, prompt

    whole, streamed, prompt = run(go())
    assert whole.status_code == 200, whole.text
    choice = whole.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Checking."
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}

    chunks = events(streamed.text)[:-1]
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert content == "Checking."
    assert [(d["index"], d["function"]) for d in deltas] == [(0, call["function"])]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    # The tools reached the template; /apply-template shows the same prompt.
    text = prompt.json()["prompt"]
    assert '"name": "get_weather"' in text and "<tools>" in text


def test_required_and_named_tool_choice_set_the_call_grammar() -> None:
    lead = ScriptedLead(QWEN25, script=lambda job: CALL)
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
    named = {"type": "function", "function": {"name": "get_weather"}}
    strict = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"n": {"minimum": 1}}},
        },
    }

    async def go() -> list[httpx.Response]:
        async with client(lead) as c:
            return (
                [
                    await c.post("/v1/chat/completions", json={**body, "tool_choice": choice})
                    for choice in ("auto", "required", named)
                ]
                + [
                    await c.post(
                        "/v1/chat/completions",
                        json={**body, "tool_choice": "required", "response_format": fmt},
                    )
                    for fmt in ({"type": "text"}, {"type": "json_object"})
                ]
                + [
                    await c.post(
                        "/v1/chat/completions",
                        json={**body, "tools": [strict], "tool_choice": "required"},
                    )
                ]
            )

    auto, required, by_name, text, json_object, unenforceable = run(go())
    for r in (auto, required, by_name, text):
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert_error(json_object, 400, "response_format")
    assert "minimum" in assert_error(unenforceable, 400, "tools")["message"]
    grammars = [job.sampling.grammar for job in lead.jobs]
    assert grammars[0] is None  # auto: the model may answer in text
    for gbnf in grammars[1:]:
        assert gbnf is not None
        assert gbnf.startswith('root ::= "<tool_call>" "\\n"? ( get-weather-call )')


def test_earlier_tool_calls_need_a_template_that_shows_them() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]

    async def go(template: str) -> httpx.Response:
        async with client(ScriptedLead(template)) as c:
            return await c.post("/apply-template", json={"messages": messages})

    assert_error(run(go(SMOLLM2)), 400, "messages")
    shown = run(go(QWEN25))
    assert shown.status_code == 200 and '"name": "f", "arguments": {}' in shown.json()["prompt"]


# -- errors, and the OpenAPI document -----------------------------------------------------


def test_every_error_has_openai_shape_and_status() -> None:
    async def go() -> dict[str, httpx.Response]:
        async with client(ScriptedLead(), key="k", max_body=1000) as c:
            auth = {"Authorization": "Bearer k"}
            return {
                "401": await c.post("/tokenize", json={"content": "x"}),
                "401-props": await c.get("/props"),
                "401-openapi": await c.get("/openapi.json"),
                "404": await c.get("/v2/nowhere", headers=auth),
                "405": await c.get("/v1/completions", headers=auth),
                "413": await c.post("/detokenize", content=b"[" * 2000, headers=auth),
                "400": await c.post("/detokenize", json={"tokens": [N_VOCAB]}, headers=auth),
                "400-json": await c.post("/tokenize", content=b"{", headers=auth),
            }

    r = run(go())
    for name in ("401", "401-props", "401-openapi"):
        assert assert_error(r[name], 401)["type"] == "authentication_error"
    assert assert_error(r["404"], 404)["type"] == "not_found_error"
    assert assert_error(r["405"], 405)["type"] == "invalid_request_error"
    assert "POST" in r["405"].headers["allow"]
    assert assert_error(r["413"], 413)["code"] == "request_too_large"
    assert_error(r["400"], 400, "tokens")
    assert_error(r["400-json"], 400)


def test_a_lead_whose_worker_is_down_answers_503_in_openai_shape() -> None:
    """`duo lead --rpc`: while the worker that owns the model (re)starts."""
    supervisor = Supervisor(Worker(["never-started"], 1))

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=supervisor.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://lead") as c:
            return await c.post("/v1/chat/completions", json={"messages": []})

    r = run(go())
    assert assert_error(r, 503)["type"] == "server_error"
    assert r.headers["retry-after"] == "2"


# -- the OpenAPI document -------------------------------------------------------------------


def app_with_the_page(lead: ScriptedLead) -> Any:
    """The app as duo lead serves it: the API and the web page's routes."""
    feed = Feed(Backs(), dict, dict, int)
    api = Api(lead, None, None, lambda h: True, 1 << 20)  # type: ignore[arg-type]
    return api.app(Web(feed, lambda h: True).routes())


def get_document(lead: ScriptedLead) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app_with_the_page(lead))
        async with httpx.AsyncClient(transport=transport, base_url="http://lead") as c:
            r = await c.get("/openapi.json")
            assert r.status_code == 200, r.text
            return r.json()  # type: ignore[no-any-return]

    return run(go())  # type: ignore[no-any-return]


def test_openapi_document_is_valid_and_covers_every_route() -> None:
    schema = get_document(ScriptedLead())
    validate(schema)  # raises on any departure from the OpenAPI 3.1 schema
    served: set[tuple[str, str]] = set()
    for route in app_with_the_page(ScriptedLead()).routes:
        if isinstance(route, WebSocketRoute):
            served.add((route.path, "get"))
        else:
            assert isinstance(route, Route)
            methods = route.methods or {"GET"}
            served |= {(route.path, m.lower()) for m in methods if m != "HEAD"}
    described = {(path, method) for path, ops in schema["paths"].items() for method in ops}
    assert served == described
    assert {"/", "/ui/{name}", "/v1/duo/events", "/health", "/metrics"} <= set(schema["paths"])
