"""Anthropic's Messages API requests translated into the chat request every door runs, and
their faults named (duo.lead.anthropic.requests); its errors in Anthropic's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from duo.errors import UsageError
from duo.lead.anthropic.messages import error_response
from duo.lead.anthropic.requests import CountTokensRequest, MessagesRequest
from duo.lead.body import decode


def request(**fields: Any) -> MessagesRequest:
    body = {"model": "any", "max_tokens": 64, **fields}
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return decode(json.dumps(body).encode(), MessagesRequest)


def fault(**fields: Any) -> UsageError:
    with pytest.raises(UsageError) as e:
        request(**fields)
    return e.value


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_system_blocks_and_text_blocks_become_chat_messages() -> None:
    r = request(
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Hello "},
                                         {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "Bye"},
        ],
    )  # fmt: skip
    chat = r.chat()
    assert [m.shown() for m in chat.messages] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Bye"},
    ]
    assert chat.max_tokens == 64


def test_a_tool_round_trip_becomes_tool_calls_and_tool_messages() -> None:
    r = request(
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Call it.", "signature": "x"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "rain"}], "is_error": True},
                {"type": "text", "text": "And now?"},
            ]},
        ],
    )  # fmt: skip
    chat = r.chat()
    shown = [m.shown() for m in chat.messages]
    assert shown[1] == {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "Call it.",
        "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    }  # fmt: skip
    assert shown[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: rain"}
    assert shown[3] == {"role": "user", "content": "And now?"}
    tools = chat.offered_tools()
    assert tools is not None and tools.choice == "required" and not tools.parallel
    assert chat.tools is not None and chat.tools[0].function.parameters == WEATHER["input_schema"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [({"type": "auto"}, "auto"), ({"type": "tool", "name": "get_weather"}, "get_weather")],
)
def test_tool_choice_is_chat_s(choice: dict[str, Any], expected: str) -> None:
    tools = request(tools=[WEATHER], tool_choice=choice).chat().offered_tools()
    assert tools is not None and tools.choice == expected


def test_tool_choice_none_offers_no_tools() -> None:
    assert request(tools=[WEATHER], tool_choice={"type": "none"}).chat().offered_tools() is None


def test_sampling_fields_carry_over() -> None:
    chat = request(stop_sequences=["\n\n"], temperature=0, top_k=5, top_p=0.5,
                   metadata={"user_id": "u"}).chat()  # fmt: skip
    assert (chat.stop, chat.temperature, chat.top_k, chat.top_p) == (["\n\n"], 0, 5, 0.5)


def test_count_tokens_takes_no_max_tokens() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "S"}
    r = decode(json.dumps(body).encode(), CountTokensRequest)
    assert [m.role for m in r.chat().messages] == ["system", "user"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "tool_result",
                                                      "tool_use_id": "toolu_9"}]}]},
         "no earlier tool_use block has the id 'toolu_9'"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
         "messages[0].content[0]: image blocks are not supported"),
        ({"messages": [{"role": "user", "content": [{"type": "video"}]}]},
         "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
         "messages[0].content[0].text"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                                      "input": {}}]}]},
         "tool_use blocks belong in an assistant turn"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": []}, "messages"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
        ({"tool_choice": {"type": "any"}}, "'tool_choice' needs 'tools'"),
        ({"tools": [{**WEATHER, "type": "web_search_20250305"}]}, "tools[0].type"),
        ({"stop_sequences": "x"}, "stop_sequences"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)  # fmt: skip
def test_bad_requests_name_the_field(fields: dict[str, Any], words: str) -> None:
    e = fault(**fields)
    assert words in e.message
    assert e.param is not None


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "invalid_request_error"), (401, "authentication_error"), (413, "request_too_large"),
     (500, "api_error"), (501, "api_error"), (503, "overloaded_error")],
)  # fmt: skip
def test_errors_have_anthropic_s_shape(status: int, kind: str) -> None:
    r = error_response(status, "what went wrong")
    assert r.status_code == status
    body = {"type": "error", "error": {"type": kind, "message": "what went wrong"}}
    assert json.loads(r.body) == body
