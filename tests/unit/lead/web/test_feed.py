"""The web page's server side: where streamed text came from, the events feed, the assets."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.websockets import WebSocket

from duo import sse
from duo.auth import Keys
from duo.channel.backs import Backs, Remote
from duo.channel.endpoint import _peer
from duo.core.rounds import Round
from duo.core.stats import SourceStats, Stats
from duo.core.text import Chunk
from duo.errors import DuoError
from duo.lead.engine.events import Delta, deltas
from duo.lead.format import duo_error_response
from duo.lead.openai.origin import StreamOrigins
from duo.lead.routes import starlette_routes
from duo.lead.web.feed import Feed, Rates
from duo.lead.web.page import CSP, Web, asset


def round_of(tokens: tuple[int, ...], accepted: int, source: str | None) -> Round:
    return Round(tokens, accepted, accepted, 0.01, 0.01, None, source)


# -- where text came from -------------------------------------------------------------------


def test_a_round_becomes_a_drafted_delta_then_the_main_models_own() -> None:
    r = round_of((1, 2, 3, 4), 3, "back:gpu")
    assert deltas(Chunk("abc", "d"), r) == [
        Delta("abc", "back:gpu", (1, 2, 3)),
        Delta("d", None, (4,)),
    ]


def test_a_round_without_accepted_tokens_is_the_main_models_alone() -> None:
    assert deltas(Chunk("", "x"), round_of((7,), 0, None)) == [Delta("x", None, (7,))]


def test_an_end_of_generation_token_inside_the_draft_is_not_counted() -> None:
    # 3 draft tokens accepted, the third one ended the generation and was cut
    r = round_of((1, 2), 3, "ngram")
    assert deltas(Chunk("ab", ""), r) == [Delta("ab", "ngram", (1, 2))]


def test_held_back_text_carries_its_tokens_to_the_next_chunk() -> None:
    origin = StreamOrigins()
    assert origin.of(Delta("", "ngram", (1, 2))) is None  # held back: maybe a stop string
    assert origin.of(Delta("stop?", None, (3,))) == {"source": None, "tokens": 3}
    assert origin.of(Delta("x", "back:a", (4,))) == {"source": "back:a", "tokens": 1}


# -- the events feed ------------------------------------------------------------------------


def remote(name: str) -> Remote:
    r = Remote(name, lambda msg: None)
    r.host, r.model = "10.0.0.7", "draft-q4"
    return r


def make_feed(backs: Backs, by_source: dict[str, SourceStats] | None = None) -> Feed:
    health = {"model": "main", "busy": True, "queued": 2, "local_drafter": False}
    return Feed(backs, lambda: dict(health), lambda: by_source or {}, lambda: 5, interval=0.05)


def parse(data: bytes) -> tuple[str, dict[str, Any]]:
    (event,) = sse.iter_events(data.decode().splitlines())
    assert event.name is not None
    return event.name, event.json()


async def next_event(stream: AsyncIterator[bytes], kind: str) -> dict[str, Any]:
    async def find() -> dict[str, Any]:
        async for data in stream:
            got, payload = parse(data)
            if got == kind:
                return payload
        raise AssertionError("the stream ended")

    return await asyncio.wait_for(find(), 5)


def test_the_feed_tells_joins_leaves_state_and_responses() -> None:
    async def scenario() -> None:
        backs = Backs()
        feed = make_feed(backs, {"back:gpu": SourceStats(drafted=10, accepted=8)})
        stream = feed.stream()
        first = await next_event(stream, "state")
        assert first["busy"] is True and first["queued"] == 2 and first["backs"] == []
        assert first["requests"] == 5

        gpu = remote("gpu")
        backs.join(gpu)
        joined = (await next_event(stream, "join"))["back"]
        assert joined["name"] == "gpu" and joined["host"] == "10.0.0.7"
        assert joined["model"] == "draft-q4" and joined["acceptance_rate"] == 0.8

        gpu.received += 40  # draft tokens arrive
        state = await next_event(stream, "state")
        [row] = state["backs"]
        assert row["name"] == "gpu" and row["received"] == 40

        stats = Stats(tokens=12, rounds=4, drafted=9, accepted=6, decode_seconds=0.5)
        await asyncio.to_thread(feed.finished, stats)  # from another thread, as the engine's
        response = await next_event(stream, "response")
        assert response["timings"]["predicted_n"] == 12
        assert response["timings"]["draft_n_accepted"] == 6

        backs.leave(gpu)
        assert (await next_event(stream, "leave"))["back"]["name"] == "gpu"
        assert (await next_event(stream, "state"))["backs"] == []
        await stream.aclose()  # type: ignore[attr-defined]
        assert not feed._subscribers

    asyncio.run(scenario())


def test_a_subscriber_that_does_not_read_is_dropped() -> None:
    async def scenario() -> None:
        backs = Backs()
        feed = make_feed(backs)
        stream = feed.stream()
        await next_event(stream, "state")
        for i in range(400):  # nobody reads: the queue fills up
            backs.join(remote(f"b{i}"))
        assert not feed._subscribers
        kinds = []
        async for data in stream:  # what was queued, then the end
            kinds.append(parse(data)[0])
        assert 0 < len(kinds) <= 256

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_drafts_per_second_are_measured_between_state_events() -> None:
    backs = Backs()
    gpu = remote("gpu")
    backs.join(gpu)
    feed = make_feed(backs)
    rates = Rates()
    assert rates.rate(gpu, 10.0) == 0.0  # first sight
    gpu.received += 50
    assert rates.rate(gpu, 10.5) == pytest.approx(100.0)
    backs.leave(gpu)
    rates.keep(backs.remotes)
    assert not rates._seen
    assert feed.state()["backs"] == []


# -- the page and its assets ----------------------------------------------------------------


def test_every_asset_the_page_names_is_served() -> None:
    page = asset("index.html")
    assert page is not None
    names = re.findall(r'(?:src|href)="/ui/([^"]+)"', page.decode())
    assert {"app.js", "markdown.js", "style.css"} <= set(names)
    for name in names:
        assert asset(name), name


@pytest.mark.parametrize(
    "name",
    [
        *("", "../web.py", "..", ".hidden.js", "web.py", "a/b.js", "__init__.py", "x\\y.js"),
        *("a" * 300 + ".js", "a\0.js"),  # too long for the file system; a NUL
    ],
)
def test_nothing_else_is_served(name: str) -> None:
    assert asset(name) is None


def test_no_script_parses_html() -> None:
    """Model text reaches the page as text nodes only: no HTML parsing sinks."""
    for name in ("app.js", "markdown.js"):
        data = asset(name)
        assert data is not None, f"{name} is not served"
        source = data.decode()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in source, (name, sink)


def get(path: str, keys: tuple[str, ...] = ()) -> httpx.Response:
    web = Web(make_feed(Backs()))
    handlers = {DuoError: lambda request, e: duo_error_response(e)}
    routes = starlette_routes(web.operations(), Keys(api=keys).allows_api, max_body=0)
    app = Starlette(routes=routes, exception_handlers=handlers)  # type: ignore[dict-item]

    async def fetch() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get(path)

    return asyncio.run(fetch())


def test_the_events_feed_takes_the_api_key() -> None:
    r = get("/v1/duo/events", keys=("k",))
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"


def test_the_page_carries_its_security_headers() -> None:
    r = get("/")
    assert r.status_code == 200
    assert r.headers["content-security-policy"] == CSP
    assert "'unsafe-inline'" not in CSP and "'unsafe-eval'" not in CSP
    assert r.headers["x-content-type-options"] == "nosniff"


def test_closing_the_feed_ends_its_streams() -> None:
    async def scenario() -> None:
        feed = make_feed(Backs())
        stream = feed.stream()
        await next_event(stream, "state")
        feed.close()
        rest = [parse(data)[0] async for data in stream]
        assert set(rest) <= {"state"}  # at most a state event already due, then the end
        later = [data async for data in feed.stream()]
        assert later == []  # a stream opened after close ends at once

    asyncio.run(asyncio.wait_for(scenario(), 5))


def websocket(client: str, headers: dict[str, str]) -> WebSocket:
    scope = {
        "type": "websocket",
        "path": "/v1/drafter",
        "headers": [(k.encode(), v.encode("latin-1")) for k, v in headers.items()],
        "client": (client, 40000),
    }

    async def nothing() -> Any:
        raise AssertionError("not used")

    return WebSocket(scope, nothing, nothing)


@pytest.mark.parametrize(
    ("client", "headers", "expected"),
    [
        ("10.0.0.9", {"x-duo-model": "draft-q4"}, ("10.0.0.9", "draft-q4")),
        ("10.0.0.9", {}, ("10.0.0.9", "")),
        # a supervisor on loopback relays the address it saw; anyone else cannot
        ("127.0.0.1", {"x-duo-peer": "10.0.0.5"}, ("10.0.0.5", "")),
        ("10.0.0.9", {"x-duo-peer": "1.2.3.4"}, ("10.0.0.9", "")),
        # shown, never trusted: no control characters, at most 64 bytes
        ("10.0.0.9", {"x-duo-model": "a\x1b[31mb" + "x" * 100}, ("10.0.0.9", "a[31mb" + "x" * 57)),
    ],
)
def test_what_the_dashboard_shows_of_a_back(
    client: str, headers: dict[str, str], expected: tuple[str, str]
) -> None:
    assert _peer(websocket(client, headers)) == expected
