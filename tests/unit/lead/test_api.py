"""The lead's API at its seam: a scripted lead behind the real Starlette app (httpx's ASGI
transport): `n` choices, stream options, tool calls in and out, llama-server's extension
endpoints, error shapes, and the OpenAPI document against what the lead does."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from concurrent.futures import Future
from dataclasses import fields
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from starlette.routing import Route, WebSocketRoute

from duo.channel.backs import Backs
from duo.core.prompt import to_the_end
from duo.core.stats import Stats
from duo.lead.api import Api, health_body, slot_state
from duo.lead.engine.events import Delta, Done, Job
from duo.lead.engine.lead import ModelInfo, Props, Slot, Status
from duo.lead.protocol.llama import Health, SlotState
from duo.lead.verifier.service import IDLE_SECONDS
from duo.lead.web.feed import Feed
from duo.lead.web.page import Web
from duo.session.config import SpecConfig
from duo.session.share import Sharing
from duo.sse import DONE, iter_events
from duo.supervisor.supervise import Served, Supervisor, Worker
from tests.unit.fakes import FakeModel, table_model
from tests.unit.lead.tools.test_calls import QWEN25, SMOLLM2, WEATHER, renderer

N_VOCAB = 1000
N_CTX = 256
# The scripted vocabulary: token 1 + c is the character c; these stand for more.
SPECIAL = {0: b"<|im_end|>", N_VOCAB - 2: b"\xe2\x82", N_VOCAB - 1: b"\xac"}


class ScriptedLead:
    """Generates `script(job)` in a few deltas; records the jobs it ran."""

    def __init__(
        self,
        template: str = SMOLLM2,
        script: Callable[[Job], str] | None = None,
        n_ctx: int = N_CTX,
    ):
        self.info = ModelInfo("scripted", n_ctx, N_VOCAB)
        self.template = template
        self.render = renderer(template)
        self.script = script or (lambda job: f"seed {job.sampling.seed} says hello.")
        self.jobs: list[Job] = []
        self.model = FakeModel(table_model(1))

    def longest_token_bytes(self) -> int:
        return 8

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True):  # type: ignore[no-untyped-def]
        return [1 + ord(c) % (N_VOCAB - 1) for c in text]

    def piece(self, token: int) -> bytes:
        return SPECIAL.get(token) or chr(token - 1).encode()

    def special_piece(self, token: int) -> bytes:
        return self.piece(token)

    def props(self) -> Props:
        spec = SpecConfig(mode="sync", draft_max=6, spec_types=frozenset({"ngram", "model"}))
        sharing = Sharing("split", 3, 1, {"alone": 20.0, "split": 30.0}, 2)
        return Props("/m/scripted.gguf", self.template, "<s>", "</s>", 2, spec, True, 3, sharing)

    def check_fits(self, prompt: list[int]) -> None:
        pass

    def render_chat(self, messages: list[dict[str, Any]], tools: Any = None) -> str:
        return self.render(messages, tools)  # type: ignore[no-any-return]

    def check_grammar(self, gbnf: str) -> None:
        pass

    def call(self, fn: Callable[[Any], Any], tokens: list[int]) -> Future[Any]:
        """The verifier's passes, on a scripted main model of 16 tokens (work done a step at
        a time, as the engine takes it between rounds, done here at once)."""
        future: Future[Any] = Future()
        result = fn(self.model)
        future.set_result(to_the_end(result) if isinstance(result, Generator) else result)
        return future

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
    out: list[Any] = [
        e.data if e.data == DONE else e.json() for e in iter_events(text.splitlines())
    ]
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
    # The call's first delta names it; its arguments follow as the model wrote them.
    assert deltas[0]["id"].startswith("call_") and deltas[0]["function"]["name"] == "get_weather"
    assert {d["index"] for d in deltas} == {0}
    written = "".join(d["function"]["arguments"] for d in deltas)
    assert json.loads(written) == json.loads(call["function"]["arguments"])
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
    supervisor = Supervisor(Worker(["never-started"], 1), Served("big", slots=2))

    async def go() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=supervisor.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://lead") as c:
            chat = await c.post("/v1/chat/completions", json={"messages": []})
            return chat, await c.get("/health")

    r, health = run(go())
    assert assert_error(r, 503)["type"] == "server_error"
    assert r.headers["retry-after"] == "2"
    # /health: the lead's documented shape, unavailable, and the worker's state besides
    body = health.json()
    assert health.status_code == 503 and Health.__annotations__.keys() <= body.keys()
    assert (body["status"], body["model"], body["slots"], body["busy"]) == (
        "unavailable",
        "big",
        2,
        False,
    )
    assert body["worker"] == "starting"


# -- llama-server's extension endpoints -----------------------------------------------------


def test_tokenize_and_detokenize() -> None:
    async def go() -> list[httpx.Response]:
        async with client(ScriptedLead()) as c:
            return [
                await c.post("/tokenize", json={"content": "hi"}),
                await c.post("/tokenize", json={"content": ["h", 0, "i"], "with_pieces": True}),
                await c.post("/tokenize", json={}),
                await c.post("/detokenize", json={"tokens": [105, 0, N_VOCAB - 2, N_VOCAB - 1]}),
                await c.post("/tokenize", json={"content": [N_VOCAB - 2], "with_pieces": None}),
                await c.post("/tokenize", json={"content": [N_VOCAB - 2], "with_pieces": True}),
            ]

    plain, pieces, empty, text, null, partial = [r.json() for r in run(go())]
    h, i = 1 + ord("h"), 1 + ord("i")
    assert plain == {"tokens": [h, i]}
    assert pieces == {
        "tokens": [
            {"id": h, "piece": "h"},
            {"id": 0, "piece": "<|im_end|>"},
            {"id": i, "piece": "i"},
        ]
    }
    assert empty == {"tokens": []}
    assert text == {"content": "h<|im_end|>€"}
    assert null == {"tokens": [N_VOCAB - 2]}  # null: the default (no pieces)
    assert partial == {"tokens": [{"id": N_VOCAB - 2, "piece": [0xE2, 0x82]}]}  # not UTF-8 alone


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/tokenize", {"content": 5.5}, "content"),
        ("/tokenize", {"content": ["x", N_VOCAB]}, "content"),
        ("/tokenize", {"content": [-1]}, "content"),
        ("/tokenize", {"content": "x", "with_pieces": "yes"}, "with_pieces"),
        ("/tokenize", {"content": "\ud800"}, "content"),
        ("/detokenize", {"tokens": [N_VOCAB]}, "tokens"),
        ("/detokenize", {"tokens": [-1]}, "tokens"),
        ("/detokenize", {"tokens": "1 2"}, "tokens"),
        ("/detokenize", {"tokens": None}, "tokens"),
        ("/apply-template", {"messages": []}, "messages"),
    ],
)
def test_bad_extension_fields_are_400_naming_the_field(path: str, body: Any, param: str) -> None:
    async def go() -> httpx.Response:
        async with client(ScriptedLead()) as c:
            return await c.post(path, content=json.dumps(body).encode())  # "\ud800" escaped

    assert_error(run(go()), 400, param)


def test_props() -> None:
    async def go() -> dict[str, Any]:
        async with client(ScriptedLead(QWEN25)) as c:
            return (await c.get("/props")).json()  # type: ignore[no-any-return]

    props = run(go())
    assert props["default_generation_settings"]["n_ctx"] == N_CTX
    params = props["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_p"], params["seed"]) == (0.8, 0.95, -1)
    assert params["speculative.n_max"] == 6
    assert props["total_slots"] == 2 and props["n_vocab"] == N_VOCAB
    assert props["model_alias"] == "scripted" and props["model_path"] == "/m/scripted.gguf"
    assert props["chat_template"] == QWEN25
    assert props["chat_template_caps"]["supports_tools"] is True
    assert (props["bos_token"], props["eos_token"]) == ("<s>", "</s>")
    assert props["speculative"] == {
        "mode": "sync",
        "spec_types": ["model", "ngram"],
        "draft_max": 6,
        "max_ahead": 12,
        "policy": "adaptive",
        "deterministic": False,
        "ngram_max": 5,
        "lookup_max": 48,
        "local_drafter": True,
        "drafters": 3,
    }
    assert props["placement"] == {
        "way": "split",
        "threads": 3,
        "threads_draft": 1,
        "expected_tokens_per_second": {"alone": 20.0, "split": 30.0},
        "switches": 2,
    }


# -- the OpenAPI document -------------------------------------------------------------------


def app_with_the_page(lead: ScriptedLead) -> Any:
    """The app as duo lead serves it: the API and the web page's routes."""
    feed = Feed(Backs(), dict, dict, int)
    api = Api(lead, None, None, lambda h: True, 1 << 20)  # type: ignore[arg-type]
    return api.app(Web(feed).operations())


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


def test_each_operation_asks_for_the_key_the_document_says() -> None:
    """The route table makes the routes and the document both: an operation the document
    marks public (security []) answers without a key, every other one is a 401 without."""
    lead = ScriptedLead()
    schema = get_document(lead)
    feed = Feed(Backs(), dict, dict, int)
    api = Api(lead, None, None, lambda h: h == "Bearer k", 1 << 20)  # type: ignore[arg-type]
    table = [*api.operations(), *Web(feed).operations()]
    assert len({(op.path, op.method) for op in table}) == len(table)  # each once
    app = api.app(Web(feed).operations())

    async def go() -> dict[tuple[str, str], int]:
        transport = httpx.ASGITransport(app=app)
        statuses = {}
        async with httpx.AsyncClient(transport=transport, base_url="http://lead") as c:
            for path, ops in schema["paths"].items():
                for method, op in ops.items():
                    if "101" in op["responses"]:  # the drafter channel: a WebSocket
                        continue
                    url = path.replace("{name}", "app.js")
                    r = await c.request(method, url, json={} if method == "post" else None)
                    statuses[path, method] = r.status_code
        return statuses

    statuses = run(go())
    public = {
        (path, method)
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
        if op.get("security") == []
    }
    assert public == {("/health", "get"), ("/", "get"), ("/ui/{name}", "get")}
    for where, status in statuses.items():
        assert (status != 401) == (where in public), (where, status)


BODIES = {  # a valid request to each POST route, and the schema its body is decoded as
    "/v1/completions": ({"prompt": "hi"}, "CompletionRequest"),
    "/v1/chat/completions": ({"messages": [{"role": "user", "content": "hi"}]}, "ChatRequest"),
    "/apply-template": ({"messages": [{"role": "user", "content": "hi"}]}, "ChatRequest"),
    "/tokenize": ({"content": "hi"}, "TokenizeRequest"),
    "/detokenize": ({"tokens": [105]}, "DetokenizeRequest"),
}
NEEDS = {"top_logprobs": {"logprobs": True}}  # a field valid only with another


def items(field: str, n: int) -> list[Any]:
    """n valid entries of an array field."""
    if field == "messages":
        return [{"role": "user", "content": "hi"}] * n
    if field == "tools":
        return [{"type": "function", "function": {"name": f"f{i}"}} for i in range(n)]
    return ["x"] * n


def edges(field: str, schema: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """(just inside, just outside) each bound the schema states."""
    for branch in schema.get("anyOf", [schema]):
        kind = branch.get("type")
        if kind in ("integer", "number"):

            def step(x: float, by: int, kind: str = kind) -> float:
                return x + by if kind == "integer" else math.nextafter(x, x + by)

            if "minimum" in branch:
                yield branch["minimum"], step(branch["minimum"], -1)
            if "exclusiveMinimum" in branch:
                yield step(branch["exclusiveMinimum"], 1), branch["exclusiveMinimum"]
            if "maximum" in branch:
                yield branch["maximum"], step(branch["maximum"], 1)
        elif kind == "string" and "maxLength" in branch:
            yield "x" * branch["maxLength"], "x" * (branch["maxLength"] + 1)
        elif kind == "array":
            if "minItems" in branch:
                yield items(field, branch["minItems"]), items(field, branch["minItems"] - 1)
            if "maxItems" in branch:
                yield items(field, branch["maxItems"]), items(field, branch["maxItems"] + 1)
            for good, bad in edges(field, branch["items"]):
                yield [good], [bad]
        elif kind == "object" and isinstance(branch.get("additionalProperties"), dict):
            for good, bad in edges(field, branch["additionalProperties"]):
                yield {"1": good}, {"1": bad}


def test_the_documents_bounds_are_the_ones_the_lead_enforces() -> None:
    """Each bound the document states, on each request's fields: a value on the bound is
    served, one just past it is a 400 naming the field."""
    lead = ScriptedLead(QWEN25, n_ctx=1 << 16)  # a template that shows tools, room for them
    document = get_document(lead)
    schemas = document["components"]["schemas"]
    cases = []
    walked = set()
    for path, (base, name) in BODIES.items():
        body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"$ref": f"#/components/schemas/{name}"}, path
        for field, schema in schemas[name]["properties"].items():
            for good, bad in edges(field, schema):
                walked.add((path, field))
                cases.append((path, {**base, **NEEDS.get(field, {}), field: good}, None))
                cases.append((path, {**base, **NEEDS.get(field, {}), field: bad}, field))
    for field in ("temperature", "top_p", "min_p", "repeat_penalty", "seed", "n", "stop"):
        assert ("/v1/completions", field) in walked, field
    assert ("/v1/chat/completions", "top_logprobs") in walked
    assert ("/detokenize", "tokens") in walked

    async def go() -> None:
        async with client(lead) as c:
            for path, body, param in cases:
                r = await c.post(path, json=body)
                if param is None:
                    assert r.status_code == 200, (path, str(body)[:200], r.text)
                else:
                    assert_error(r, 400, param)

    run(go())


def test_the_documents_defaults_are_the_ones_the_lead_runs_with() -> None:
    """A request that leaves a field out runs with the default the document states (top_p
    0.95, ...); seed -1 is a random seed, a max_tokens of null the rest of the context."""
    lead = ScriptedLead()
    schemas = get_document(lead)["components"]["schemas"]

    async def go(path: str, body: dict[str, Any]) -> httpx.Response:
        async with client(lead) as c:
            return await c.post(path, json=body)

    for path in ("/v1/completions", "/v1/chat/completions"):
        base, name = BODIES[path]
        lead.jobs.clear()
        response = run(go(path, base))
        [job] = lead.jobs
        s = job.sampling
        runtime = {
            "n": len(lead.jobs),
            "stream": response.headers["content-type"].startswith("text/event-stream"),
            "seed": -1 if s.seed is None else s.seed,
            "max_tokens": job.max_tokens,
            "logprobs": False if s.logprobs is None else s.logprobs,
            **{f: getattr(s, f) for f in ("temperature", "top_k", "top_p", "min_p")},
            **{f: getattr(s, f) for f in ("repeat_penalty", "repeat_last_n")},
            **{f: getattr(s, f) for f in ("presence_penalty", "frequency_penalty")},
        }
        if path == "/v1/completions":
            runtime["echo"] = False  # a completion never echoes its prompt (true is refused)
        defaults = {f: p.get("default") for f, p in schemas[name]["properties"].items()}
        stated = {f: d for f, d in defaults.items() if d is not None}
        assert set(stated) <= set(runtime), set(stated) - set(runtime)  # all of them checked
        for field, value in runtime.items():
            if field == "max_tokens" and defaults[field] is None:
                assert value == N_CTX, path  # null: up to the context
            elif field == "logprobs" and defaults[field] is None:
                assert value is False, path  # null: no logprobs
            else:
                assert defaults[field] == value, (path, field)
        assert defaults["top_p"] == s.top_p == 0.95


def test_cors_is_off_by_default_and_answers_the_origins_given() -> None:
    """A browser's preflight: 405 without --cors-origins (no page may call the API); with
    it, allowed for the origins given, with the Authorization header, never credentials."""
    lead = ScriptedLead()
    preflight = {
        "Origin": "https://app.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }

    async def go(origins: tuple[str, ...], origin: str) -> tuple[httpx.Response, httpx.Response]:
        app = Api(lead, None, None, lambda h: True, 1 << 20).app(cors_origins=origins)  # type: ignore[arg-type]
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://lead"
        ) as c:
            headers = {**preflight, "Origin": origin}
            before = await c.options("/v1/chat/completions", headers=headers)
            after = await c.post(
                "/v1/completions", json={"prompt": "hi"}, headers={"Origin": origin}
            )
            return before, after

    before, after = run(go((), "https://app.example.com"))
    assert before.status_code == 405 and "access-control-allow-origin" not in after.headers
    before, after = run(go(("https://app.example.com",), "https://app.example.com"))
    assert before.status_code == 200, before.text
    assert before.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "authorization" in before.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in before.headers
    assert after.status_code == 200
    assert after.headers["access-control-allow-origin"] == "https://app.example.com"
    before, _ = run(go(("https://app.example.com",), "https://evil.example"))
    assert before.status_code == 400  # an origin not given
    before, after = run(go(("*",), "https://anywhere.example"))
    assert before.status_code == 200 and after.headers["access-control-allow-origin"] == "*"


def test_verifier_sessions_expire_when_idle_and_the_oldest_goes_when_full() -> None:
    now = [0.0]
    api = Api(ScriptedLead(), None, None, lambda header: True, 1 << 20)  # type: ignore[arg-type]
    api.verifier.clock = lambda: now[0]
    api.verifier.max_sessions = 2

    async def go() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=api.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://lead") as c:

            async def verify(session: str) -> httpx.Response:
                return await c.post("/verify", json={"draft_tokens": [5], "session": session})

            for name in ("a", "b"):
                r = await c.post("/prefill", json={"prompt": [1, 2, 3], "session": name})
                assert r.json()["prompt_ids"] == [1, 2, 3]
            assert (await verify("a")).status_code == 200
            now[0] += IDLE_SECONDS - 1
            assert (await verify("a")).status_code == 200  # used: idle again from now
            now[0] += 2  # b has been idle too long; a has not
            assert (await verify("b")).json()["error"]["param"] == "session"
            assert (await verify("a")).status_code == 200
            for name in ("c", "d"):  # two sessions at most: a, used longest ago, goes
                await c.post("/prefill", json={"prompt": [1, 2, 3], "session": name})
            assert (await verify("a")).status_code == 400
            return (await c.get("/stats")).json()  # type: ignore[no-any-return]

    stats = run(go())
    assert set(stats["sessions"]) == {"c", "d"}
    assert stats["verifications"] == 3  # forgotten sessions' still counted


def test_the_engines_snapshots_are_the_wire_shapes_field_for_field() -> None:
    """/health and /slots are the engine's Status and Slot as they are, with only what
    follows from them (busy, status) or lies beyond the engine (the drafters)."""
    assert {f.name for f in fields(Status)} == Health.__annotations__.keys() - {"status", "busy"}
    assert {f.name for f in fields(Slot)} == SlotState.__annotations__.keys() - {"drafters"}
    status = Status("m", 1, False, slots=2, slots_busy=1, queued=0, time=5.0)
    assert health_body(status) == {
        "status": "ok",
        "model": "m",
        "drafters": 1,
        "local_drafter": False,
        "busy": True,
        "slots": 2,
        "slots_busy": 1,
        "queued": 0,
        "time": 5.0,
    }
    slot = Slot(0, 64, True, False, n_cached=3, n_prompt_tokens=0, n_decoded=0)
    assert slot_state(slot, [])["n_cached"] == 3 and slot_state(slot, [])["drafters"] == []
