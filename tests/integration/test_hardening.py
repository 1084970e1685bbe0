"""Hostile input against a real `duo lead`: no body stalls the server, costs it unbounded
memory or ends in a 500; abandoned requests stop using the engine; every refusal is a 4xx
OpenAI-style JSON error on a connection that stays open."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from duo.llama.backend import Model
from duo.sse import json_events

from .conftest import Cluster, Proc, health, wait_until

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
MAX_BODY = 8 * MiB  # the lead's default --max-body
USER = [{"role": "user", "content": "hi"}]
COUNTING = "10, 20, 30,"  # greedy: counts on by tens for thousands of tokens
LONG = 4000  # tokens: a minute or so of generation on a shared 2-core machine


@pytest.fixture(scope="module")
def served(
    pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, str]]:
    """One lead with the default settings (the default --max-body and -c 4096)."""
    with Cluster(tmp_path_factory.mktemp("hardening")) as cluster:
        yield cluster.lead("-m", str(pair[0]), "--quiet")


@pytest.fixture
def lead(served: tuple[Proc, str]) -> Iterator[str]:
    """The shared lead's URL: idle before each test, alive after."""
    proc, url = served
    idle = lambda: not health(url)["busy"] and health(url)["queued"] == 0  # noqa: E731
    wait_until(idle, 300, "an idle lead", proc)
    yield url
    assert proc.alive(), proc.output()[-3000:]


# -- helpers --------------------------------------------------------------------------------


def assert_error(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("application/json"), r.headers
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == "invalid_request_error", error
    if code is not None:
        assert error["code"] == code, error
    return error  # type: ignore[no-any-return]


def client_port(r: httpx.Response) -> int:
    """The client-side port of the connection that carried r: equal ports, one connection."""
    return int(r.extensions["network_stream"].get_extra_info("client_addr")[1])


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def peak_rss(proc: Proc) -> int:
    """The process's peak resident memory in bytes (VmHWM)."""
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def huge_text(n_bytes: int) -> str:
    line = "the quick brown fox jumps over the lazy dog\n"
    return line * (n_bytes // len(line))


def post_and_leave(url: str, path: str, body: dict[str, Any]) -> socket.socket:
    """POST on a raw socket and return it unread: closing it is the client going away."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=10)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def time_to_first_token(url: str, prompt: str, n: int, timeout: float) -> tuple[float, int]:
    """Stream a completion: (seconds until its first text arrived, tokens generated)."""
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True}
    started = time.monotonic()
    first: float | None = None
    generated = None
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        for chunk in json_events(r.iter_lines()):
            if chunk["choices"][0]["text"] and first is None:
                first = time.monotonic() - started
            if "usage" in chunk:
                generated = chunk["usage"]["completion_tokens"]
    assert first is not None, "no text streamed"
    assert generated is not None, "no usage in the last chunk"
    return first, generated


# -- 1. size limits and a server that keeps answering --------------------------------------


def test_over_limit_bodies_get_413_without_the_memory(served: tuple[Proc, str], lead: str) -> None:
    body = json.dumps({"prompt": huge_text(MAX_BODY + MiB), "max_tokens": 1}).encode()
    rss = peak_rss(served[0])
    with httpx.Client(base_url=lead, timeout=60) as client:
        first = client.get("/health")
        assert first.status_code == 200
        r = client.post("/v1/completions", content=body)  # with a Content-Length
        error = assert_error(r, 413, "request_too_large")
        assert error["param"] is None

        def chunks() -> Iterator[bytes]:  # chunked: no Content-Length to go by
            for i in range(0, len(body), 64 * 1024):
                yield body[i : i + 64 * 1024]

        r = client.post("/v1/chat/completions", content=chunks())
        assert_error(r, 413, "request_too_large")
        after = client.get("/health")
        assert after.status_code == 200
        assert client_port(after) == client_port(first), "the connection was not kept"
        r = client.post("/v1/completions", json={"prompt": "1, 2, 3,", "max_tokens": 4})
        assert r.status_code == 200, r.text
    # Never more than the limit held (plus the parse of what was read): not the whole body,
    # its tokens and their Python objects (hundreds of MB before).
    grown = peak_rss(served[0]) - rss
    assert grown < 64 * MiB, f"the lead's peak memory grew by {grown / MiB:.0f} MiB"


def test_health_answers_while_near_limit_prompts_are_processed(lead: str) -> None:
    near = MAX_BODY - MiB // 2
    bodies = [
        ("/v1/completions", {"prompt": huge_text(near), "max_tokens": 1}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": huge_text(near)}]}),
        ("/v1/completions", {"prompt": "é" * (near // 2), "max_tokens": 1}),
    ]
    answers: list[httpx.Response] = []
    errors: list[BaseException] = []
    durations: list[float] = []

    def send(path: str, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        assert MAX_BODY - MiB < len(data) <= MAX_BODY
        started = time.monotonic()
        try:
            answers.append(httpx.post(f"{lead}{path}", content=data, timeout=120))
        except BaseException as e:
            errors.append(e)
        durations.append(time.monotonic() - started)

    threads = [threading.Thread(target=send, args=b, daemon=True) for b in bodies]
    latencies: list[float] = []
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while not latencies or any(t.is_alive() for t in threads):
        assert time.monotonic() < deadline, "the near-limit requests got no answer"
        started = time.monotonic()
        assert httpx.get(f"{lead}/health", timeout=30).status_code == 200
        latencies.append(time.monotonic() - started)
        time.sleep(0.05)  # pacing of the probe, not a wait for anything
    for t in threads:
        t.join(5)
    assert not errors, errors
    assert len(answers) == len(bodies)
    # Measured against the requests themselves, so a slow or loaded host scales both: a
    # loop that tokenized (or parsed) a body itself would hold /health for about as long.
    most = max(2.0, max(durations) / 4)
    assert max(latencies) < most, f"/health took {max(latencies):.1f} s: {latencies}, {durations}"
    for r in answers:  # none of them can fit a 4096-token context
        assert_error(r, 400, "context_length_exceeded")
    r = httpx.post(f"{lead}/v1/completions", json={"prompt": "a, b,", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200, r.text


def test_no_token_stands_for_more_bytes_than_the_bound(pair: tuple[Path, Path]) -> None:
    """The early size check's premise, on the real tokenizer: a prompt of L bytes has at
    least L / longest tokens, even where the text is as dense as it can be."""
    with Model(pair[0], n_ctx=64) as model:
        longest = model.vocab.longest_token_bytes()
        assert longest is not None  # SmolLM2: byte-level BPE, no stripping special tokens
        pieces = sorted(range(model.n_vocab), key=lambda t: -len(model.vocab.piece(t)))[:50]
        texts = [
            " " * 10_000,
            "\n" * 10_000,
            "-" * 10_000,
            "".join(model.vocab.piece(t).decode("utf-8", "replace") for t in pieces) * 20,
            "<|im_start|>" * 1000 + "<|endoftext|>" * 1000,  # special tokens, parsed
            "".join(chr(c) for c in range(0x20, 0x3000)),
            "\U0001f600" * 2000,
        ]
        for text in texts:
            n_bytes = len(text.encode())
            n_tokens = len(model.vocab.tokenize(text, add_special=False))
            assert n_tokens * longest >= n_bytes, (text[:40], n_tokens, n_bytes, longest)


def test_prompts_are_rendered_and_tokenized_off_the_event_loop(pair: tuple[Path, Path]) -> None:
    """In-process, with the real model: the Jinja chat template and llama_tokenize run on
    worker threads, so a long prompt leaves the event loop free (see the test above)."""
    from duo.lead.build import build_lead
    from duo.lead.engine.lead import LeadConfig
    from duo.session.config import ModelConfig, SpecConfig

    config = LeadConfig(
        models=ModelConfig(main=pair[0], draft=None, n_ctx=256),
        spec=SpecConfig(mode="target", adaptive=False),
    )
    service = build_lead(config)
    lead = service.lead
    try:
        threads: dict[str, set[int]] = {"render_chat": set(), "tokenize": set()}
        for name, seen in threads.items():
            real = getattr(lead.session.main.vocab, name)

            def spy(*args: Any, _real: Any = real, _seen: set[int] = seen, **kw: Any) -> Any:
                _seen.add(threading.get_ident())
                return _real(*args, **kw)

            setattr(lead.session.main.vocab, name, spy)

        async def requests() -> tuple[int, list[httpx.Response]]:
            transport = httpx.ASGITransport(app=service.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://duo") as client:
                sent = [
                    client.post("/v1/completions", json={"prompt": "1, 2,", "max_tokens": 2}),
                    client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2}),
                ]
                answers = await asyncio.wait_for(asyncio.gather(*sent), 120)
            return threading.get_ident(), list(answers)

        loop_thread, answers = asyncio.run(requests())
        for r in answers:
            assert r.status_code == 200, r.text
        assert threads["render_chat"] and threads["tokenize"], threads
        assert loop_thread not in threads["render_chat"] | threads["tokenize"]
    finally:
        service.close()


# -- 2. abandoned requests -----------------------------------------------------------------


CANCELLED = 'duo_requests_ended_total{reason="cancelled"}'


def test_an_abandoned_running_request_stops(lead: str) -> None:
    requests = metric(lead, "duo_requests_total")
    cancelled = metric(lead, CANCELLED)
    tokens = metric(lead, "duo_tokens_generated_total")
    decode = metric(lead, "duo_decode_seconds_total")
    sock = post_and_leave(
        lead, "/v1/completions", {"prompt": COUNTING, "max_tokens": LONG, "temperature": 0}
    )
    try:
        wait_until(lambda: health(lead)["busy"], 30, "the long request running")
    finally:
        sock.close()
    ttft, generated = time_to_first_token(lead, "a, b, c,", 4, timeout=300)
    first_tokens = metric(lead, "duo_tokens_generated_total") - tokens - generated
    assert metric(lead, "duo_requests_total") - requests == 2
    assert metric(lead, CANCELLED) - cancelled == 1  # cancelled, not cut at max_tokens
    # Started (counted as a request), then stopped early: maybe before its first round.
    assert first_tokens < LONG / 2, f"the abandoned request generated {first_tokens} tokens"
    # It was cut short: the next client waited far less than the abandoned request needed.
    rate = (first_tokens + generated) / (metric(lead, "duo_decode_seconds_total") - decode)
    full = LONG / rate
    assert ttft < full / 4, f"first token after {ttft:.1f} s; the whole request is {full:.0f} s"


def test_an_abandoned_queued_request_leaves_the_queue(lead: str) -> None:
    requests = metric(lead, "duo_requests_total")
    body = {"prompt": COUNTING, "max_tokens": LONG, "temperature": 0}
    slots = health(lead)["slots"]  # every slot busy, so that the next request must wait
    running = [post_and_leave(lead, "/v1/completions", body) for _ in range(slots)]
    try:
        wait_until(lambda: health(lead)["slots_busy"] == slots, 60, "every slot running")
        queued = post_and_leave(lead, "/v1/chat/completions", {"messages": USER, **body})
        wait_until(lambda: health(lead)["queued"] == 1, 30, "the next request queued")
        queued.close()
        wait_until(lambda: health(lead)["queued"] == 0, 10, "the abandoned request dequeued")
        assert health(lead)["busy"], "the running requests ended: the check proves nothing"
    finally:
        for sock in running:
            sock.close()
    ttft, _ = time_to_first_token(lead, "a, b, c,", 4, timeout=300)
    assert ttft < 30
    # The running ones and the last one: the queued one never ran.
    assert metric(lead, "duo_requests_total") - requests == slots + 1


# -- 3-5. every field and body: 4xx, never 500, on a connection that stays open ------------


def bad_bodies(n_vocab: int) -> list[tuple[str, bytes | Any, str | None]]:
    """(path, body (JSON value, or raw bytes), the param the error must name)."""
    cmpl, chat = "/v1/completions", "/v1/chat/completions"
    hi: dict[str, Any] = {"prompt": "hi", "max_tokens": 2}
    cases: list[tuple[str, bytes | Any, str | None]] = [
        (cmpl, {**hi, "seed": -2}, "seed"),
        (cmpl, {**hi, "seed": 2**64}, "seed"),
        (cmpl, {**hi, "seed": 1.5}, "seed"),
        (cmpl, {**hi, "top_k": -1}, "top_k"),
        (cmpl, {**hi, "top_k": 4.0}, "top_k"),
        (cmpl, {**hi, "top_p": 1.5}, "top_p"),
        (cmpl, {**hi, "min_p": -0.5}, "min_p"),
        (cmpl, {**hi, "temperature": -0.1}, "temperature"),
        (cmpl, {**hi, "temperature": 10**400}, "temperature"),
        (cmpl, {**hi, "repeat_penalty": 0}, "repeat_penalty"),
        (cmpl, {**hi, "repeat_last_n": -2}, "repeat_last_n"),
        (cmpl, {**hi, "max_tokens": 1e300}, "max_tokens"),
        (cmpl, {**hi, "max_tokens": True}, "max_tokens"),
        (cmpl, {**hi, "n": 1.0}, "n"),
        (cmpl, {**hi, "stop": "x" * 5000}, "stop"),
        (cmpl, {**hi, "stream": "yes"}, "stream"),
        (cmpl, b'{"prompt": "hi", "repeat_penalty": NaN}', None),
        (cmpl, b'{"prompt": "hi", "temperature": Infinity}', None),
        (chat, b'{"messages": [], "top_p": -Infinity}', None),
        (cmpl, b'{"prompt": "hi", "temperature": 1e999}', None),
        (cmpl, b'{"prompt": "a\\ud800b"}', "prompt"),
        (chat, b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages"),
        (chat, b'{"messages": [{"role": "\\udc00", "content": "hi"}]}', "messages"),
        (cmpl, b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", None),
        (chat, b'{"messages": [' + b"{" * 50_000 + b"}" * 50_000 + b"]}", None),
        (cmpl, b'{"prompt": "\xff\xfe"}', None),
        (cmpl, b'{"prompt": ' + b"9" * 5000 + b"}", None),
        (cmpl, {"prompt": [True, 1]}, "prompt"),
        (cmpl, {"prompt": [1.0, 2]}, "prompt"),
        (cmpl, {"prompt": [-1]}, "prompt"),
        (cmpl, {"prompt": [n_vocab]}, "prompt"),
        (cmpl, {"prompt": [[1, 2]]}, "prompt"),
        (cmpl, {"prompt": []}, "prompt"),
        (cmpl, {"prompt": list(range(10**5))}, "prompt"),  # longer than the context
        (chat, {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, None),
        (
            chat,
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}] * 10**5}]},
            "messages",
        ),
        # grammars whose every token would cost the slot seconds, and a pattern no regex
        (chat, {"messages": USER, "response_format": schema({"enum": list(range(1001))})}, None),
        (chat, {"messages": USER, "response_format": schema({"enum": ["x" * 200_000]})}, None),
        (
            chat,
            {"messages": USER, "response_format": schema({"type": "string", "pattern": "^(ab$"})},
            None,
        ),
        ("/tokenize", {"content": ["a"] * 5000}, "content"),  # one text per character
    ]
    return cases


def schema(s: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}


def test_no_body_gets_a_500_and_the_connection_stays_open(lead: str) -> None:
    n_vocab = httpx.get(f"{lead}/v1/models", timeout=10).json()["data"][0]["meta"]["n_vocab"]
    with httpx.Client(base_url=lead, timeout=60) as client:
        port = client_port(client.get("/health"))
        for path, body, param in bad_bodies(n_vocab):
            if isinstance(body, bytes):
                r = client.post(path, content=body, headers={"content-type": "application/json"})
            else:
                r = client.post(path, json=body)
            error = assert_error(r, 400)
            if param is not None:
                assert error["param"] == param, (str(body)[:200], error)
            assert "Traceback" not in r.text
            after = client.get("/health")  # the same connection, still open
            assert after.status_code == 200
            assert client_port(after) == port, ("connection dropped after", str(body)[:200])


def test_a_bad_static_file_name_is_a_404(lead: str) -> None:
    for name in ("a" * 300 + ".js", "a" * 60_000 + ".js", "%00.js", "..%2fpyproject.toml"):
        r = httpx.get(f"{lead}/ui/{name}", timeout=10)
        assert r.status_code == 404, (name[:50], r.status_code, r.text[:200])
        assert r.json()["error"]["type"] == "not_found_error"


def test_values_llama_cpp_clients_send_are_served(lead: str) -> None:
    with httpx.Client(base_url=lead, timeout=120) as client:

        def ok(path: str, **body: Any) -> dict[str, Any]:
            r = client.post(path, json=body)
            assert r.status_code == 200, (body, r.text)
            return r.json()  # type: ignore[no-any-return]

        text = "1, 2, 3,"
        # seed -1 is llama.cpp's "random"; repeat_last_n -1 its "the whole context".
        ok("/v1/completions", prompt=text, max_tokens=4, seed=-1)
        ok("/v1/chat/completions", messages=USER, max_tokens=4, seed=-1, repeat_last_n=-1)
        streamed = client.post(
            "/v1/completions", json={"prompt": text, "max_tokens": 4, "seed": -1, "stream": True}
        )
        assert streamed.status_code == 200, streamed.text
        assert streamed.text.endswith("data: [DONE]\n\n"), streamed.text
        greedy: dict[str, Any] = {"prompt": text, "max_tokens": 8, "temperature": 0}
        plain = ok("/v1/completions", **greedy)["choices"][0]
        assert plain["finish_reason"] == "length"
        # Empty stop strings stop nothing; a huge max_tokens is cut to the context.
        same = ok("/v1/completions", **greedy, stop=["", ""])["choices"][0]
        assert same["text"] == plain["text"]
        cut = ok("/v1/completions", **{**greedy, "max_tokens": 10**30}, stop=",")["choices"][0]
        assert cut["finish_reason"] == "stop"
        # Sampling with the largest seed is reproducible.
        seeded = {"prompt": text, "max_tokens": 8, "temperature": 1.0, "seed": 2**64 - 1}
        first = ok("/v1/completions", **seeded)["choices"][0]["text"]
        assert ok("/v1/completions", **seeded)["choices"][0]["text"] == first
