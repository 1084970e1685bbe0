"""`duo chat` without a network: SSE parsing, history, stats, errors, and whole sessions
against an in-process fake lead (httpx.MockTransport)."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from duo.cli import chat
from duo.cli.chat import (
    History,
    command,
    error_text,
    format_stats,
    http_url,
    sse_events,
    stream_answer,
)
from duo.errors import ClientError

FINAL = {
    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 128, "total_tokens": 137},
    "timings": {
        "predicted_n": 128,
        "predicted_per_second": 71.28,
        "draft_n": 40,
        "draft_n_accepted": 30,
        "mean_acceptance_length": 1.94,
    },
}


def delta(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def sse(*events: dict[str, Any]) -> list[str]:
    lines = []
    for event in events:
        lines += [f"data: {json.dumps(event)}", ""]
    return [*lines, "data: [DONE]", ""]


# -- pure parts ---------------------------------------------------------------------------


def test_sse_events_skips_non_data_lines_and_stops_at_done() -> None:
    lines = [": comment", "", "event: x", 'data: {"a": 1}', "", 'data:{"b": 2}', "", "data: [1]"]
    lines += ["", "data: [DONE]", "", 'data: {"after": true}', ""]
    assert list(sse_events(lines)) == [{"a": 1}, {"b": 2}]


def test_sse_events_rejects_malformed_json() -> None:
    with pytest.raises(ClientError, match="malformed"):
        list(sse_events(["data: {not json"]))


def test_stream_answer_writes_deltas_and_returns_the_final_chunk() -> None:
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    written: list[str] = []
    text, final = stream_answer(sse(role, delta("Hel"), delta("lo"), FINAL), written.append)
    assert written == ["Hel", "lo"]
    assert text == "Hello"
    assert final == FINAL


def test_stream_answer_raises_a_streamed_error() -> None:
    error = {"error": {"message": "the engine\nfailed", "type": "server_error"}}
    with pytest.raises(ClientError, match=r"^the engine failed$"):
        stream_answer(sse(delta("x"), error), lambda _: None)


def test_error_text() -> None:
    assert error_text({"error": {"message": "bad  value\n here"}}, "f") == "bad value here"
    assert error_text({"error": "plain"}, "f") == "plain"
    assert error_text({"detail": "x"}, "f") == "f"
    assert error_text(None, "f") == "f"


def test_history_puts_the_system_prompt_first_and_new_keeps_it() -> None:
    h = History("be brief")
    assert h.messages("q1") == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "q1"},
    ]
    h.add("q1", "a1")
    assert [m["content"] for m in h.messages("q2")] == ["be brief", "q1", "a1", "q2"]
    h.reset()
    assert [m["content"] for m in h.messages("q3")] == ["be brief", "q3"]


def test_history_without_a_system_prompt_and_unanswered_questions_are_not_kept() -> None:
    h = History()
    h.messages("asked, but the answer failed")
    assert h.messages("q") == [{"role": "user", "content": "q"}]


def test_format_stats() -> None:
    assert format_stats(FINAL) == (
        "[128 tokens, 71.3 tok/s, drafted 40, accepted 30, mean acceptance length 1.9]"
    )
    cut = {**FINAL, "choices": [{"delta": {}, "finish_reason": "length"}]}
    assert str(format_stats(cut)).endswith(", cut at the token limit]")
    assert format_stats({"usage": FINAL["usage"]}) is None
    assert format_stats({}) is None


def test_reason_is_short_and_readable() -> None:
    assert chat.reason(httpx.ConnectError("[Errno 111] Connection refused")) == (
        "connection refused"
    )
    assert chat.reason(httpx.ConnectTimeout("slow")) == "timed out"


def test_response_errors() -> None:
    assert chat.response_error(httpx.Response(401)).fatal
    e = chat.response_error(httpx.Response(400, json={"error": {"message": "too long"}}))
    assert (str(e), e.fatal) == ("too long", False)
    assert str(chat.response_error(httpx.Response(502, text="<html>"))) == "HTTP 502 Bad Gateway"


@pytest.mark.parametrize("url", ["ftp://host", "http://", "http://h:x", "h:x"])
def test_bad_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse(["--url", url])
    assert exit_info.value.code == 2


# -- whole sessions against a fake lead ---------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    chat.add_chat_parser(parser.add_subparsers())
    return parser.parse_args(["chat", *argv])


Handler = Callable[[httpx.Request], httpx.Response]


def fake_lead(requests: list[dict[str, Any]], key: str | None = None) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok", "model": "fake"})
        if key and request.headers.get("authorization") != f"Bearer {key}":
            return httpx.Response(401, json={"error": {"message": "invalid or missing API key"}})
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": []})
        body = json.loads(request.content)
        requests.append(body)
        question = body["messages"][-1]["content"]
        if question == "fail":
            return httpx.Response(400, json={"error": {"message": "'max_tokens' is wrong"}})
        text = "\n".join(sse(delta("re: "), delta(question), FINAL))
        return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})

    return handle


def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    handler: Handler,
    stdin: str,
    *argv: str,
) -> tuple[int, str, str]:
    real_client = httpx.Client

    def client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(handler), **kwargs)

    monkeypatch.setattr(httpx, "Client", client)
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = chat.cmd_chat(parse(list(argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_piped_session(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requests: list[dict[str, Any]] = []
    stdin = "one\n\ntwo\nfail\n:new\nthree\n:quit\nnever asked\n"
    code, out, err = run(
        monkeypatch, capsys, fake_lead(requests), stdin, "--system", "sys", "-n", "16"
    )
    assert code == 0
    assert out == "re: one\nre: two\nre: three\n"  # no prompt when stdin is not a terminal
    assert "you>" not in out
    assert err.splitlines() == [
        "[128 tokens, 71.3 tok/s, drafted 40, accepted 30, mean acceptance length 1.9]",
        "[128 tokens, 71.3 tok/s, drafted 40, accepted 30, mean acceptance length 1.9]",
        "duo chat: 'max_tokens' is wrong",
        "[128 tokens, 71.3 tok/s, drafted 40, accepted 30, mean acceptance length 1.9]",
    ]
    contents = [[m["content"] for m in r["messages"]] for r in requests]
    assert contents == [
        ["sys", "one"],
        ["sys", "one", "re: one", "two"],
        ["sys", "one", "re: one", "two", "re: two", "fail"],
        ["sys", "three"],  # :new forgot the conversation but kept the system prompt
    ]
    assert all(r["stream"] is True and r["max_tokens"] == 16 for r in requests)


def test_eof_ends_the_session_and_no_stats_hides_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requests: list[dict[str, Any]] = []
    code, out, err = run(monkeypatch, capsys, fake_lead(requests), "hi\n", "--no-stats")
    assert (code, out, err) == (0, "re: hi\n", "")
    assert "max_tokens" not in requests[0]


@pytest.mark.parametrize("key", [None, "wrong"])
def test_a_refused_api_key_ends_the_session_before_any_question(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], key: str | None
) -> None:
    requests: list[dict[str, Any]] = []
    args = ["--api-key", key] if key else []
    code, out, err = run(monkeypatch, capsys, fake_lead(requests, key="secret"), "hi\n", *args)
    assert (code, out, err) == (2, "", "duo chat: the lead refused the API key\n")
    assert requests == []


def test_the_right_api_key_is_sent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requests: list[dict[str, Any]] = []
    handler = fake_lead(requests, key="secret")
    code, out, _ = run(monkeypatch, capsys, handler, "hi\n", "--api-key", "secret")
    assert (code, out) == (0, "re: hi\n")


def test_an_unreachable_lead(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    code, out, err = run(monkeypatch, capsys, refuse, "hi\n", "--url", "http://127.0.0.1:1")
    assert (code, out) == (2, "")
    assert err == (
        "duo chat: cannot reach the lead at http://127.0.0.1:1 (connection refused); "
        "start it with `duo lead`\n"
    )


def test_ctrl_c_during_an_answer_returns_to_the_prompt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requests: list[dict[str, Any]] = []
    lead = fake_lead(requests)

    def handler(request: httpx.Request) -> httpx.Response:
        response = lead(request)
        if request.url.path == "/v1/chat/completions" and len(requests) == 1:

            def interrupted() -> Iterator[bytes]:
                yield b'data: {"choices": [{"delta": {"content": "par"}}]}\n\n'
                raise KeyboardInterrupt

            return httpx.Response(200, content=interrupted())
        return response

    code, out, err = run(monkeypatch, capsys, handler, "one\ntwo\n")
    assert code == 0
    assert out == "par\nre: two\n"
    assert err.splitlines()[0] == "[interrupted]"
    assert [m["content"] for m in requests[1]["messages"]] == ["two"]  # "one" was dropped


@pytest.mark.parametrize(
    ("line", "what"),
    [
        (":quit", "quit"),
        ("/bye", "quit"),
        ("/exit", "quit"),
        (":new", "new"),
        ("/clear", "new"),
        (":help", "help"),
        ("/?", "help"),
        (":frobnicate", "unknown"),
        ("/quitt", "unknown"),
        ("what does /etc/hosts hold?", None),
        ("/etc/hosts", None),  # a path, sent as it is
        (":) thanks", None),
        ("hello", None),
    ],
)
def test_chat_commands_are_not_sent_to_the_model(line: str, what: str | None) -> None:
    assert command(line) == what


@pytest.mark.parametrize(
    ("given", "url"),
    [("127.0.0.1:5555", "http://127.0.0.1:5555"), ("https://lead:8443/", "https://lead:8443")],
)
def test_chat_takes_a_lead_url_as_duo_back_does(given: str, url: str) -> None:
    assert http_url(given) == url
